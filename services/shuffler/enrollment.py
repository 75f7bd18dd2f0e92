"""Who may submit: enrollment and authentication behind one small interface.

The shuffler must authenticate users so that each contributes at most one
submission per round (docs/protocol.md section 1), yet keep nothing that identifies them.
:class:`EnrollmentPolicy` is the seam where a deployment plugs in its own
identity system (device attestation, an SSO-issued credential, privacy pass
tokens...): it turns whatever the user presents at enrollment into a bearer
token, and turns that token back into an opaque *participant key* at
submission time.  The one-submission rule is enforced on participant keys.

Whoever can enroll many times controls many participants, and with them the n-1
attack: fake users that send only nulls leave one real user's items alone in the
server's counts.  The default, :class:`InvitationEnrollment`, therefore admits only
holders of a one-time invitation signed by the app operator's issuer key
(:mod:`segshuffle.crypto.invitations`); each invitation buys one token, once.
:class:`OpenEnrollment` admits anyone and is for tests and trusted networks only.

Both issue one random token per enrollment, bound to one campaign, and store only
``SHA-256(domain || token)``: a copy of the database does not let anyone submit as a
user.  A used invitation is stored as a hash in a table of its own, with nothing that
links it to the token it bought.  A client may propose the token itself (it then knows
the answer to a retried enrollment); :func:`token_weakness` refuses a proposal that is
plainly not 32 bytes of a CSPRNG's output, since whoever guesses a token submits as its
user.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from itertools import pairwise
from typing import Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from segshuffle.crypto.invitations import (
    Invitation,
    InvitationError,
    invitation_digest,
    verify_invitation,
)

from .storage_api import InvitationUsedError, LoopStatements, ShufflerStorage, TokenTakenError

TOKEN_BYTES = 32
_HASH_DOMAIN = b"segshuffle/v1/user-token\x00"
MAX_ISSUER_KEYS = 16
"""Issuer keys tried per invitation (old and new keys during a rotation)."""
PURGE_INTERVAL = 3600.0
"""Seconds between purges of the hashes of used invitations that have expired."""
MAX_PATTERN_PERIOD = 16
"""A proposed token whose bytes repeat with a period up to this many bytes is refused."""
MIN_DISTINCT_VALUES = 13
"""A proposed token needs at least this many distinct byte values, and as many distinct
steps between consecutive bytes (:func:`token_weakness`)."""
MIN_DISTINCT_TEXT = 18
"""A proposed token of printable ASCII bytes only needs at least this many distinct ones."""
_PRINTABLE = frozenset(range(0x20, 0x7F))


class EnrollmentRefusedError(Exception):
    """The caller may not enroll.

    ``reason``: ``required`` (no invitation), ``malformed``, ``signature``,
    ``campaign`` (issued for another campaign), ``expired`` or ``used``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class AuthenticationError(Exception):
    """The bearer token is missing, unknown, or issued for another campaign."""


class EnrollmentPolicy(Protocol):
    """Pluggable enrollment: issue tokens, and map tokens to participant keys."""

    def enroll(self, campaign_id: str, credential: str | None,
               proposed: str | None = None) -> str:
        """A bearer token for ``campaign_id``: the client's ``proposed`` one (validated
        as 32 bytes of base64url by the request model, and as random by
        :func:`token_weakness` before the policy is asked) or a fresh one; raises
        :class:`EnrollmentRefusedError`.  With a proposal, a repeated enrollment that
        the first attempt already recorded answers the same token (idempotent)."""
        ...

    def authenticate(self, campaign_id: str, token: str) -> bytes:
        """The participant key of ``token``; raises :class:`AuthenticationError`."""
        ...


def token_weakness(token: str) -> tuple[str, str] | None:
    """Why a proposed token is refused as not random, as (check, explanation), or ``None``.

    A token is 43 base64url characters, 32 bytes (the 2 spare bits of the last character
    are ignored, as the decoder does).  It carries the 256 bits a user's credential needs
    only if it was drawn at random, and no test of one string can measure the process
    that drew it.  These checks refuse what hand-made tokens and broken generators look
    like: a repeated byte or pattern leaves at most 128 bits to guess (16 free bytes);
    few byte values or few steps are the crude estimate, what text, counters and a
    generator stuck on a few outputs produce and a CSPRNG practically never does:

    - ``encoding``: not 43 base64url characters (the request model refuses those first);
    - ``repeated-byte``: all 32 bytes equal (43 times ``A`` is 32 zero bytes);
    - ``repeating-pattern``: the bytes repeat with a period of 2 to
      :data:`MAX_PATTERN_PERIOD` bytes (``abcabc...``);
    - ``few-byte-values``: fewer than :data:`MIN_DISTINCT_VALUES` distinct byte values
      (a few bytes shuffled);
    - ``text``: printable ASCII only, with fewer than :data:`MIN_DISTINCT_TEXT` distinct
      values (a passphrase's bytes);
    - ``few-steps``: fewer than :data:`MIN_DISTINCT_VALUES` distinct differences modulo
      256 between consecutive bytes (a counter, an arithmetic sequence, a sequential run
      over most of the token).

    False refusals of a CSPRNG's token, 32 independent uniform bytes: a period p <= 16
    fixes 32 - p bytes, so probability at most sum_p 2^-8(32-p) < 2^-127; at most 12
    distinct values among 32 uniform bytes has probability sum_{d<=12} C(256, d) S(32, d)
    d! / 256^32 = 2^-75.7 (S: Stirling numbers of the second kind); 32 printable bytes
    (probability (95/256)^32) with at most 17 distinct values (then uniform over the 95)
    2^-68.7; the 31 differences of uniform bytes are themselves independent and uniform
    (the map from the bytes to the first byte and the differences is a bijection), so at
    most 12 distinct steps has probability 2^-71.4.  Together under 2^-68: no client
    with a working CSPRNG is ever refused (``secrets.token_urlsafe(32)`` in the Python
    client, ``crypto.getRandomValues`` in the web client).
    """
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(token) != 43 or len(raw) != TOKEN_BYTES:
        return "encoding", f"a proposed token is {TOKEN_BYTES} bytes as 43 base64url characters"
    period = _shortest_period(raw)
    if period == 1:
        return "repeated-byte", "all the bytes of the proposed token are equal"
    if period is not None:
        return "repeating-pattern", f"the proposed token repeats a pattern of {period} bytes"
    values = set(raw)
    if len(values) < MIN_DISTINCT_VALUES:
        return "few-byte-values", (f"the proposed token has {len(values)} distinct byte "
                                   f"values (random bytes have about 30)")
    if values <= _PRINTABLE and len(values) < MIN_DISTINCT_TEXT:
        return "text", "the proposed token's bytes are text, not random bytes"
    steps = {(later - earlier) % 256 for earlier, later in pairwise(raw)}
    if len(steps) < MIN_DISTINCT_VALUES:
        return "few-steps", (f"the proposed token has {len(steps)} distinct steps between "
                             f"consecutive bytes (a counter or a sequence, not random bytes)")
    return None


def _shortest_period(raw: bytes) -> int | None:
    """The shortest period p <= :data:`MAX_PATTERN_PERIOD` of ``raw`` (every byte equals
    the one p before it), or ``None``."""
    for period in range(1, MAX_PATTERN_PERIOD + 1):
        if raw[period:] == raw[:-period]:
            return period
    return None


def token_hash(token: str) -> bytes:
    """The only form in which a user token is stored."""
    return hashlib.sha256(_HASH_DOMAIN + token.encode("utf-8")).digest()


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


class _TokenAuthentication:
    """Token checks shared by the policies."""

    def __init__(self, storage: ShufflerStorage) -> None:
        self._storage = storage

    def _issued_for(self, campaign_id: str, digest: bytes) -> bool:
        """Whether the token hash ``digest`` is recorded for this campaign."""
        return _same_campaign(self._storage.token_campaign(digest), campaign_id)

    def _already_enrolled(self, campaign_id: str, proposed: str | None) -> bool:
        """Whether the client's proposed token is already recorded for this campaign."""
        return proposed is not None and self._issued_for(campaign_id, token_hash(proposed))

    def authenticate(self, campaign_id: str, token: str) -> bytes:
        digest = _presented(token)
        if not self._issued_for(campaign_id, digest):
            raise _not_valid()
        return digest

    def participant_of(self, token: str) -> bytes:
        """The participant key ``token`` stands for if it was issued, unchecked: for a
        store that makes :meth:`authenticate`'s check inside its submission statement
        (:meth:`.storage_api.LoopStatements.submit_as_async`).  A missing or oversized
        token is refused here, unread, as :meth:`authenticate` refuses it."""
        return _presented(token)

    async def authenticate_async(self, campaign_id: str, token: str,
                                 lookup: Callable[[bytes], Awaitable[str | None]]) -> bytes:
        """:meth:`authenticate` with the token's campaign looked up by ``lookup`` (a
        store's statement run on the event loop)."""
        digest = _presented(token)
        if not _same_campaign(await lookup(digest), campaign_id):
            raise _not_valid()
        return digest


def _presented(token: str) -> bytes:
    """The hash of a presented token; a missing or oversized one is refused unread."""
    if not token or len(token) > 256:
        raise AuthenticationError("a user token is required")
    return token_hash(token)


def _same_campaign(issued_for: str | None, campaign_id: str) -> bool:
    """Whether a token issued for ``issued_for`` (``None``: unknown) is ``campaign_id``'s."""
    return issued_for is not None and hmac.compare_digest(
        issued_for.encode("utf-8"), campaign_id.encode("utf-8"))


def _not_valid() -> AuthenticationError:
    return AuthenticationError("the user token is not valid for this campaign")


class OpenEnrollment(_TokenAuthentication):
    """Anyone may enroll, any number of times: unsafe against Sybils (explicit opt-in)."""

    def enroll(self, campaign_id: str, credential: str | None,
               proposed: str | None = None) -> str:
        token = proposed or new_token()
        try:
            self._storage.add_token(campaign_id, token_hash(token))
        except TokenTakenError:
            if not self._already_enrolled(campaign_id, proposed):
                raise _token_taken() from None
        return token


class InvitationEnrollment(_TokenAuthentication):
    """Default policy: one token per valid, unused invitation of the operator's issuer.

    An invitation is accepted if it verifies under one of ``issuers``, names this
    campaign, has not expired (``skew`` seconds of clock difference allowed) and has not
    been used; marking it used and storing the token happen in one transaction, so two
    concurrent enrollments with one invitation get one token between them.

    At most once per :data:`PURGE_INTERVAL` an enrollment also drops the used-invitation
    hashes with ``expires < now - skew``: those invitations are refused as expired anyway,
    so the table holds only invitations that could still be presented.
    """

    def __init__(self, storage: ShufflerStorage, issuers: Sequence[Ed25519PublicKey], *,
                 skew: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        super().__init__(storage)
        if not issuers:
            raise ValueError("invitation enrollment needs at least one issuer public key")
        if len(issuers) > MAX_ISSUER_KEYS:
            raise ValueError(f"at most {MAX_ISSUER_KEYS} issuer keys, got {len(issuers)}")
        self._issuers = list(issuers)
        self._skew = skew
        self._clock = clock
        self._purged_at = -math.inf

    def enroll(self, campaign_id: str, credential: str | None,
               proposed: str | None = None) -> str:
        now = self._clock()
        if self._purge_due(now):
            self._storage.forget_expired_invitations(now - self._skew)
        invitation = self._admitted(campaign_id, credential, now)
        token = proposed or new_token()
        try:
            self._storage.add_token_for_invitation(campaign_id, token_hash(token),
                                                   invitation_digest(invitation),
                                                   invitation.expires)
        except InvitationUsedError as exc:
            if self._already_enrolled(campaign_id, proposed):
                return token
            raise _used(exc) from None
        except TokenTakenError:
            raise _token_taken() from None
        return token

    async def enroll_async(self, campaign_id: str, credential: str | None,
                           proposed: str | None, statements: LoopStatements) -> str:
        """:meth:`enroll` with every statement (the purge, the token recorded, a repeated
        request recognised) run on the event loop by ``statements``."""
        now = self._clock()
        if self._purge_due(now):
            await statements.forget_expired_invitations_async(now - self._skew)
        invitation = self._admitted(campaign_id, credential, now)
        token = proposed or new_token()
        try:
            await statements.add_token_for_invitation_async(
                campaign_id, token_hash(token), invitation_digest(invitation),
                invitation.expires)
        except InvitationUsedError as exc:
            if proposed is not None and _same_campaign(
                    await statements.token_campaign_async(token_hash(proposed)), campaign_id):
                return token
            raise _used(exc) from None
        except TokenTakenError:
            raise _token_taken() from None
        return token

    def _purge_due(self, now: float) -> bool:
        """Whether this enrollment also purges the expired invitations (once per
        :data:`PURGE_INTERVAL`); marks it done."""
        if now - self._purged_at < PURGE_INTERVAL:
            return False
        self._purged_at = now
        return True

    def _admitted(self, campaign_id: str, credential: str | None,
                  now: float) -> Invitation:
        """The presented invitation, verified for this campaign at ``now``; refused with
        the reason otherwise.  Whether it was used is the store's to say."""
        if not credential:
            raise EnrollmentRefusedError(
                "required", "an invitation is required to enroll (body {\"invitation\": ...})")
        try:
            return verify_invitation(credential, self._issuers, campaign_id, now, self._skew)
        except InvitationError as exc:
            raise EnrollmentRefusedError(exc.reason, str(exc)) from None


def _used(exc: InvitationUsedError) -> EnrollmentRefusedError:
    """A used invitation presented again, not by the request that used it: the same
    request repeated (its first answer lost) proposes the token the invitation bought,
    which nobody else holding the invitation can know."""
    return EnrollmentRefusedError("used", str(exc))


def _token_taken() -> EnrollmentRefusedError:
    return EnrollmentRefusedError("token", "this token is already enrolled")
