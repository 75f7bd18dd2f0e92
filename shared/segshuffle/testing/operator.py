"""The operator calls over HTTP, one definition each, for ``segshuffle admin`` and
:class:`~segshuffle.testing.localstack.LocalStack`: the server's admin API (admin token)
and the shuffler's operator API (operator token; round status and relayed view need none).

Every failure is a :class:`~segshuffle.client.errors.ServiceError` whose message is one
line: ``WHAT: HTTP STATUS PROBLEM-TYPE: detail`` for a refusal (``problem`` and
``status`` set), ``WHAT: cannot reach URL (ConnectError)`` when there is no answer,
``WHAT: the TLS certificate of URL is not trusted: REASON`` when the service's certificate
is refused (``certificate`` set; ``ca_file=`` trusts a private CA).
:func:`read_token` and :func:`base_url` check what an operator types (``ValueError``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from segshuffle.client.errors import ServiceError
from segshuffle.client.problems import service_error
from segshuffle.client.retry import RetryPolicy
from segshuffle.client.tls import CA_FILE_ENV, certificate_error, trust
from segshuffle.wire.models import (
    CampaignList,
    CampaignSummary,
    CampaignView,
    Results,
    SigningKey,
)
from segshuffle.wire.problems import SERVICE_HEADER

ADMIN_TOKEN_ENV = "SEGSHUFFLE_ADMIN_TOKEN"
OPERATOR_TOKEN_ENV = "SEGSHUFFLE_OPERATOR_TOKEN"
MAX_TOKEN_BYTES = 4096
MAX_LIST_PAGES = 1000
"""``campaign list`` reads at most this many pages of 1000 (one million campaigns)."""
HTTP_TIMEOUT = 30.0
RELEASE_HTTP_TIMEOUT = 300.0
"""The shuffler holds a ``wait=true`` release for up to its ``release_wait`` setting."""
RELEASE_RETRY = RetryPolicy(attempts=8, initial=0.5, maximum=5.0)
"""Tries of a release request that fails transiently (11 to 23 s of waits in all)."""
_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")


def read_token(token_file: str | None, env: str) -> str:
    """The bearer token from ``token_file`` (one printable line) or the environment."""
    if token_file is not None:
        try:
            with open(token_file, "rb") as handle:
                token = handle.read(MAX_TOKEN_BYTES + 1).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read --token-file {token_file}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        source = f"--token-file {token_file}"
    else:
        token = os.environ.get(env, "").strip()
        source = env
    if not token:
        raise ValueError(f"this command needs a token: set {env} or pass --token-file")
    if len(token) > MAX_TOKEN_BYTES or not token.isprintable() or any(
            c.isspace() for c in token):
        raise ValueError(f"the token in {source} must be one printable line without spaces")
    return token


def base_url(value: str, flag: str) -> str:
    """An ``http(s)://host[:port][/path]`` base URL without a trailing slash."""
    url = value.rstrip("/")
    if not _URL.match(url):
        raise ValueError(f"{flag} must be an http(s) URL, got {value!r}")
    return url


class OperatorClient:
    """The admin calls on the server and the operator calls on the shuffler."""

    def __init__(self, *, server: str = "", shuffler: str = "", admin_token: str | None = None,
                 operator_token: str | None = None, http: httpx.Client | None = None,
                 transport: httpx.BaseTransport | None = None,
                 ca_file: str | os.PathLike[str] | None = None) -> None:
        """``http``: a client to share (not closed by :meth:`close`; it brings its own trust
        settings); ``ca_file``: PEM certificates of a private CA trusted for https URLs
        instead of the system's store (:mod:`segshuffle.client.tls`; ``ValueError`` if
        it cannot be read)."""
        if http is not None and ca_file is not None:
            raise ValueError("pass ca_file or http, not both (http brings its own trust)")
        self.server = server
        self.shuffler = shuffler
        self.admin_token = admin_token
        self.operator_token = operator_token
        self._own_http = http is None
        self._http = http or httpx.Client(timeout=HTTP_TIMEOUT, transport=transport,
                                          verify=trust(ca_file))

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> OperatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, url: str, what: str, token: str | None = None,
              **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        target = url.split("/v1/")[0]
        expected = "server" if self.server and url.startswith(self.server + "/") else \
            "shuffler"
        try:
            response = self._http.request(method, url, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            refused = certificate_error(exc)
            if refused is not None:
                raise ServiceError(f"{what}: the TLS certificate of {target} is not trusted: "
                                   f"{refused} (--ca-file FILE or {CA_FILE_ENV} trusts a "
                                   f"private CA)", certificate=True) from None
            if target.startswith("https://") and "version number" in str(exc).lower():
                raise ServiceError(f"{what}: {target} does not speak TLS (is it an http:// "
                                   f"URL?)") from None
            raise ServiceError(f"{what}: cannot reach {target} ({type(exc).__name__})"
                               ) from None
        answered_by = response.headers.get(SERVICE_HEADER)
        if answered_by is not None and answered_by != expected:
            raise ServiceError(f"{what}: {target} is the {answered_by}, not the {expected} "
                               f"(give --{expected} the {expected}'s URL)",
                               status=response.status_code)
        if response.status_code >= 400:
            error = service_error(response, what)
            if answered_by is None and response.status_code == 404:
                error = ServiceError(f"{error} (is {target} a segshuffle {expected}?)",
                                     status=404, problem=error.problem, detail=error.detail)
            raise error
        return response

    @staticmethod
    def _parse(model: type[Any], response: httpx.Response, what: str) -> Any:
        try:
            return model.model_validate(response.json())
        except ValueError:  # includes pydantic's ValidationError and bad JSON
            raise ServiceError(f"{what}: the answer is not a valid {model.__name__} "
                               f"(is the URL the right service?)",
                               status=response.status_code) from None

    # -- server (admin token) ------------------------------------------------------------------
    def create_campaign(self, body: Mapping[str, Any]) -> CampaignView:
        """``POST /v1/campaigns``."""
        response = self._call("POST", f"{self.server}/v1/campaigns", "create campaign",
                              self.admin_token, json=dict(body))
        return self._parse(CampaignView, response, "create campaign")

    def list_campaigns(self) -> list[CampaignSummary]:
        """Every campaign, following ``GET /v1/campaigns`` pages (at most MAX_LIST_PAGES)."""
        found: list[CampaignSummary] = []
        after: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params: dict[str, Any] = {"limit": 1000}
            if after is not None:
                params["after"] = after
            response = self._call("GET", f"{self.server}/v1/campaigns", "list campaigns",
                                  self.admin_token, params=params)
            page: CampaignList = self._parse(CampaignList, response, "list campaigns")
            found.extend(page.campaigns)
            if page.next is None:
                return found
            after = page.next
        raise ServiceError(f"list campaigns: more than {MAX_LIST_PAGES} pages")

    def campaign(self, campaign_id: str) -> CampaignView:
        """``GET /v1/campaigns/{cid}`` on the server."""
        response = self._call("GET", f"{self.server}/v1/campaigns/{campaign_id}",
                              "show campaign", self.admin_token)
        return self._parse(CampaignView, response, "show campaign")

    def abort(self, campaign_id: str, reason: str | None) -> CampaignView:
        """``POST /v1/campaigns/{cid}/abort`` (idempotent)."""
        body = {"reason": reason} if reason else {}
        response = self._call("POST", f"{self.server}/v1/campaigns/{campaign_id}/abort",
                              "abort campaign", self.admin_token, json=body)
        return self._parse(CampaignView, response, "abort campaign")

    def results(self, campaign_id: str) -> Results:
        """``GET /v1/campaigns/{cid}/results``."""
        response = self._call("GET", f"{self.server}/v1/campaigns/{campaign_id}/results",
                              "results", self.admin_token)
        return self._parse(Results, response, "results")

    def signing_key(self) -> str:
        """``GET /v1/signing-key``: the server's document-signing public key (base64url)."""
        response = self._call("GET", f"{self.server}/v1/signing-key", "signing key",
                              self.admin_token)
        return str(self._parse(SigningKey, response, "signing key").public_key)

    # -- shuffler (public reads, operator token for releases) ---------------------------------
    def relayed_view(self, campaign_id: str) -> CampaignView:
        """The campaign view as the shuffler relays it (no token)."""
        response = self._call("GET", f"{self.shuffler}/v1/campaigns/{campaign_id}",
                              "campaign", None)
        return self._parse(CampaignView, response, "campaign")

    def round_status(self, campaign_id: str, round_number: int) -> dict[str, Any]:
        """``GET /v1/campaigns/{cid}/rounds/{r}``: participants, required, state, reason."""
        what = f"round {round_number} status"
        response = self._call(
            "GET", f"{self.shuffler}/v1/campaigns/{campaign_id}/rounds/{round_number}",
            what, None)
        try:
            status = response.json()
        except ValueError:
            status = None
        if not isinstance(status, dict) or not {"participants", "required", "state"} <= set(
                status):
            raise ServiceError(f"{what}: the answer is not a round status "
                               f"(is the URL the shuffler's?)", status=response.status_code)
        return status

    def release(self, campaign_id: str, round_number: int, *, wait: bool, timeout: float,
                interval: float = 0.5,
                sleep: Callable[[float], None] = time.sleep) -> tuple[dict[str, Any], bool]:
        """``POST .../rounds/{r}/release``; returns (answer, acknowledged by the server).

        A release is idempotent, so a transient failure (no answer, a 5xx such as a
        balancer's 502 for a replica that died under the request, a 429) is retried with
        :data:`RELEASE_RETRY`'s backoff until ``timeout``; any other refusal is raised at
        once. With ``wait``: ``wait=true``, then polls the round status until
        ``released`` (acknowledged) or ``failed`` (a ``wrong-phase`` :class:`ServiceError`
        naming the reason), at most ``timeout`` seconds (then a :class:`ServiceError` with
        the shuffler's last delivery error).
        """
        path = f"{self.shuffler}/v1/campaigns/{campaign_id}/rounds/{round_number}"
        what = f"release round {round_number}"
        deadline = time.monotonic() + timeout
        for attempt in range(RELEASE_RETRY.attempts):
            try:
                response = self._call(
                    "POST", f"{path}/release", what, self.operator_token,
                    params={"wait": "true" if wait else "false"},
                    timeout=min(RELEASE_HTTP_TIMEOUT,
                                max(deadline - time.monotonic(), 1.0)))
                break
            except ServiceError as exc:
                pause = RELEASE_RETRY.delay(attempt)
                if (not exc.transient or attempt + 1 == RELEASE_RETRY.attempts
                        or time.monotonic() + pause >= deadline):
                    raise
                sleep(pause)
        try:
            answer = dict(response.json())
        except (ValueError, TypeError):
            raise ServiceError(f"{what}: the answer is not a release answer (is the URL the "
                               f"shuffler's?)", status=response.status_code) from None
        if response.status_code == 200 or not wait:
            return answer, response.status_code == 200
        while True:
            status = self.round_status(campaign_id, round_number)
            if status["state"] == "released":
                return answer, True
            if status["state"] == "failed":
                raise ServiceError(f"round {round_number} ended without results: "
                                   f"{status.get('reason') or 'no reason given'}",
                                   problem="wrong-phase")
            if time.monotonic() >= deadline:
                raise ServiceError(f"round {round_number} not delivered after {timeout:g}s: "
                                   f"{status.get('last_error') or 'no error reported'}")
            sleep(interval)
