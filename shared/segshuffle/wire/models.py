"""Pydantic models of every HTTP body of the server and the shuffler (docs/architecture.md).

Request bodies are validated strictly: unknown fields are refused, JSON types are
not coerced (``"3"`` is not an integer), sizes are bounded, and ciphertexts must be
base64url strings (no padding) of exactly :data:`CIPHERTEXT_B64_LENGTH` characters
that decode to :data:`CIPHERTEXT_LENGTH` bytes.  Response bodies ignore unknown
fields, so a client keeps working when a server adds a member.

Hashes that bind messages to their context (docs/wire.md): ``config_hash`` is
SHA-256 of the canonical JSON of the campaign's :class:`CampaignConfig`;
``parameters_hash`` the same of the :class:`PublishedParameters`.  Canonical JSON is
the JSON Canonicalization Scheme of RFC 8785 (JCS) applied to the model's JSON-mode
dump (:func:`canonical_json`, :func:`context_hash`; docs/wire.md, "Canonical
JSON"), so that an implementation in any language derives the same bytes: numbers
as ECMAScript writes them (``1`` for 1.0, ``0.000002`` for 2e-06), strings in
UTF-8 with only the mandatory escapes, members sorted by their UTF-16 code units.
Hashes travel as lowercase hex; the HPKE ``info`` uses the 32 raw bytes.

The blanket mode (:mod:`segshuffle.core.blanket`) travels as ``blanket_mode`` in
the configuration and the parameters.  Its default, ``"slots"``, is left out of
their dumps; an ``"independent"`` campaign's hashes bind the mode, and a client
that does not know the field fails the hash check instead of sending the wrong
geometry.  Likewise ``correlation_ratio`` R (docs/protocol.md section 5.1: how much
correlation between levels and items the optimizer guards against) is left out when it
is 1, so every document of a campaign that does not use it hashes as before.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import math
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
    model_validator,
)

from segshuffle.core import blanket as _blanket
from segshuffle.core import rules
from segshuffle.core.blanket import BlanketMode
from segshuffle.core.rules import MAX_CORRELATION_RATIO

# --- sizes -------------------------------------------------------------------------------

KEM_ID_X25519 = 0x0020
"""RFC 9180 KEM id of DHKEM(X25519, HKDF-SHA256)."""
KDF_ID_HKDF_SHA256 = 0x0001
AEAD_ID_AES_128_GCM = 0x0001

ENC_LENGTH = 32
"""Length of the HPKE encapsulated key (X25519 public key)."""
TAG_LENGTH = 16
CIPHERTEXT_LENGTH = ENC_LENGTH + 32 + TAG_LENGTH
"""``enc || ct`` of one 32-byte plaintext: 80 bytes."""
CIPHERTEXT_B64_LENGTH = math.ceil(CIPHERTEXT_LENGTH * 4 / 3)
"""Characters of an unpadded base64url ciphertext: 107."""
PUBLIC_KEY_B64_LENGTH = math.ceil(ENC_LENGTH * 4 / 3)

MAX_DOMAIN_SIZE = rules.MAX_DOMAIN_SIZE
"""Largest item domain (including padding ids) a campaign may declare."""
MAX_ITEM_NAMES = 100_000
MAX_ITEM_NAME_LENGTH = 200
MAX_SET_SIZE = rules.MAX_SET_SIZE
MAX_LEVELS = rules.MAX_LEVELS
MAX_LEVEL_EPSILON = rules.MAX_LEVEL
"""Privacy levels above this are refused (the protocol's cap, :mod:`segshuffle.core.rules`)."""
MIN_LEVEL_EPSILON = rules.MIN_LEVEL
MAX_MESSAGES_PER_SUBMISSION = rules.MAX_MESSAGES_PER_USER
"""Data ciphertexts one round-2 submission may carry (``messages_per_user``: s + ceil(m),
or s + d in the independent blanket mode)."""
MAX_CHUNK_CIPHERTEXTS = 20_000
MAX_CHUNK_COUNT = 1_000_000
MAX_USERS = 100_000_000

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""Campaign and batch ids: 1-64 ASCII letters, digits, '.', '_', '-' (no NUL: they go in info)."""
HEX_SHA256_PATTERN = r"^[0-9a-f]{64}$"
KEY_ID_PATTERN = r"^[0-9a-f]{16}$"


def b64url_encode(data: bytes) -> str:
    """Unpadded base64url (RFC 4648 section 5)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str, length: int | None = None) -> bytes:
    """Strict unpadded base64url: canonical encoding only, optional exact byte length."""
    if not isinstance(text, str) or "=" in text:
        raise ValueError("must be unpadded base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("must be unpadded base64url") from None
    if b64url_encode(data) != text:
        raise ValueError("must be canonical unpadded base64url")
    if length is not None and len(data) != length:
        raise ValueError(f"must decode to {length} bytes, got {len(data)}")
    return data


def _check_ciphertext(text: str) -> str:
    b64url_decode(text, CIPHERTEXT_LENGTH)
    return text


def _check_public_key(text: str) -> str:
    b64url_decode(text, ENC_LENGTH)
    return text


Ciphertext = Annotated[
    str,
    StringConstraints(
        min_length=CIPHERTEXT_B64_LENGTH,
        max_length=CIPHERTEXT_B64_LENGTH,
        pattern=r"^[A-Za-z0-9_-]+$",
    ),
    AfterValidator(_check_ciphertext),
]
"""One HPKE ciphertext ``enc || ct``: 80 bytes as 107 base64url characters."""

PublicKeyB64 = Annotated[
    str,
    StringConstraints(
        min_length=PUBLIC_KEY_B64_LENGTH, max_length=PUBLIC_KEY_B64_LENGTH,
        pattern=r"^[A-Za-z0-9_-]+$",
    ),
    AfterValidator(_check_public_key),
]
Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
KeyId = Annotated[str, StringConstraints(pattern=KEY_ID_PATTERN)]
HexSha256 = Annotated[str, StringConstraints(pattern=HEX_SHA256_PATTERN)]
ItemName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ITEM_NAME_LENGTH)]
Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Round = Literal[1, 2]
Stream = Literal["levels", "data"]
Phase = Literal["round1", "round2", "done", "failed", "aborted"]
"""Campaign phases: collecting levels, parameters published (collecting data), decoded;
or ended without results: ``failed`` (a round could not be finished, e.g. too few valid
messages) or ``aborted`` (by the administrator).  The last three are terminal."""
TERMINAL_PHASES: frozenset[str] = frozenset({"done", "failed", "aborted"})
BlanketModeName = Literal["slots", "independent"]
"""The values of :class:`segshuffle.core.blanket.BlanketMode` (checked at import)."""
DEFAULT_BLANKET_MODE: BlanketModeName = "slots"

if set(get_args(BlanketModeName)) != {mode.value for mode in BlanketMode}:  # pragma: no cover
    raise ImportError("BlanketModeName is out of step with segshuffle.core.blanket.BlanketMode")


# --- canonical JSON and hashes ------------------------------------------------------------


MAX_SAFE_INTEGER = 2**53 - 1
"""Largest integer canonical JSON takes: every JSON number is an IEEE 754 double (RFC 8785)."""

_JCS_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                "\r": "\\r", "\t": "\\t"}
_JCS_ESCAPES.update({chr(c): f"\\u{c:04x}" for c in range(0x20) if chr(c) not in _JCS_ESCAPES})
_JCS_ESCAPED = re.compile('[\\x00-\\x1f"\\\\]')


def _jcs_number(value: float) -> str:
    """ECMAScript's Number::toString of a finite double (ECMA-262 7.1.12.1, RFC 8785 3.2.2.3).

    Python's ``repr`` gives the shortest digit string that reads back as the same
    double (the digits ECMAScript requires); only their layout differs.
    """
    if not math.isfinite(value):
        raise ValueError(f"canonical JSON has no representation of {value!r}")
    if value == 0:
        return "0"  # -0 too
    if value < 0:
        return "-" + _jcs_number(-value)
    mantissa, _, exponent_text = float.__repr__(float(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    exponent = int(exponent_text or "0") - len(fraction)  # value = int(digits) * 10^exponent
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    k = len(digits)
    n = exponent + k  # value = 0.digits * 10^n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return f"0.{'0' * -n}{digits}"
    sign = "+" if n - 1 >= 0 else "-"
    head = digits[0] if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{head}e{sign}{abs(n - 1)}"


def _jcs_string(text: str) -> str:
    """A JSON string with only the escapes RFC 8785 3.2.2.2 prescribes (no ``\\u`` for
    non-ASCII); lone surrogates are refused, as I-JSON (RFC 7493) requires."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("canonical JSON strings must be valid Unicode (no lone "
                         "surrogates)") from None
    return '"' + _JCS_ESCAPED.sub(lambda match: _JCS_ESCAPES[match.group(0)], text) + '"'


def _utf16_order(key: str) -> bytes:
    """Sort key of a member name: its UTF-16 code units (RFC 8785 3.2.3)."""
    return key.encode("utf-16-be")


def _jcs(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise ValueError(f"integer {value} is beyond what a JSON number (an IEEE 754 "
                             "double) holds exactly")
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(_jcs_number(value))
    elif isinstance(value, str):
        out.append(_jcs_string(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, element in enumerate(value):
            if index:
                out.append(",")
            _jcs(element, out)
        out.append("]")
    elif isinstance(value, dict):
        out.append("{")
        if not all(isinstance(key, str) for key in value):
            raise TypeError("canonical JSON member names must be strings")
        for index, key in enumerate(sorted(value, key=_utf16_order)):
            if index:
                out.append(",")
            out.append(_jcs_string(key))
            out.append(":")
            _jcs(value[key], out)
        out.append("}")
    else:
        raise TypeError(f"canonical JSON cannot encode {type(value).__name__}")


def canonical_json(obj: BaseModel | Any) -> bytes:
    """The RFC 8785 (JCS) canonical form of ``obj``, as UTF-8 bytes.

    A model is first dumped in JSON mode.  JSON values are ``None``, booleans,
    integers of at most 2^53 - 1 in magnitude, finite floats, strings, lists (or
    tuples) and dicts with string keys; anything else raises :class:`TypeError`,
    NaN, infinities, larger integers and lone surrogates :class:`ValueError`.
    Integers and integral floats are the same number (``1`` and ``1.0`` both give
    ``1``), so the result does not depend on how the values arrived.
    """
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    out: list[str] = []
    _jcs(obj, out)
    return "".join(out).encode("utf-8")


def context_hash(obj: BaseModel | Any) -> bytes:
    """SHA-256 of :func:`canonical_json` (32 raw bytes, as the HPKE ``info`` uses it)."""
    return hashlib.sha256(canonical_json(obj)).digest()


def context_hash_hex(obj: BaseModel | Any) -> str:
    """:func:`context_hash` as lowercase hex (as the JSON bodies carry it)."""
    return context_hash(obj).hex()


# --- base classes -------------------------------------------------------------------------


class RequestModel(BaseModel):
    """A request body: strict types, unknown fields refused."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class ResponseModel(BaseModel):
    """A response body: unknown fields ignored (forward compatible)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


DEFAULT_CORRELATION_RATIO = 1.0
"""R = 1: the optimizer assumes levels independent of items (docs/protocol.md section 5)."""


class _DefaultBlanketModeOmitted(ResponseModel):
    """A hashed model whose ``blanket_mode`` and ``correlation_ratio`` are left out of every
    dump when they are the defaults.

    The canonical JSON, hence the hash, of a ``"slots"`` campaign has no
    ``blanket_mode`` member, and one with R = 1 no ``correlation_ratio``; reading such a
    dump fills the defaults back in.
    """

    blanket_mode: BlanketModeName = DEFAULT_BLANKET_MODE
    correlation_ratio: float = DEFAULT_CORRELATION_RATIO

    # No return annotation: pydantic then documents the model's own schema.
    @model_serializer(mode="wrap")
    def _omit_default_blanket_mode(self, handler: SerializerFunctionWrapHandler):
        data = handler(self)
        if isinstance(data, dict):
            if data.get("blanket_mode") == DEFAULT_BLANKET_MODE:
                del data["blanket_mode"]
            if data.get("correlation_ratio") == DEFAULT_CORRELATION_RATIO:
                del data["correlation_ratio"]
        return data


# --- campaigns ----------------------------------------------------------------------------


class InsecureParameters(RequestModel):
    """Fixed round-2 parameters that bypass the optimizer (and privacy).

    Only accepted by a server started with the insecure flag; meant for tests that
    check count integrity end to end (e.g. lambda = 1 and m = 0).
    """

    m: float = Field(ge=0.0, le=rules.MAX_BLANKET_RATE, allow_inf_nan=False)
    lambdas: list[Probability] = Field(min_length=1, max_length=MAX_LEVELS)


def _check_levels(levels: list[float]) -> list[float]:
    for previous, current in itertools.pairwise(levels):
        if current <= previous:
            raise ValueError("levels must be strictly increasing")
    return levels


Levels = Annotated[
    list[Annotated[float, Field(ge=MIN_LEVEL_EPSILON, le=MAX_LEVEL_EPSILON,
                                allow_inf_nan=False)]],
    Field(min_length=1, max_length=MAX_LEVELS),
    AfterValidator(_check_levels),
]


MAX_REASON_LENGTH = 500


class CampaignAbort(RequestModel):
    """``POST /v1/campaigns/{cid}/abort``: end a campaign without results."""

    reason: Annotated[str, StringConstraints(min_length=1, max_length=MAX_REASON_LENGTH)] = \
        "aborted by the administrator"


class CampaignCreate(RequestModel):
    """``POST /v1/campaigns``: what the admin asks for.

    Give ``items`` (names, d = len(items)) or ``domain_size`` (d), or both when they
    agree.  ``delta`` defaults to 0.01/n with n known after round 1;
    ``level_privacy`` is ``null`` for exact level counts or eps_p for K-ary
    randomized response; ``padding`` appends s padding ids to the domain (docs/protocol.md
    section 2); ``blanket_mode`` is ``"slots"`` (ceil(m) slots, the default) or
    ``"independent"`` (one Bernoulli(m / D) slot per item of the privacy domain
    of D items, docs/protocol.md section 4), whose s + D data ciphertexts per submission must
    fit :data:`MAX_MESSAGES_PER_SUBMISSION`.
    """

    id: Identifier
    items: list[ItemName] | None = Field(default=None, min_length=2, max_length=MAX_ITEM_NAMES)
    domain_size: int | None = Field(default=None, ge=2, le=MAX_DOMAIN_SIZE)
    set_size: int = Field(ge=1, le=MAX_SET_SIZE)
    levels: Levels
    delta: float | None = Field(default=None, ge=rules.MIN_DELTA, lt=1.0, allow_inf_nan=False)
    min_users: int = Field(ge=2, le=MAX_USERS)
    dropout_tolerance: float = Field(default=rules.DEFAULT_DROPOUT_TOLERANCE, ge=0.0, lt=1.0,
                                     allow_inf_nan=False)
    fake_tolerance: float = Field(default=0.0, ge=0.0, lt=1.0, allow_inf_nan=False)
    level_privacy: float | None = Field(default=None, gt=0.0, le=MAX_LEVEL_EPSILON,
                                        allow_inf_nan=False)
    fixed_size: bool = True
    padding: bool = True
    blanket_mode: BlanketModeName = DEFAULT_BLANKET_MODE
    correlation_ratio: float = Field(default=DEFAULT_CORRELATION_RATIO, ge=1.0,
                                     le=MAX_CORRELATION_RATIO, allow_inf_nan=False)
    """R: the correlation between levels and items the optimizer guards against (1: none)."""
    insecure_parameters: InsecureParameters | None = None

    @model_validator(mode="after")
    def _consistent(self) -> CampaignCreate:
        if self.items is None and self.domain_size is None:
            raise ValueError("give items or domain_size")
        if self.items is not None:
            if len(set(self.items)) != len(self.items):
                raise ValueError("item names must be unique")
            if self.domain_size is not None and self.domain_size != len(self.items):
                raise ValueError("domain_size must equal the number of items")
        d = self.domain_size if self.domain_size is not None else len(self.items or ())
        if self.set_size > d:
            raise ValueError("set_size must not exceed the domain size")
        privacy_domain = d + (self.set_size if self.padding else 0)
        if privacy_domain > MAX_DOMAIN_SIZE:
            raise ValueError(f"the domain including padding must not exceed {MAX_DOMAIN_SIZE}")
        if self.blanket_mode == BlanketMode.INDEPENDENT:
            # Every positive rate m gives the same submission: one slot per item of the
            # D-item privacy domain (m = 1 <= D stands for all of them).
            refusal = ("the independent blanket mode sends one data message per item of the "
                       f"privacy domain (D = {privacy_domain}) besides the s items")
            try:
                largest = _blanket.messages_per_user(self.set_size, 1.0, privacy_domain,
                                                     self.blanket_mode)
            except ValueError as exc:  # beyond the protocol's cap on messages per user
                raise ValueError(f"{refusal}: {exc}; use blanket_mode 'slots' or a smaller "
                                 "domain") from None
            if largest > MAX_MESSAGES_PER_SUBMISSION:
                raise ValueError(f"{refusal}: {largest} messages, more than one submission "
                                 f"takes ({MAX_MESSAGES_PER_SUBMISSION}); use blanket_mode "
                                 "'slots' or a smaller domain")
        if self.insecure_parameters is not None:
            if len(self.insecure_parameters.lambdas) != len(self.levels):
                raise ValueError("insecure_parameters.lambdas needs one rate per level")
            _blanket.require_blanket_rate(self.insecure_parameters.m, privacy_domain,
                                          self.blanket_mode)
        return self

    def to_config(self) -> CampaignConfig:
        """The normalized configuration (defaults filled, d explicit) that gets hashed."""
        d = self.domain_size if self.domain_size is not None else len(self.items or ())
        return CampaignConfig(
            id=self.id,
            items=list(self.items) if self.items is not None else None,
            domain_size=d,
            set_size=self.set_size,
            levels=[float(e) for e in self.levels],
            delta=self.delta,
            min_users=self.min_users,
            dropout_tolerance=float(self.dropout_tolerance),
            fake_tolerance=float(self.fake_tolerance),
            level_privacy=self.level_privacy,
            fixed_size=self.fixed_size,
            padding=self.padding,
            blanket_mode=self.blanket_mode,
            correlation_ratio=float(self.correlation_ratio),
            insecure_parameters=self.insecure_parameters,
        )


class CampaignConfig(_DefaultBlanketModeOmitted):
    """A campaign's normalized configuration; ``config_hash`` is SHA-256 of its canonical JSON.

    ``domain_size`` is d, the number of real items; the privacy domain is
    :attr:`privacy_domain_size` (d + s with padding).  ``blanket_mode`` (inherited,
    default ``"slots"``) and ``correlation_ratio`` (inherited, default 1) are omitted
    from the dump when they are the defaults.
    """

    id: str
    items: list[str] | None
    domain_size: int
    set_size: int
    levels: list[float]
    delta: float | None
    min_users: int
    dropout_tolerance: float
    fake_tolerance: float = 0.0
    level_privacy: float | None
    fixed_size: bool
    padding: bool
    insecure_parameters: InsecureParameters | None = None

    @property
    def padding_items(self) -> int:
        return self.set_size if self.padding else 0

    @property
    def privacy_domain_size(self) -> int:
        """d + s with padding, d without: the domain the accounting and the decoder use."""
        return self.domain_size + self.padding_items

    def hash_hex(self) -> str:
        return context_hash_hex(self)


class PublishedParameters(_DefaultBlanketModeOmitted):
    """Round-2 parameters, published once after round 1 and immutable (docs/protocol.md section 2).

    ``privacy_domain_size`` D counts the padding ids; a user at level k sends
    ``messages_per_user = set_size + blanket_slots`` data ciphertexts when
    ``fixed_size`` (docs/wire.md), where ``blanket_slots`` is ceil(m) in the
    ``"slots"`` ``blanket_mode`` and D in the ``"independent"`` one
    (:func:`segshuffle.core.blanket.blanket_slots`; the mode is the campaign's and
    is omitted from the dump when it is the default).  ``users`` is the round-1 n,
    ``accounting_users`` n_min = ceil((1 - tau) n): the shuffler must not release
    round 2 with fewer participants.  ``fake_tolerance`` f is the campaign's tolerated
    fraction of fake or colluding participants and ``honest_users`` h = ceil((1 - f) n_min)
    the users whose blanket every published epsilon is accounted with
    (:func:`segshuffle.core.rules.honest_users`).  ``correlation_ratio`` is the campaign's R
    (omitted at 1): the lambdas were chosen to guard against that much correlation between
    levels and items (docs/protocol.md section 5.1).
    """

    campaign_id: str
    key_id: str
    config_hash: str
    levels: list[float]
    m: float
    blanket_slots: int
    lambdas: list[float]
    domain_size: int
    privacy_domain_size: int
    padding_items: int
    set_size: int
    messages_per_user: int
    fixed_size: bool
    level_privacy: float | None
    delta: float
    users: int
    accounting_users: int
    honest_users: int
    dropout_tolerance: float
    fake_tolerance: float = 0.0
    epsilons: list[float | None]
    epsilons_lower: list[float | None]
    mse_bound: float | None
    insecure: bool = False

    @model_validator(mode="before")
    @classmethod
    def _legacy_honest_users(cls, data: Any) -> Any:
        """Documents from before fake tolerances accounted with n_min: h = n_min, f = 0."""
        if (isinstance(data, dict) and "honest_users" not in data
                and "fake_tolerance" not in data and "accounting_users" in data):
            data = {**data, "honest_users": data["accounting_users"]}
        return data

    def hash_hex(self) -> str:
        return context_hash_hex(self)


class HpkeConfig(ResponseModel):
    """``GET /v1/campaigns/{cid}/hpke-config``: the campaign's pinned public key."""

    key_id: KeyId
    kem_id: int = KEM_ID_X25519
    kdf_id: int = KDF_ID_HKDF_SHA256
    aead_id: int = AEAD_ID_AES_128_GCM
    public_key: PublicKeyB64


Signature = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{86}$")]
"""An Ed25519 signature: 64 bytes, unpadded base64url."""


class DocumentSignatures(ResponseModel):
    """The server's Ed25519 signatures over a view's statements (docs/wire.md section 9):
    ``campaign`` (id, config hash, key id, public key), ``parameters`` (id, parameters
    hash; once published) and ``end`` (id, terminal phase, end reason; once ended)."""

    campaign: Signature | None = None
    parameters: Signature | None = None
    end: Signature | None = None


class SigningKey(ResponseModel):
    """``GET /v1/signing-key`` (admin): the server's document-signing public key."""

    algorithm: Literal["Ed25519"] = "Ed25519"
    public_key: str
    """Unpadded base64url of the 32 raw bytes."""


class CampaignView(ResponseModel):
    """``GET /v1/campaigns/{cid}``: the public view of a campaign."""

    id: str
    phase: Phase
    config: CampaignConfig
    config_hash: str
    key_id: str
    hpke_config: HpkeConfig
    parameters: PublishedParameters | None = None
    parameters_hash: str | None = None
    end_reason: str | None = None
    """Why a ``failed`` or ``aborted`` campaign ended (``None`` otherwise)."""
    signatures: DocumentSignatures | None = None
    """The server's signatures (clients given the server key check them)."""

    def context_hash_for(self, round_: int) -> bytes:
        """The 32-byte context hash messages of ``round_`` bind (docs/architecture.md)."""
        if round_ == 1:
            return bytes.fromhex(self.config_hash)
        if round_ == 2:
            if self.parameters_hash is None:
                raise ValueError("round-2 parameters are not published yet")
            return bytes.fromhex(self.parameters_hash)
        raise ValueError(f"round must be 1 or 2, got {round_}")


# --- batches (shuffler -> server) ---------------------------------------------------------


class BatchChunk(RequestModel):
    """``PUT .../rounds/{round}/batches/{batch_id}``: one chunk of one stream of a batch."""

    chunk_index: int = Field(ge=0, lt=MAX_CHUNK_COUNT)
    chunk_count: int = Field(ge=1, le=MAX_CHUNK_COUNT)
    stream: Stream
    ciphertexts: list[Ciphertext] = Field(max_length=MAX_CHUNK_CIPHERTEXTS)

    @model_validator(mode="after")
    def _index_in_range(self) -> BatchChunk:
        if self.chunk_index >= self.chunk_count:
            raise ValueError("chunk_index must be smaller than chunk_count")
        return self


class MessageFailure(ResponseModel):
    """One message of a chunk that was dropped, with the problem type that says why."""

    stream: Stream
    chunk_index: int
    index: int
    type: str


ChunkState = Literal["queued", "decoded"]
"""Where a chunk is on the server: accepted and waiting to be decoded, or counted."""


class ChunkReceipt(ResponseModel):
    """Answer to a chunk: how many messages were kept, and the dropped ones with the reason.

    ``accepted`` counts null messages too: the shuffler knows whose messages a chunk
    holds, so a per-chunk count of nulls would tell it how many slots those users
    left empty (which depends on their levels).  Only malformed messages, never an
    honest user's, are listed in ``failures``.

    ``state`` says whether the chunk has been decoded.  The server accepts a chunk into
    its decode queue (``202``, ``state: "queued"``) and decodes it in the background;
    while queued only its identity and ``received`` are known, and ``accepted``,
    ``replays``, ``failures`` and ``failures_omitted`` are 0 (empty) and
    ``failure_counts`` is empty: they are reported once ``state`` is ``decoded`` (a
    ``GET`` of the chunk, or a repeated ``PUT``).  A receipt without ``state`` (a server
    that decoded every chunk while answering) is a decoded one.
    """

    campaign_id: str
    round: int
    batch_id: str
    stream: Stream
    chunk_index: int
    chunk_count: int
    received: int
    accepted: int
    replays: int
    failures: list[MessageFailure]
    failures_omitted: int = 0
    """Failures beyond the listed ones (the list is capped); the counts stay exact."""
    failure_counts: dict[str, int] = Field(default_factory=dict)
    """Dropped messages per problem name (decrypt-failed, invalid-message, out-of-domain,
    replay)."""
    duplicate: bool = False
    """True when this exact chunk had already been accepted, queued or decoded
    (idempotent retry)."""
    state: ChunkState = "decoded"
    """``queued`` until the chunk has been decrypted and counted, then ``decoded``."""


class StreamSummary(ResponseModel):
    """Totals of one stream of a completed batch (``accepted`` includes null messages)."""

    chunks: int
    received: int
    accepted: int
    replays: int
    decrypt_failures: int
    invalid_messages: int
    out_of_domain: int


class BatchCompletion(ResponseModel):
    """Answer to ``POST .../batches/{batch_id}/complete``: the round is finished."""

    campaign_id: str
    round: int
    batch_id: str
    phase: Phase
    streams: dict[str, StreamSummary]
    failures: list[MessageFailure]
    failures_omitted: int = 0
    parameters_hash: str | None = None
    end_reason: str | None = None
    """With phase ``failed``: why the round could not be finished."""


class CompletionPending(ResponseModel):
    """``202`` answer to ``POST .../batches/{batch_id}/complete``: the round's completion
    is a job the server computes once, in the background (round 1: the optimizer; round
    2: the decoding); ask again after ``Retry-After`` for the :class:`BatchCompletion`."""

    campaign_id: str
    round: int
    batch_id: str
    state: Literal["waiting", "computing"]
    """``computing`` while a server process holds the job, ``waiting`` before (or between
    attempts, after a failure)."""
    waiting_seconds: float
    """Seconds since the completion was first requested."""
    computing_seconds: float | None = None
    """Seconds the current attempt has run (``None`` while waiting)."""
    attempts: int
    """Attempts begun, the current one included (one more after a server process died
    while computing)."""
    last_error: str | None = None
    """Why the last attempt failed, if one did (it is retried)."""


# --- results --------------------------------------------------------------------------------


class ItemEstimate(ResponseModel):
    """W^_j (unbiased share of users holding item j), its standard error and the projection."""

    id: int
    name: str | None
    estimate: float | None
    """None only when no level sends any signal (every lambda_k = 0)."""
    standard_error: float | None
    projected: float | None


class LevelPrivacy(ResponseModel):
    """Achieved user-level guarantee of one level (upper bound and lower-bound audit)."""

    level: float
    lam: float
    epsilon_upper: float | None
    epsilon_lower: float | None
    users_round1: float
    users_round2: float


class LevelPairPrivacy(ResponseModel):
    """What round 2 reveals about a change between two levels' rates, the items unchanged
    (docs/protocol.md section 4.6): the server's full view, at the report's delta."""

    levels: list[float]
    """One level of each rate (levels with the same rate send alike)."""
    lambdas: list[float]
    epsilon_upper: float | None
    """The certified bound (None: none within 30, no guarantee)."""
    epsilon_lower: float | None = None
    """An exhibited lower bound, when computed."""
    epsilon_both_rounds: float | None = None
    """Rounds 1 and 2 together: level_privacy eps_p + epsilon_upper (None without
    level privacy, where round 1 sends the level itself)."""


class PrivacyReport(ResponseModel):
    """The accounting behind a finished campaign (part of :class:`Results`)."""

    delta: float
    m: float
    blanket_mode: BlanketModeName = DEFAULT_BLANKET_MODE
    messages_per_user: int | None = None
    """Data ciphertexts per fixed-size round-2 submission (s + blanket slots)."""
    lambdas: list[float]
    users: int
    accounting_users: int
    fake_tolerance: float = 0.0
    """The campaign's tolerated fraction f of fake or colluding round-2 participants."""
    honest_users: int | None = None
    """h = ceil((1 - f) n_min): the honest users every epsilon below is accounted with."""
    round2_users: int
    levels: list[LevelPrivacy]
    insecure: bool
    level_privacy: float | None = None
    """The campaign's eps_p of randomized response in round 1 (None: exact level counts)."""
    level_pairs: list[LevelPairPrivacy] | None = None
    """Round 2's guarantee between every two levels whose rates differ (None: not
    computed, as by servers before it was reported)."""
    level_pairs_complete: bool = True
    """False when only neighbouring rates and the two extremes were paired."""


class Results(ResponseModel):
    """``GET /v1/campaigns/{cid}/results`` (admin)."""

    campaign_id: str
    phase: Phase
    items: list[ItemEstimate]
    padding: list[ItemEstimate]
    privacy: PrivacyReport
    round2_messages: int
    """Data-stream ciphertexts received in round 2."""
    null_messages: int
    """Of those, null messages (unsent slots), discarded."""
    dropped_messages: int
    """Of those, messages dropped as failures or replays."""
    parameters_hash: str


class CampaignSummary(ResponseModel):
    """One campaign in :class:`CampaignList`."""

    id: str
    phase: Phase


class CampaignList(ResponseModel):
    """``GET /v1/campaigns`` (admin): one page of campaigns sorted by id; ``next`` is the
    ``after`` cursor of the following page (``None`` on the last page)."""

    campaigns: list[CampaignSummary]
    next: str | None = None


# --- shuffler bodies ------------------------------------------------------------------------


USER_TOKEN_PATTERN = r"^[A-Za-z0-9_-]{43}$"
"""A user token: 32 random bytes as unpadded base64url."""


class EnrollmentRequest(RequestModel):
    """``POST /v1/campaigns/{cid}/enrollments``: optional invitation code of the policy, and
    optionally the token the client wants (32 random bytes it drew, base64url).

    With a proposed token, enrolling is idempotent: a retry of the same request after an
    ambiguous failure (the first attempt was recorded, its answer lost) gets the same
    token back instead of ``invitation-used``.
    """

    invitation: Annotated[str, StringConstraints(min_length=1, max_length=512)] | None = None
    token: Annotated[str, StringConstraints(pattern=USER_TOKEN_PATTERN)] | None = None


class EnrollmentResponse(ResponseModel):
    campaign_id: str
    token: str


class Round1Submission(RequestModel):
    """Round 1: one sealed level message."""

    level: Ciphertext


class Round2Submission(RequestModel):
    """Round 2: one sealed level message (dropouts, docs/protocol.md section 2) and the data."""

    level: Ciphertext
    data: list[Ciphertext] = Field(min_length=1, max_length=MAX_MESSAGES_PER_SUBMISSION)


class SubmissionReceipt(ResponseModel):
    campaign_id: str
    round: int
    accepted: bool = True


class RoundStatus(ResponseModel):
    """``GET /v1/campaigns/{cid}/rounds/{round}`` on the shuffler."""

    campaign_id: str
    round: int
    participants: int
    required: int
    released: bool


class ReleaseResponse(ResponseModel):
    campaign_id: str
    round: int
    batch_id: str
    messages: int
    chunks: int
