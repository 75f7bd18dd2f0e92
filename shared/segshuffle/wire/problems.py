"""Problem types of RFC 9457 error bodies, shared by both services and the clients.

Every error either service returns is an ``application/problem+json`` body

    {"type": "urn:segshuffle:error:<name>", "title": ..., "status": ..., "detail": ...}

with ``type`` from the fixed list :class:`ProblemType`.  This module is part of the wire
layer and imports no web framework: services raise :class:`Problem`, and the HTTP edge of
the services (:mod:`segshuffle.services.http_edge`) turns it, the framework's own errors
and any unexpected exception into such a body.

Error bodies never echo request input (a rejected field's value may be a ciphertext or a
token).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

PROBLEM_MEDIA_TYPE = "application/problem+json"
SERVICE_HEADER = "segshuffle-service"
"""The response header naming the service that answered (``server`` or ``shuffler``), so
that a client pointed at the wrong one can say so."""
URN_PREFIX = "urn:segshuffle:error:"


class ProblemType(Enum):
    """The fixed list of problem types: value ``(name, default HTTP status, title)``."""

    MALFORMED_BODY = ("malformed-body", 400, "The request body is not valid JSON")
    INVALID_FIELD = ("invalid-field", 422, "A field of the request is missing or invalid")
    BODY_TOO_LARGE = ("body-too-large", 413, "The request body exceeds the size limit")
    UNSUPPORTED_MEDIA_TYPE = ("unsupported-media-type", 415,
                              "The request body must be application/json")
    NOT_FOUND = ("not-found", 404, "No such resource")
    METHOD_NOT_ALLOWED = ("method-not-allowed", 405, "Method not allowed on this resource")
    UNKNOWN_CAMPAIGN = ("unknown-campaign", 404, "No such campaign")
    UNKNOWN_ROUND = ("unknown-round", 404, "No such round (rounds are 1 and 2)")
    WRONG_PHASE = ("wrong-phase", 409, "The campaign is not in a phase that allows this")
    ALREADY_SUBMITTED = ("already-submitted", 409, "This user already submitted in this round")
    ALREADY_EXISTS = ("already-exists", 409, "A resource with this id already exists")
    CONFLICT = ("conflict", 409, "The request conflicts with the stored state")
    INCOMPLETE_BATCH = ("incomplete-batch", 409, "Not every chunk of the batch has arrived")
    UNAUTHORIZED = ("unauthorized", 401, "Missing or invalid credentials")
    FORBIDDEN = ("forbidden", 403, "These credentials do not allow this operation")
    INVITATION_REQUIRED = ("invitation-required", 401, "An invitation is required to enroll")
    INVALID_INVITATION = ("invalid-invitation", 403,
                          "The invitation is malformed or not signed by a trusted issuer")
    INVITATION_WRONG_CAMPAIGN = ("invitation-wrong-campaign", 403,
                                 "The invitation was issued for another campaign")
    INVITATION_EXPIRED = ("invitation-expired", 403, "The invitation has expired")
    INVITATION_USED = ("invitation-used", 403, "The invitation has already been used")
    INSECURE_REFUSED = ("insecure-refused", 403,
                        "Insecure parameters are disabled on this server")
    DECRYPT_FAILED = ("decrypt-failed", 422, "A ciphertext failed to decrypt")
    INVALID_MESSAGE = ("invalid-message", 422, "A decrypted message is not a valid plaintext")
    OUT_OF_DOMAIN = ("out-of-domain", 422, "A decrypted value is outside the campaign's domain")
    REPLAY = ("replay", 409, "An exact replay of an earlier message")
    WRONG_SUBMISSION_SIZE = ("wrong-submission-size", 422,
                             "Wrong number of messages in a submission")
    NOT_ENOUGH_PARTICIPANTS = ("not-enough-participants", 409,
                               "Too few participants for this round")
    OPTIMIZATION_FAILED = ("optimization-failed", 422,
                           "No parameters satisfy the privacy constraints")
    RATE_LIMITED = ("rate-limited", 429, "Too many requests")
    UNAVAILABLE = ("unavailable", 503, "The service is not ready")
    UPSTREAM_FAILED = ("upstream-failed", 502, "A request to the other service failed")
    INTERNAL = ("internal", 500, "Internal error")

    @property
    def type_name(self) -> str:
        """The short name, e.g. ``wrong-phase``."""
        return str(self.value[0])

    @property
    def status(self) -> int:
        """The default HTTP status."""
        return int(self.value[1])

    @property
    def title(self) -> str:
        """The fixed, human-readable title."""
        return str(self.value[2])

    @property
    def uri(self) -> str:
        """``urn:segshuffle:error:<name>``."""
        return URN_PREFIX + self.type_name


#: The problem types by short name.
PROBLEM_TYPES: Mapping[str, ProblemType] = {p.type_name: p for p in ProblemType}


def problem_uri(name: str) -> str:
    """``urn:segshuffle:error:<name>`` for a name of the fixed list."""
    return PROBLEM_TYPES[name].uri


class Problem(Exception):  # noqa: N818 (the RFC 9457 name)
    """Raise to answer with an RFC 9457 problem body.

    ``name`` is a short name of the fixed list (or a :class:`ProblemType`); ``extra``
    adds members to the body (RFC 9457 extension members); ``headers`` adds response
    headers (``WWW-Authenticate`` on 401).
    """

    def __init__(
        self,
        name: str | ProblemType,
        detail: str,
        *,
        status: int | None = None,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(name, ProblemType):
            problem_type = name
        elif name in PROBLEM_TYPES:
            problem_type = PROBLEM_TYPES[name]
        else:
            raise KeyError(f"unknown problem type {name!r}")
        super().__init__(detail)
        self.problem_type = problem_type
        self.name = problem_type.type_name
        self.detail = detail
        self.status = status if status is not None else problem_type.status
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The problem document as a JSON object."""
        body: dict[str, Any] = {
            "type": self.problem_type.uri,
            "title": self.problem_type.title,
            "status": self.status,
            "detail": self.detail,
        }
        body.update(self.extra)
        return body
