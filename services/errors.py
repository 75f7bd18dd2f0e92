"""Domain errors of the services, free of HTTP.

The service layers (:mod:`segshuffle.services.server.service`,
:mod:`segshuffle.services.shuffler.service`) raise these; the HTTP edge
(:mod:`segshuffle.services.http_edge`) maps each class to its problem type in one table,
:data:`~segshuffle.services.http_edge.DOMAIN_PROBLEMS`, and answers with an RFC 9457
problem document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class DomainError(Exception):
    """A refusal of a service operation.

    ``detail`` is the human-readable explanation (never request input); ``extra`` adds
    members to the problem document; ``headers`` adds response headers.
    """

    def __init__(self, detail: str, *, extra: Mapping[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})


class InvalidRequestError(DomainError):
    """A field of the request is invalid for this campaign or round."""


class MalformedBodyError(DomainError):
    """The request body is not valid JSON."""


class UnsupportedMediaTypeError(DomainError):
    """The request body is not declared as JSON."""


class UnknownRoundError(DomainError):
    """Rounds are 1 and 2."""


class NotFoundError(DomainError):
    """No such resource (e.g. a batch)."""


class UnknownCampaignError(DomainError):
    """No such campaign."""


class WrongPhaseError(DomainError):
    """The campaign is not in a phase that allows the operation."""


class AlreadyExistsError(DomainError):
    """A resource with this id already exists."""


class ReplayedCiphertextError(DomainError):
    """A submitted ciphertext is already stored in this round (another user's, replayed)."""


class AlreadySubmittedError(DomainError):
    """This user already submitted in this round."""


class ConflictError(DomainError):
    """The request conflicts with the stored state."""


class IncompleteBatchError(DomainError):
    """Not every chunk of the batch has arrived."""


class UnauthorizedError(DomainError):
    """Missing or invalid credentials."""


class ForbiddenError(DomainError):
    """The credentials do not allow the operation."""


class InvitationRequiredError(UnauthorizedError):
    """Enrollment needs an invitation and none was given."""


class InvalidInvitationError(ForbiddenError):
    """The invitation is malformed or its signature does not verify."""


class InvitationWrongCampaignError(ForbiddenError):
    """The invitation was issued for another campaign."""


class InvitationExpiredError(ForbiddenError):
    """The invitation has expired."""


class InvitationUsedError(ForbiddenError):
    """The invitation has already been used."""


class RateLimitedError(DomainError):
    """Too many requests from this source; ``Retry-After`` says when to come back."""


class InsecureRefusedError(DomainError):
    """Insecure parameters are disabled on this server."""


class WrongSubmissionSizeError(DomainError):
    """Wrong number of messages in a submission."""


class NotEnoughParticipantsError(DomainError):
    """Too few participants for the round."""


class OptimizationFailedError(DomainError):
    """No parameters satisfy the privacy constraints."""


class UnavailableError(DomainError):
    """Storage, a key or the other service is not available."""


class UpstreamFailedError(DomainError):
    """A request to the other service failed."""
