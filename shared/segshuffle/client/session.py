"""State and logic shared by :class:`~segshuffle.client.Client` and
:class:`~segshuffle.client.AsyncClient`; the two differ only in how they wait for I/O.

A :class:`UserSession` is one user in one campaign: the pinned key and
configuration hash from round 1, the enrollment token, the level and the level
report.  Its methods turn answers into verified objects and build request bodies;
they never touch the network.

:meth:`UserSession.state` and :meth:`UserSession.from_state` carry a session from one
process to the next (an app restarted between the rounds): see :data:`STATE_VERSION`
for the document.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import numbers
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ValidationError

from segshuffle.core.randomness import as_source
from segshuffle.core.rules import MAX_MESSAGES_PER_USER
from segshuffle.crypto import PinnedKey, public_key_from_config
from segshuffle.crypto.documents import (
    SignatureError,
    parse_server_key,
    verify_campaign_signature,
    verify_end_signature,
    verify_parameters_signature,
)
from segshuffle.wire.models import (
    ID_PATTERN,
    CampaignView,
    EnrollmentResponse,
    HpkeConfig,
    PublishedParameters,
    RoundStatus,
)

from . import accountant
from .errors import (
    CampaignEndedError,
    ClientError,
    ServiceError,
    SubmissionError,
    SubmissionRefusedError,
    SubmissionUnknownError,
    VerificationError,
)
from .messages import (
    SentRound1,
    SentRound2,
    data_slots,
    report_level,
    round1_body,
    round2_body,
)
from .policy import ClientPolicy
from .problems import PROBLEM_PREFIX as PROBLEM_PREFIX  # re-exported for existing callers
from .problems import network_error as network_error
from .problems import service_error as service_error
from .retry import RetryPolicy as RetryPolicy  # re-exported for existing callers
from .verdicts import VERDICTS
from .verify import (
    verify_campaign,
    verify_parameters,
    verify_release_threshold,
    verify_round1_count,
)

PHASE_ORDER = {"round1": 0, "round2": 1, "done": 2}

STATE_FORMAT = "segshuffle-client-state"
STATE_VERSION = 2
"""Version of the saved-session document of :meth:`UserSession.state`: a JSON object with

- ``format`` (``"segshuffle-client-state"``) and ``version`` (2);
- ``campaign_id``; ``token``: the user's bearer token at the shuffler;
- ``level_index`` and ``reported_level``: the level the user chose and the level report
  of round 1 (round 2 repeats it), recorded before round 1 is sent; ``null`` before;
- ``hpke_config`` (the pinned key config) and ``config_hash``: the round-1 pins,
  ``null`` if the campaign was not fetched yet;
- ``server_key``, ``key_id_pin``, ``min_fake_tolerance``: the app's trust settings;
- ``round1`` and ``round2``: what is known of each round's submission: ``null`` (not
  sent, or certainly not stored), ``"unknown"`` (about to be sent or sent, its outcome
  not known yet) or ``"stored"`` (the shuffler holds it).  A round is recorded
  ``"unknown"`` before anything of it leaves the client;
- ``round1_body`` and ``round2_body``: the sealed request body of a round whose outcome
  is ``"unknown"`` (``{"level": ct}``, ``{"level": ct, "data": [ct, ...]}``), resent as
  it is to find the outcome out; ``null`` otherwise;
- ``round2_sent``: ``{"items": [...], "slots": [...]}``, what round 2 sent (the fitted
  item set and each data slot's item id, ``null`` for a null slot), once round 2 is
  begun; ``null`` before;
- ``checksum``: SHA-256 of the canonical JSON of every other field.  It catches a
  corrupted or edited document; it is not a signature.

Version 1 documents (the same without the five ``round`` fields) are read as well: their
round 1 is stored when they have a ``reported_level``, and nothing is known of round 2.
A document of another format or version, with other fields, or whose checksum does not
match is refused with a :class:`ClientError`.
"""
_STATE_FIELDS_V1 = frozenset({
    "format", "version", "campaign_id", "token", "level_index", "reported_level",
    "hpke_config", "config_hash", "server_key", "key_id_pin", "min_fake_tolerance",
    "checksum"})
_STATE_FIELDS = _STATE_FIELDS_V1 | {"round1", "round1_body", "round2", "round2_body",
                                    "round2_sent"}
_FIELDS_OF_VERSION = {1: _STATE_FIELDS_V1, 2: _STATE_FIELDS}
UNKNOWN, STORED = "unknown", "stored"
"""The outcomes of a round's submission a session records (``None``: not sent)."""
_OUTCOMES = (None, UNKNOWN, STORED)
_CIPHERTEXT = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_HASH = re.compile(r"^[0-9a-f]{64}$")
MAX_TOKEN_CHARS = 4096
MAX_LISTED_NAMES = 12
"""An unknown item name's error lists the campaign's names up to this many."""


def _checksum(document: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``document`` without its ``checksum``.

    ``min_fake_tolerance`` is a number, checksummed as a float whichever way the stored
    JSON wrote it: JavaScript's ``JSON.stringify`` writes 0.0 as ``0``, which Python reads
    as an int, and the document is the same.
    """
    body = {key: value for key, value in document.items() if key != "checksum"}
    tolerance = body.get("min_fake_tolerance")
    if isinstance(tolerance, int) and not isinstance(tolerance, bool):
        body["min_fake_tolerance"] = float(tolerance)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _optional_index(state: Mapping[str, Any], field: str) -> int | None:
    value = state[field]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 16:
        raise ClientError(f"saved state: {field} must be a level index or null")
    return value


def _optional_text(state: Mapping[str, Any], field: str) -> str | None:
    value = state[field]
    if value is not None and not (isinstance(value, str) and value):
        raise ClientError(f"saved state: {field} must be a non-empty string or null")
    return value


def load_state(state: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    """The saved-session document as a dict, its structure and checksum checked
    (:data:`STATE_VERSION`; :class:`ClientError` on any mismatch), a version-1 document
    brought to the fields of the current version (:func:`_upgraded`)."""
    if isinstance(state, (str, bytes, bytearray)):
        try:
            state = json.loads(state)
        except ValueError:
            raise ClientError("saved state: not a JSON document") from None
    if not isinstance(state, Mapping):
        raise ClientError(f"saved state: expected a JSON object, got {type(state).__name__}")
    document = dict(state)
    if document.get("format") != STATE_FORMAT:
        raise ClientError(f"saved state: not a {STATE_FORMAT} document")
    version = document.get("version")
    fields = _FIELDS_OF_VERSION.get(version) if isinstance(version, int) \
        and not isinstance(version, bool) else None
    if fields is None:
        raise ClientError(f"saved state: version {version!r} is not supported "
                          f"(this SDK reads versions 1 and {STATE_VERSION})")
    if set(document) != fields:
        odd = sorted(set(document) ^ fields)
        raise ClientError(f"saved state: unexpected or missing fields {', '.join(odd)}")
    try:
        expected = _checksum(document)
    except (TypeError, ValueError):
        raise ClientError("saved state: holds values that are not plain JSON") from None
    if document["checksum"] != expected:
        raise ClientError("saved state: the checksum does not match (the document was "
                          "altered or damaged)")
    return _upgraded(document)


def _upgraded(document: dict[str, Any]) -> dict[str, Any]:
    """A version-1 document with the fields of version 2: a version-1 client recorded the
    level report only once round 1 was stored, and nothing of round 2."""
    if document["version"] == STATE_VERSION:
        return document
    return {**document, "version": STATE_VERSION,
            "round1": STORED if document["reported_level"] is not None else None,
            "round1_body": None, "round2": None, "round2_body": None, "round2_sent": None}


def _body(value: Any, round_number: int) -> dict[str, Any]:
    """A saved round body, checked for its shape: ``{"level": ct}`` in round 1,
    ``{"level": ct, "data": [ct, ...]}`` in round 2."""
    names = {"level"} if round_number == 1 else {"level", "data"}
    if not (isinstance(value, dict) and set(value) == names):
        raise ClientError(f"saved state: round{round_number}_body is not a round-"
                          f"{round_number} submission")
    texts = [value["level"]]
    if round_number == 2:
        data = value["data"]
        if not (isinstance(data, list) and 0 < len(data) <= MAX_MESSAGES_PER_USER):
            raise ClientError("saved state: round2_body has no valid data list")
        texts += data
    if not all(isinstance(text, str) and _CIPHERTEXT.match(text) for text in texts):
        raise ClientError(f"saved state: round{round_number}_body holds a value that is not "
                          "a ciphertext")
    return {"level": value["level"], "data": list(value["data"])} if round_number == 2 \
        else {"level": value["level"]}


def _slot_ids(value: Any, name: str, *, nulls: bool) -> tuple[Any, ...]:
    if not (isinstance(value, list) and len(value) <= MAX_MESSAGES_PER_USER):
        raise ClientError(f"saved state: round2_sent {name} must be a list")
    for entry in value:
        if entry is None and nulls:
            continue
        if isinstance(entry, bool) or not isinstance(entry, int) or not 0 <= entry < 1 << 32:
            raise ClientError(f"saved state: round2_sent {name} must hold item ids")
    return tuple(value)


def phase_reached(view: CampaignView, phase: str) -> bool:
    """Whether the campaign has reached ``phase`` (``round2`` or ``done``).

    Raises :class:`CampaignEndedError` once it has ended without results, so that no
    one waits for a phase that will never come.
    """
    if view.phase in ("failed", "aborted"):
        raise CampaignEndedError(view.phase, view.end_reason)
    return PHASE_ORDER[view.phase] >= PHASE_ORDER[phase]


M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class PublicCache:
    """A small shared cache of public documents (campaign view, key config, round status).

    Many simulated users of one process can share it, as users behind one HTTP
    cache or CDN would: the documents are public and the same for everyone, and
    every user still verifies what it gets.  Entries live ``ttl`` seconds; a
    client bypasses the cache when a cached document does not have what it needs
    yet (e.g. parameters not published when it was fetched).  Asynchronous clients
    that miss the same entry at once fetch it once (:meth:`fetch_once`), as a CDN
    collapses concurrent requests for one document.
    """

    def __init__(self, ttl: float = 1.0) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, Any]] = {}
        self._pending: dict[tuple[asyncio.AbstractEventLoop, str],
                            asyncio.Future[Any]] = {}

    def get(self, url: str) -> Any | None:
        entry = self._entries.get(url)
        if entry is None or time.monotonic() - entry[0] > self.ttl:
            return None
        return entry[1]

    def put(self, url: str, value: Any) -> None:
        self._entries[url] = (time.monotonic(), value)

    async def fetch_once(self, url: str, fetch: Callable[[], Awaitable[T]]) -> T:
        """``await fetch()``, or the outcome of the same fetch already in flight in this
        event loop.

        Every user in flight misses an expired entry at the same moment (64 of them in
        the benchmark, each downloading and parsing the same view); the first fetches it
        and the others wait for its document.  If that fetch fails, the others fetch on
        their own, with their own retries, as they would have without this.
        """
        key = (asyncio.get_running_loop(), url)
        pending = self._pending.get(key)
        if pending is not None:
            shared = await asyncio.shield(pending)
            return shared if shared is not None else await fetch()  # type: ignore[no-any-return]
        future: asyncio.Future[Any] = key[0].create_future()
        self._pending[key] = future
        value: Any = None
        try:
            value = await fetch()
            return value
        finally:
            del self._pending[key]
            future.set_result(value)  # None: it failed (the waiters fetch themselves)


@dataclass(frozen=True, eq=False)
class Received(Generic[M]):
    """A public document parsed from an answer, and the SHA-256 of the answer's exact body.

    Only :func:`receive` makes one, from the same bytes, so equal digests mean equal
    documents: the session then shares verdicts on them across the users of the process
    (:mod:`.verdicts`).  A bare model (no digest) is always checked in full.
    """

    value: M
    digest: bytes


Document = M | Received[M]
"""What a session's ``accept_*`` methods take: a model, or a :class:`Received` one."""


def parse(model: type[M], response: httpx.Response, what: str) -> M:
    """The answer's JSON body as a ``model`` (:class:`ServiceError` if it is not one)."""
    try:
        return model.model_validate(response.json())
    except (ValueError, ValidationError):
        raise ServiceError(f"{what}: the answer is not a valid {model.__name__}",
                           status=response.status_code) from None


def receive(model: type[M], response: httpx.Response, what: str) -> Received[M]:
    """:func:`parse`, with the digest of the body it parsed (:class:`Received`)."""
    return Received(parse(model, response, what), hashlib.sha256(response.content).digest())


def _unwrap(document: Document[M]) -> tuple[M, bytes | None]:
    """(the model, the digest of its bytes or None when they are not known)."""
    if isinstance(document, Received):
        return document.value, document.digest
    return document, None


def _settle(key: Hashable | None, check: Callable[[], T]) -> T:
    """``check()``, through the process's shared verdicts when ``key`` is known (a key
    built from document digests; None when a document came without one)."""
    return check() if key is None else VERDICTS.settle(key, check)


def _round(round_number: int) -> int:
    if round_number not in (1, 2):
        raise ClientError(f"rounds are 1 and 2, not {round_number!r}")
    return round_number


_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Failures of a request that certainly did not leave the client: no connection."""
_ROUND_ENDED = ("wrong-phase", "unauthorized")
"""Refusals that may come after the round (or its tokens) ended with a submission stored."""


class Delivery:
    """What is known of one submission while a client sends it (no I/O).

    ``maybe_sent``: a try may have reached the shuffler (in this call, or in an earlier
    one whose outcome the session recorded as unknown).  Only then does
    ``already-submitted`` mean "stored": the shuffler refuses a token's second submission
    of a round, and the first one was this one.
    """

    def __init__(self, round_number: int, *, maybe_sent: bool) -> None:
        self.round = round_number
        self.maybe_sent = maybe_sent

    def no_answer(self, exc: httpx.HTTPError) -> None:
        """A try got no answer: it may have arrived, unless it never connected."""
        if not isinstance(exc, _NEVER_SENT):
            self.maybe_sent = True

    def failed(self, error: ServiceError) -> None:
        """A try was answered with a transient failure: a 5xx may come after the
        submission was stored (a proxy's timeout, a service stopped while answering)."""
        if error.status is not None and error.status >= 500:
            self.maybe_sent = True

    def stored_by(self, error: ServiceError) -> bool:
        """Whether the refusal ``error`` says the submission is stored."""
        return self.maybe_sent and error.problem == "already-submitted"

    def refusal(self, error: ServiceError) -> SubmissionError:
        """The error for a final refusal: not stored, unless an earlier try may have
        arrived and the round or its token has ended since (then unknown)."""
        if self.maybe_sent and error.problem in _ROUND_ENDED:
            return SubmissionUnknownError.after(
                error, f"round {self.round}: whether the submission is stored is not known "
                       "(a try may have arrived before the round or its token ended)")
        return SubmissionRefusedError.after(error, f"round {self.round}: not stored")

    def gave_up(self, error: ServiceError) -> SubmissionError:
        """The error once the time budget is spent on transient failures."""
        if self.maybe_sent:
            return SubmissionUnknownError.after(
                error, f"round {self.round}: whether the submission is stored is not known "
                       "yet (its answer was lost and the wait budget ran out; submit again, "
                       "here or resumed from the saved state, to find out)")
        return SubmissionRefusedError.after(
            error, f"round {self.round}: not stored (no try reached the shuffler)")


class UserSession:
    """One user's protocol state in one campaign."""

    def __init__(self, campaign_id: str, rng: object = None,
                 *, policy: ClientPolicy | None = None, allow_insecure: bool = False,
                 min_fake_tolerance: float = 0.0, key_id: str | None = None,
                 server_key: str | None = None) -> None:
        """``rng``: where the randomizers draw from (:func:`segshuffle.core.randomness.as_source`:
        by default the operating system's CSPRNG; a seeded ``random.Random`` or numpy
        ``Generator`` makes a simulation reproducible).
        ``policy``: what the app accepts from a campaign (:class:`ClientPolicy`: its
        delta ceiling and smallest ``min_users``, and whether it takes campaigns without
        padding or with variable-size submissions; by default it does not).
        ``min_fake_tolerance``: refuse campaigns that tolerate a smaller fraction f of
        fake or colluding participants than the app requires (default 0: any; the
        stricter of this and the policy's applies).
        ``key_id``: the campaign's key id if the app knows it out of band.
        ``server_key``: the server's document-signing public key (base64url, from
        ``segshuffle admin signing-key``), shipped with the app.  With it, every view must
        carry the server's signatures (docs/wire.md section 9): the campaign statement
        (config hash, key id, HPKE key) before round 1, the parameters statement before
        round 2, the end statement for a terminal phase; a relay then cannot substitute a
        key, parameters or an ending.  Without it the client trusts the first view it
        accepts (trust on first use, plus the optional ``key_id`` pin): a shuffler that
        answers a client's first request with a key of its own can read that client's
        messages."""
        self.policy = (policy or ClientPolicy()).with_fake_tolerance(min_fake_tolerance)
        try:
            self.server_key: Ed25519PublicKey | None = (
                None if server_key is None else parse_server_key(server_key))
        except ValueError as exc:
            raise ClientError(f"server_key: {exc}") from None
        self.server_key_text = server_key
        self.campaign_id = campaign_id
        self.expected_key_id = key_id
        """The campaign's key id as the app learnt it out of band, if it did: the view and
        key config relayed by the shuffler must then pin exactly this key."""
        self.rng = as_source(rng)
        self.allow_insecure = allow_insecure
        self.view: CampaignView | None = None
        self.key: PinnedKey | None = None
        self.key_config: HpkeConfig | None = None
        """The pinned key's config, as fetched (saved with the state)."""
        self.config_hash: str | None = None
        self.token: str | None = None
        self.level_index: int | None = None
        self.reported_level: int | None = None
        self.parameters: PublishedParameters | None = None
        self.outcomes: dict[int, str | None] = {1: None, 2: None}
        """What is known of each round's submission: ``None`` (not sent, or certainly
        not stored), ``"unknown"`` or ``"stored"`` (:data:`STATE_VERSION`)."""
        self.bodies: dict[int, dict[str, Any] | None] = {1: None, 2: None}
        """The sealed body of a round whose outcome is ``"unknown"``, resent as it is."""
        self.sent2: SentRound2 | None = None
        self._before: dict[int, tuple[int | None, int | None, SentRound2 | None]] = {}
        self._names: dict[str, int] | None = None
        self._proposed_token: str | None = None
        self._campaign_path: tuple[str, str] | None = None

    @property
    def min_fake_tolerance(self) -> float:
        """The smallest fake tolerance this session accepts (its policy's)."""
        return self.policy.min_fake_tolerance

    # -- saving and resuming -------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The session as a JSON-serialisable dict (:data:`STATE_VERSION`), to resume it in
        another process with :meth:`from_state`.

        It holds the user's bearer token at the shuffler and the level the user chose
        (and, once round 2 is begun, what it sends): whoever reads it can submit as this
        user and learns their privacy level.  Store it like a secret (the platform's
        keystore, an encrypted file), never in logs.  It records each round's submission
        from before anything of it leaves (:meth:`begin`): save it again after every
        change.  Raises :class:`ClientError` before enrollment (there is nothing to
        resume).
        """
        if self.token is None:
            raise ClientError("not enrolled: there is no session to save yet")
        hpke = None if self.key_config is None else self.key_config.model_dump(mode="json")
        document: dict[str, Any] = {
            "format": STATE_FORMAT, "version": STATE_VERSION,
            "campaign_id": self.campaign_id, "token": self.token,
            "level_index": self.level_index, "reported_level": self.reported_level,
            "hpke_config": hpke, "config_hash": self.config_hash,
            "server_key": self.server_key_text, "key_id_pin": self.expected_key_id,
            "min_fake_tolerance": self.policy.min_fake_tolerance,
            "round1": self.outcomes[1], "round1_body": self.bodies[1],
            "round2": self.outcomes[2], "round2_body": self.bodies[2],
            "round2_sent": None if self.sent2 is None else {
                "items": list(self.sent2.items), "slots": list(self.sent2.slots)},
        }
        document["checksum"] = _checksum(document)
        return document

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | str | bytes, *,
                   campaign_id: str | None = None, rng: object = None,
                   policy: ClientPolicy | None = None, allow_insecure: bool = False,
                   min_fake_tolerance: float = 0.0,
                   key_id: str | None = None, server_key: str | None = None) -> UserSession:
        """A session restored from :meth:`state` (a dict, or its JSON text).

        The restored session keeps the pins of the saved one: the key and configuration
        hash of round 1 (every view fetched later must match them, and the key config
        must hash to its key id), the level report, and the saved trust settings.  The
        arguments may only add to those: ``campaign_id``, ``key_id`` and ``server_key``,
        when given, must equal the saved ones (a saved ``server_key`` is kept when none
        is given), and the stricter ``min_fake_tolerance`` applies.  Any mismatch, an
        altered document (checksum) or a malformed one is a :class:`ClientError`;
        nothing is fetched here.
        """
        doc = load_state(state)
        saved_id = doc["campaign_id"]
        if not (isinstance(saved_id, str) and re.match(ID_PATTERN, saved_id)):
            raise ClientError("saved state: campaign_id is not a campaign id")
        if campaign_id is not None and campaign_id != saved_id:
            raise ClientError(f"saved state: it is for campaign {saved_id!r}, "
                              f"not {campaign_id!r}")
        token = doc["token"]
        if not (isinstance(token, str) and 0 < len(token) <= MAX_TOKEN_CHARS
                and token.isprintable() and not any(c.isspace() for c in token)):
            raise ClientError("saved state: token must be one printable line")
        saved_server_key = _optional_text(doc, "server_key")
        if server_key is not None and saved_server_key is not None \
                and server_key != saved_server_key:
            raise ClientError("saved state: it was saved with another server_key")
        pin = _optional_text(doc, "key_id_pin")
        if key_id is not None and pin is not None and key_id != pin:
            raise ClientError(f"saved state: it pins key id {pin}, not {key_id}")
        saved_tolerance = doc["min_fake_tolerance"]
        if isinstance(saved_tolerance, bool) or not isinstance(saved_tolerance, (int, float)):
            raise ClientError("saved state: min_fake_tolerance must be a number")
        if not (math.isfinite(saved_tolerance) and 0.0 <= saved_tolerance < 1.0):
            raise ClientError("saved state: min_fake_tolerance must be in [0, 1)")
        session = cls(saved_id, rng, policy=policy, allow_insecure=allow_insecure,
                      min_fake_tolerance=max(float(min_fake_tolerance),
                                             float(saved_tolerance)),
                      key_id=key_id if key_id is not None else pin,
                      server_key=server_key if server_key is not None else saved_server_key)
        session.token = token
        level = _optional_index(doc, "level_index")
        reported = _optional_index(doc, "reported_level")
        if reported is not None and level is None:
            raise ClientError("saved state: a reported_level needs a level_index")
        session.level_index, session.reported_level = level, reported
        session._restore_rounds(doc)
        hpke, config_hash = doc["hpke_config"], doc["config_hash"]
        if (hpke is None) != (config_hash is None):
            raise ClientError("saved state: hpke_config and config_hash go together")
        if hpke is not None:
            if not (isinstance(config_hash, str) and _HASH.match(config_hash)):
                raise ClientError("saved state: config_hash is not a SHA-256 hex digest")
            try:
                saved_config = HpkeConfig.model_validate(hpke)
                pinned = public_key_from_config(saved_config)
            except (ValueError, ValidationError) as exc:  # pydantic's error is a ValueError
                reason = "not a key config" if isinstance(exc, ValidationError) else exc
                raise ClientError(f"saved state: hpke_config: {reason}") from None
            if session.expected_key_id is not None and pinned.key_id != session.expected_key_id:
                raise ClientError(f"saved state: its key {pinned.key_id} is not the expected "
                                  f"key {session.expected_key_id}")
            session.key, session.config_hash = pinned, config_hash
            session.key_config = saved_config
        return session

    def _restore_rounds(self, doc: Mapping[str, Any]) -> None:
        """The saved rounds' outcomes, bodies and round-2 record, checked for their shape
        and against each other (:class:`ClientError`)."""
        for round_number in (1, 2):
            outcome, body = doc[f"round{round_number}"], doc[f"round{round_number}_body"]
            if outcome not in _OUTCOMES:
                raise ClientError(f"saved state: round{round_number} must be null, "
                                  f"{UNKNOWN!r} or {STORED!r}")
            if outcome is not None and (self.level_index is None or self.reported_level is None):
                raise ClientError(f"saved state: a sent round {round_number} needs the "
                                  "level_index and reported_level")
            if (outcome == UNKNOWN) != (body is not None):
                raise ClientError(f"saved state: round{round_number}_body goes with an "
                                  "unknown outcome, and only with one")
            self.outcomes[round_number] = outcome
            self.bodies[round_number] = None if body is None else _body(body, round_number)
        sent = doc["round2_sent"]
        if (sent is None) != (self.outcomes[2] is None):
            raise ClientError("saved state: round2_sent goes with a sent round 2, and only "
                              "with one")
        if sent is not None:
            if not (isinstance(sent, dict) and set(sent) == {"items", "slots"}):
                raise ClientError("saved state: round2_sent must have items and slots")
            assert self.level_index is not None and self.reported_level is not None
            self.sent2 = SentRound2(
                level_index=self.level_index, reported_level=self.reported_level,
                items=_slot_ids(sent["items"], "items", nulls=False),
                slots=_slot_ids(sent["slots"], "slots", nulls=True))

    # -- what was sent -------------------------------------------------------------------
    def outcome(self, round_number: int) -> str | None:
        """What is known of the round's submission: ``None`` (not sent, or certainly not
        stored), ``"unknown"`` (sent, the answer lost: sending it again finds out) or
        ``"stored"`` (the shuffler holds it)."""
        return self.outcomes[_round(round_number)]

    def begin(self, round_number: int, body: dict[str, Any],
              sent: SentRound1 | SentRound2) -> Delivery:
        """Record a submission about to be sent: its outcome is ``"unknown"`` from now
        until the shuffler's answer settles it (:meth:`settle`), its sealed body and
        what it sends (the level report, round 2's slots) are kept, so that a session
        saved now resends the very same submission.  Returns its :class:`Delivery`."""
        self._before[round_number] = (self.level_index, self.reported_level, self.sent2)
        self.level_index, self.reported_level = sent.level_index, sent.reported_level
        if isinstance(sent, SentRound2):
            self.sent2 = sent
        self.outcomes[round_number], self.bodies[round_number] = UNKNOWN, body
        return Delivery(round_number, maybe_sent=False)

    def submission(self, round_number: int,
                   draft: Callable[[], tuple[dict[str, Any], SentRound1 | SentRound2]]
                   ) -> tuple[dict[str, Any], Delivery] | None:
        """What to send for a round, the one decision both clients make before sending:
        ``None`` when it is stored (nothing is sent again), the recorded body of a round of
        unknown outcome (:meth:`pending`: sent again as it was), else a new submission from
        ``draft()`` (sealed body and record), begun here (:meth:`begin`)."""
        outcome = self.outcome(round_number)
        if outcome == STORED:
            return None
        if outcome == UNKNOWN:
            return self.pending(round_number)
        body, sent = draft()
        return body, self.begin(round_number, body, sent)

    def require_round1_level(self, level_index: int) -> None:
        """A round 1 already begun was for one level index: asking for another is a
        :class:`ClientError` (nothing is sent)."""
        if self.outcome(1) is not None and level_index != self.level_index:
            raise ClientError(f"round 1 was sent with level index {self.level_index}, "
                              f"not {level_index}")

    def pending(self, round_number: int) -> tuple[dict[str, Any], Delivery]:
        """The recorded body of a round whose outcome is unknown, to send again, and its
        :class:`Delivery` (an earlier try may have arrived)."""
        body = self.bodies[round_number]
        if self.outcomes[round_number] != UNKNOWN or body is None:
            raise ClientError(f"round {round_number} has no submission of unknown outcome")
        return body, Delivery(round_number, maybe_sent=True)

    def sent_round1(self) -> SentRound1:
        """What round 1 sent, from the record (its ciphertext while it is kept)."""
        assert self.level_index is not None and self.reported_level is not None
        body = self.bodies[1]
        return SentRound1(level_index=self.level_index, reported_level=self.reported_level,
                          level_ciphertext="" if body is None else str(body["level"]))

    def settle(self, round_number: int, stored: bool) -> None:
        """The shuffler's answer settled the round: ``stored``, or certainly not stored
        (the round is then as before :meth:`begin` in this session: it may be sent anew)."""
        self.bodies[round_number] = None
        if stored:
            self.outcomes[round_number] = STORED
            return
        self.outcomes[round_number] = None
        before = self._before.pop(round_number, None)
        if round_number == 2:
            self.sent2 = None
        if before is not None:
            self.level_index, self.reported_level = before[0], before[1]
            if round_number == 2:
                self.sent2 = before[2]

    # -- items ---------------------------------------------------------------------------
    def item_ids(self, items: Iterable[int | str]) -> list[int]:
        """The ids of ``items``: ids (ints in [0, d)) pass through; names, for a campaign
        that has them, become their position in the campaign's item list.

        An unknown name, a name for a campaign without names, an id outside [0, d) or
        anything else is a :class:`ClientError` naming the item and what is allowed.
        """
        if self.view is None:
            raise ClientError("fetch the campaign first")
        if isinstance(items, (str, bytes)):
            raise ClientError(f"items must be a collection of item ids or names, not the "
                              f"single string {items!r} (wrap it in a list)")
        config = self.view.config
        d = config.domain_size
        ids = []
        for item in items:
            if isinstance(item, str):
                ids.append(self._item_by_name(item))
            elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
                if not 0 <= int(item) < d:
                    raise ClientError(
                        f"item id {int(item)} is outside campaign {self.campaign_id!r}'s "
                        f"domain: ids 0..{d - 1}" + self._names_hint())
                ids.append(int(item))
            else:
                raise ClientError(f"item {item!r}: expected an item id (int in 0..{d - 1})"
                                  + (" or an item name (str)" if config.items else ""))
        return ids

    def _names_hint(self) -> str:
        assert self.view is not None
        names = self.view.config.items
        if not names:
            return ""
        return f", or one of its item names ({self._listed(names)})"

    @staticmethod
    def _listed(names: list[str]) -> str:
        shown = ", ".join(repr(name) for name in names[:MAX_LISTED_NAMES])
        if len(names) > MAX_LISTED_NAMES:
            shown += f", ... {len(names)} names in all"
        return shown

    def _item_by_name(self, name: str) -> int:
        assert self.view is not None
        names = self.view.config.items
        if not names:
            raise ClientError(f"item {name!r}: campaign {self.campaign_id!r} has no item "
                              f"names; pass item ids 0..{self.view.config.domain_size - 1}")
        if self._names is None:
            self._names = {}
            for index, known in enumerate(names):
                self._names.setdefault(known, index)
        index = self._names.get(name)
        if index is None:
            raise ClientError(f"unknown item {name!r}: campaign {self.campaign_id!r} has "
                              f"items {self._listed(names)}")
        return index

    def _check_level(self, view: CampaignView) -> None:
        """A saved level index must exist in the campaign it is resumed into."""
        levels = len(view.config.levels)
        if self.level_index is not None and not 0 <= self.level_index < levels:
            raise ClientError(f"level index {self.level_index} is not one of the campaign's "
                              f"{levels} levels (0..{levels - 1})")
        if self.reported_level is not None and not 0 <= self.reported_level < levels:
            raise ClientError(f"reported level {self.reported_level} is not one of the "
                              f"campaign's {levels} levels")

    # -- paths ---------------------------------------------------------------------------
    @property
    def campaign_path(self) -> str:
        """``/v1/campaigns/{id}``, the id percent-encoded; kept while the id is the same (a
        user asks for it several times per request it makes)."""
        cached = self._campaign_path
        if cached is None or cached[0] != self.campaign_id:
            cached = self._campaign_path = (
                self.campaign_id, f"/v1/campaigns/{quote(self.campaign_id, safe='')}")
        return cached[1]

    def round_path(self, round_number: int) -> str:
        return f"{self.campaign_path}/rounds/{round_number}"

    def auth(self) -> dict[str, str]:
        if self.token is None:
            raise ClientError("not enrolled: call enroll() first")
        return {"Authorization": f"Bearer {self.token}"}

    # -- answers -------------------------------------------------------------------------
    def check_signatures(self, view: CampaignView, *, parameters: bool = False) -> None:
        """With a ``server_key``: the view's campaign statement, its end statement if the
        phase is terminal, and with ``parameters`` its parameters statement, must carry
        the server's signature (:class:`VerificationError` naming the check)."""
        if self.server_key is None:
            return
        try:
            verify_campaign_signature(self.server_key, view)
            if parameters:
                verify_parameters_signature(self.server_key, view)
            verify_end_signature(self.server_key, view)
        except SignatureError as exc:
            raise VerificationError(f"server signature ({exc.check}): {exc}",
                                    check="signature") from None

    def reached(self, view: CampaignView, phase: str) -> bool:
        """:func:`phase_reached` on a view whose signatures (with a ``server_key``) hold:
        a relay cannot end a campaign for a client by forging ``failed`` or ``aborted``."""
        if view.id != self.campaign_id:
            raise VerificationError(f"the answer is for campaign {view.id!r}, "
                                    f"not {self.campaign_id!r}", check="campaign")
        self.check_signatures(view)
        return phase_reached(view, phase)

    def accept_campaign(self, view: Document[CampaignView],
                        hpke: Document[HpkeConfig]) -> CampaignView:
        """Verify a fetched view; the first one pins the key id and configuration hash.

        With :class:`Received` documents the verdict of :func:`verify_campaign` (a pure
        function of their bytes and this session's campaign id and policy) is shared
        with the process's other users (:mod:`.verdicts`); the signatures and pins are
        checked here every time."""
        view, view_digest = _unwrap(view)
        hpke, hpke_digest = _unwrap(hpke)
        key = _settle(
            None if view_digest is None or hpke_digest is None else (
                "campaign", view_digest, hpke_digest, self.campaign_id, self.policy,
                self.allow_insecure),
            lambda: verify_campaign(view, hpke, self.campaign_id, policy=self.policy,
                                    allow_insecure=self.allow_insecure))
        self.check_signatures(view)
        if self.expected_key_id is not None and key.key_id != self.expected_key_id:
            raise VerificationError(f"the campaign's key {key.key_id} is not the expected "
                                    f"key {self.expected_key_id}", check="key")
        if self.key is None:
            self.key, self.config_hash = key, view.config_hash
            self.key_config = view.hpke_config
        elif key.key_id != self.key.key_id or view.config_hash != self.config_hash:
            raise VerificationError("the campaign's key or configuration changed since it "
                                    "was first fetched", check="config_hash")
        self._check_level(view)
        if self.view is None or self.view.config_hash != view.config_hash:
            self._names = None
        self.view = view
        return view

    def enrollment_body(self, invitation: str | None) -> dict[str, str]:
        """The enrollment request: the invitation and a token this client drew (32 random
        bytes), kept for :meth:`accept_enrollment`.  Retrying the same body is idempotent:
        the shuffler answers the proposed token again once it has recorded it."""
        self._proposed_token = secrets.token_urlsafe(32)
        body = {"token": self._proposed_token}
        if invitation is not None:
            body["invitation"] = invitation
        return body

    def accept_enrollment(self, enrollment: EnrollmentResponse) -> str:
        if enrollment.campaign_id != self.campaign_id or not enrollment.token:
            raise ServiceError("the shuffler issued a token for another campaign")
        proposed = self._proposed_token
        if proposed is not None and enrollment.token != proposed:
            raise ServiceError("the shuffler answered another token than the one proposed")
        self.token = enrollment.token
        return self.token

    def accept_parameters(self, view: Document[CampaignView]) -> PublishedParameters:
        """Verify the published parameters for this user's level (:func:`verify_parameters`
        against the round-1 pins); with a :class:`Received` view its verdict is shared
        with the process's users of the same level, pins and policy (:mod:`.verdicts`)."""
        if self.level_index is None:
            raise ClientError("no level chosen: submit_level() comes first")
        assert self.key is not None and self.config_hash is not None
        view, digest = _unwrap(view)
        self.check_signatures(view, parameters=view.parameters is not None)
        self._check_level(view)
        level, key_id, config_hash = self.level_index, self.key.key_id, self.config_hash
        _settle(
            None if digest is None else (
                "parameters", digest, level, key_id, config_hash, self.policy,
                self.allow_insecure, accountant.accountant_name()),
            lambda: verify_parameters(
                view, level_index=level, key_id=key_id, config_hash=config_hash,
                policy=self.policy, allow_insecure=self.allow_insecure))
        # verify_parameters returns the view's own parameters: those of this view.
        assert view.parameters is not None
        self.parameters = view.parameters
        self.view = view
        return self.parameters

    def round1_pending(self, status: RoundStatus) -> bool:
        """Whether the shuffler's round-1 status of this campaign does not say released
        yet: the server may publish the parameters a moment before the shuffler records
        the release as acknowledged, so that is a wait, not a refusal (a status of
        another campaign or round is refused by :meth:`check_round1_count`)."""
        return (status.campaign_id == self.campaign_id and status.round == 1
                and not status.released)

    def check_round1_count(self, status: RoundStatus) -> None:
        """The server's claimed round-1 n is at most what the shuffler released in round 1."""
        assert self.parameters is not None
        verify_round1_count(self.parameters, status)

    def check_release_threshold(self, status: RoundStatus) -> None:
        """The shuffler must hold round 2 until n_min users took part.

        docs/protocol.md section 2, dropouts.
        """
        assert self.parameters is not None
        verify_release_threshold(self.parameters, status)

    # -- bodies --------------------------------------------------------------------------
    def round1(self, level_index: int) -> tuple[dict[str, str], SentRound1]:
        if self.view is None or self.key is None:
            raise ClientError("fetch the campaign first")
        reported = report_level(level_index, self.view, self.rng)
        body = round1_body(self.view, self.key, reported)
        return body, SentRound1(level_index=level_index, reported_level=reported,
                                level_ciphertext=body["level"])

    def round2(self, items: Iterable[int | str]) -> tuple[dict[str, object], SentRound2]:
        if self.parameters is None or self.view is None or self.key is None:
            raise ClientError("fetch and verify the parameters first")
        assert self.level_index is not None
        items = self.item_ids(items)
        reported = self.reported_level
        if reported is None:
            reported = report_level(self.level_index, self.view, self.rng)
        fitted, slots = data_slots(items, self.parameters, self.level_index, self.rng)
        body = round2_body(self.view, self.key, reported, slots)
        sent = SentRound2(level_index=self.level_index, reported_level=reported,
                          items=fitted, slots=tuple(slots))
        return body, sent
