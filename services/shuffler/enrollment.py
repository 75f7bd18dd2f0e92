"""Who may submit: enrollment and authentication behind one small interface.

The shuffler must authenticate users so that each contributes at most one
submission per round (docs/protocol.md section 1), yet keep nothing that identifies them.
:class:`EnrollmentPolicy` is the seam where a deployment plugs in its own
identity system (device attestation, an SSO-issued credential, privacy pass
tokens...): it turns whatever the user presents at enrollment into a bearer
token, and turns that token back into an opaque *participant key* at
submission time.  The one-submission rule is enforced on participant keys.

The default, :class:`OneTimeTokenEnrollment`, issues one random token per
enrollment, bound to one campaign, optionally only to callers who know an
enrollment secret.  It stores only ``SHA-256(domain || token)``: a copy of the
database does not let anyone submit as a user.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Protocol

from .storage_api import ShufflerStorage

TOKEN_BYTES = 32
_HASH_DOMAIN = b"segshuffle/v1/user-token\x00"


class EnrollmentRefusedError(Exception):
    """The caller may not enroll (missing or wrong enrollment secret)."""


class AuthenticationError(Exception):
    """The bearer token is missing, unknown, or issued for another campaign."""


class EnrollmentPolicy(Protocol):
    """Pluggable enrollment: issue tokens, and map tokens to participant keys."""

    def enroll(self, campaign_id: str, credential: str | None) -> str:
        """A fresh bearer token for ``campaign_id``; raises :class:`EnrollmentRefusedError`."""
        ...

    def authenticate(self, campaign_id: str, token: str) -> bytes:
        """The participant key of ``token``; raises :class:`AuthenticationError`."""
        ...


def token_hash(token: str) -> bytes:
    """The only form in which a user token is stored."""
    return hashlib.sha256(_HASH_DOMAIN + token.encode("utf-8")).digest()


class OneTimeTokenEnrollment:
    """Default policy: random per-campaign tokens, optionally gated by a shared secret."""

    def __init__(self, storage: ShufflerStorage, secret: str | None = None) -> None:
        self._storage = storage
        self._secret = secret or None

    @property
    def requires_secret(self) -> bool:
        return self._secret is not None

    def enroll(self, campaign_id: str, credential: str | None) -> str:
        if self._secret is not None and (
            credential is None
            or not hmac.compare_digest(credential.encode("utf-8"), self._secret.encode("utf-8"))
        ):
            raise EnrollmentRefusedError("a valid enrollment secret is required")
        token = secrets.token_urlsafe(TOKEN_BYTES)
        self._storage.add_token(campaign_id, token_hash(token))
        return token

    def authenticate(self, campaign_id: str, token: str) -> bytes:
        if not token or len(token) > 256:
            raise AuthenticationError("a user token is required")
        digest = token_hash(token)
        issued_for = self._storage.token_campaign(digest)
        if issued_for is None or not hmac.compare_digest(
            issued_for.encode("utf-8"), campaign_id.encode("utf-8")
        ):
            raise AuthenticationError("the user token is not valid for this campaign")
        return digest
