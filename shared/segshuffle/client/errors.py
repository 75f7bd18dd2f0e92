"""Exceptions of the client SDK."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Base class of every error the SDK raises."""


class ServiceError(ClientError):
    """A service refused a request (an RFC 9457 problem) or could not be reached.

    ``problem`` is the short problem name (``already-submitted``, ``wrong-phase``...)
    when the service sent one; ``status`` the HTTP status (``None``: no answer);
    ``certificate`` whether the connection failed because the service's TLS certificate
    is not trusted (a private CA the client was not given, a wrong host name);
    ``retry_after`` the seconds of the answer's ``Retry-After`` (None: none).
    """

    def __init__(self, message: str, *, status: int | None = None,
                 problem: str | None = None, detail: str | None = None,
                 certificate: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem = problem
        self.detail = detail
        self.certificate = certificate
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """Worth retrying: no answer (except a refused certificate), a 5xx, or 429."""
        if self.certificate:
            return False
        return self.status is None or self.status >= 500 or self.status == 429


class VerificationError(ClientError):
    """What the services published does not check out; the client sends nothing more.

    Raised when the campaign's hashes do not match its content, the key is not the
    pinned one, the campaign's settings are outside what the app accepts, or the
    published round-2 parameters would not give every level its guarantee
    (docs/protocol.md section 6).  ``check`` names the first check that failed (a
    field of the configuration or parameters, such as ``padding``, ``delta`` or
    ``lambdas``, or one of ``config_hash``, ``parameters_hash``, ``key``, ``campaign``,
    ``signature``, ``round1_participants``, ``release_threshold``, ``insecure``);
    ``checks`` every check that failed, in order.
    """

    def __init__(self, message: str, *, check: str,
                 checks: tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.check = check
        self.checks = checks if checks else (check,)

    def __reduce__(self) -> tuple[Any, ...]:
        """Picklable with its checks (raised in a worker process, re-raised in its parent)."""
        return (_rebuild_verification_error, (str(self), self.check, self.checks))


def _rebuild_verification_error(message: str, check: str,
                                checks: tuple[str, ...]) -> VerificationError:
    return VerificationError(message, check=check, checks=checks)


class CampaignEndedError(ClientError):
    """The campaign ended without results (``failed`` or ``aborted``); ``reason`` says why."""

    def __init__(self, phase: str, reason: str | None) -> None:
        super().__init__(f"the campaign {phase}: {reason or 'no reason given'}")
        self.phase = phase
        self.reason = reason
