"""Turning a failed HTTP exchange into a one-line :class:`~.errors.ServiceError`.

Kept apart from :mod:`.session` so that the operator tooling (``segshuffle admin``,
:mod:`segshuffle.testing.operator`) can describe the services' refusals without
importing the protocol code (numpy, the accountant and scipy) it does not use.
"""

from __future__ import annotations

import httpx

from .errors import ServiceError
from .retry import retry_after_seconds
from .tls import certificate_error

PROBLEM_PREFIX = "urn:segshuffle:error:"


def service_error(response: httpx.Response, what: str) -> ServiceError:
    """A :class:`ServiceError` from a non-2xx answer, with its problem type if any."""
    problem = detail = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        kind = body.get("type")
        if isinstance(kind, str) and kind.startswith(PROBLEM_PREFIX):
            problem = kind.removeprefix(PROBLEM_PREFIX)
        if isinstance(body.get("detail"), str):
            detail = body["detail"]
    message = f"{what}: HTTP {response.status_code}"
    if problem:
        message += f" {problem}"
    if detail:
        message += f": {detail}"
    return ServiceError(message, status=response.status_code, problem=problem, detail=detail,
                        retry_after=retry_after_seconds(response.headers.get("retry-after")))


def network_error(exc: httpx.HTTPError, what: str) -> ServiceError:
    """A :class:`ServiceError` for a request that got no answer.

    A refused certificate is final (retrying cannot help): its error says so and is not
    :attr:`~ServiceError.transient`.
    """
    refused = certificate_error(exc)
    if refused is not None:
        return ServiceError(f"{what}: the service's TLS certificate is not trusted: {refused} "
                            f"(ca_file= trusts a private CA)", certificate=True)
    return ServiceError(f"{what}: {type(exc).__name__}: {exc}")
