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


class WaitTimeoutError(ServiceError):
    """A wait ran out of its time budget before what it waited for came: nothing was sent.

    Raised by ``wait_for_phase`` (the campaign is still in an earlier phase) and by
    ``fetch_parameters`` (the client's ``wait_budget``), which waits while the parameters
    are not published yet, while the shuffler's round-1 status does not say released yet
    (the server can publish a moment before the shuffler has recorded its release as
    acknowledged), and across transient failures of the services (no answer, 5xx, 429).
    ``waiting_for`` says which: ``"phase"``, ``"parameters"``, ``"round1-release"`` or
    ``"service"``; with ``"service"``, ``status``, ``problem`` and ``retry_after`` are
    those of the last failure.  Waiting again later is safe.
    """

    def __init__(self, message: str, *, waiting_for: str, status: int | None = None,
                 problem: str | None = None, detail: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, status=status, problem=problem, detail=detail,
                         retry_after=retry_after)
        self.waiting_for = waiting_for

    @property
    def transient(self) -> bool:
        """A wait that ran out is not retried by the SDK: the app decides when to wait again."""
        return False


class SubmissionError(ServiceError):
    """A submission did not end stored: ``submit_level`` and ``submit_data`` return only
    once the shuffler holds the submission, and raise one of the two subclasses otherwise.

    ``stored`` is ``False`` (:class:`SubmissionRefusedError`: certainly not stored) or
    ``None`` (:class:`SubmissionUnknownError`: not known).  ``status``, ``problem``,
    ``detail`` and ``retry_after`` are those of the last failure, as in
    :class:`ServiceError`.
    """

    stored: bool | None = False

    @property
    def transient(self) -> bool:
        """The SDK has already retried within its budget: the outcome is final for the call."""
        return False

    @classmethod
    def after(cls, error: ServiceError, message: str) -> SubmissionError:
        """This error for the last failure ``error``, with ``message`` in front of it."""
        return cls(f"{message}: {error}", status=error.status, problem=error.problem,
                   detail=error.detail, certificate=error.certificate,
                   retry_after=error.retry_after)


class SubmissionRefusedError(SubmissionError):
    """The submission is certainly not stored (``stored`` is ``False``).

    The shuffler refused it (``wrong-phase``, ``wrong-submission-size``, ``replay``...:
    ``problem`` names the refusal), or no try reached the shuffler (every connection was
    refused).  ``already-submitted`` is a refusal only when no try of this session may
    have arrived: the round then holds a submission of this token that the session has
    no record of (its saved state was not kept), and this one was not stored.
    """

    stored = False


class SubmissionUnknownError(SubmissionError):
    """Whether the submission is stored is not known (``stored`` is ``None``).

    A try may have arrived (its answer was lost: no answer, a 5xx) and the client's
    ``wait_budget`` ran out before a retry could tell, or the shuffler, asked again,
    answered that the round or the token has ended (``wrong-phase``, ``unauthorized``),
    which it also does once a round that may hold the submission has been released.
    The session records the round as ``"unknown"`` (``outcome``), with the sealed
    submission: calling the same submit method again, on this client or on one resumed
    from its saved state, sends the very same submission with the same token, and the
    shuffler's answer (stored, or ``already-submitted``: stored before) settles it.
    """

    stored = None
