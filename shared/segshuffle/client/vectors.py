"""Test vectors of the wire protocol (docs/wire.md), written to docs/test-vectors.json.

Run ``python -m segshuffle.client.vectors`` to print them, ``--out PATH`` to write
them, ``--check PATH`` to compare a file with a fresh generation (exit status 1
on any difference).  Everything is deterministic:

- the server key, every plaintext nonce and every HPKE ephemeral key are derived
  from fixed labels with SHA-256 (:func:`_derived`);
- HPKE base-mode sealing is done here, step by step after RFC 9180 sections 4.1,
  5.1 and 5.2, with a given ephemeral key (:func:`seal_with_ephemeral`): the
  library's ``Suite.encrypt`` always draws a fresh one.  The result is an
  ordinary HPKE ciphertext that any RFC 9180 implementation opens;
- the round-2 parameters come from the optimizer (:func:`optimized_parameters`),
  whose last bits may depend on the platform, so :func:`build_vectors` can take
  already published documents and regenerate everything else from them.

Sections of the file:

``hpke``
    one entry per message: ``campaign_id``, ``round``, ``key_id``,
    ``context_hash`` (hex), ``info`` (hex), ``private_key`` and ``public_key``
    (hex, raw X25519), ``ephemeral_private_key`` (hex), ``ciphertext``
    (base64url, no padding), ``plaintext`` (hex), ``kind`` (``level``, ``item``
    or ``null``), ``value`` and ``role`` (level, data item, blanket item,
    padding item, null slot).
``canonical_json``
    ``{description, object, canonical, sha256}``: RFC 8785 canonical forms.
``accountant``
    the accountant alone, for ports to other languages: settings of both blanket
    modes (s = 1, 2 and 4; integer and non-integer m; small and large populations),
    each with ``mode``, ``set_size``, ``domain_size``, ``users`` (h), ``m``,
    ``lambda``, ``delta`` and one verdict per level: ``delta_user`` (the certified
    upper bound; a port's may be smaller, never by more than it can prove) and
    ``holds`` (delta_user <= delta).
``parameters``
    campaigns with their configuration and published parameters, both hashes,
    the honest count the rule gives (``honest_users_rule``, h = ceil((1 - f) n_min)),
    the accountant's verdict for every level (``holds`` is delta_user(E_k) <= delta at
    the published lambda_k and ``honest_users``), and the whole client check's
    (docs/protocol.md section 6): ``client_checks``, the names of the checks it fails
    in its order (``lambdas``, ``honest_users``, ``epsilons``, ``delta``, ...), and
    ``client_accepts``, true when there are none.  Two optimized campaigns, the
    campaigns of :data:`PARAMETER_SETTINGS` at a given m, and each of them tampered in
    the ways of :data:`TAMPERINGS`.

This module uses only the protocol core, :mod:`segshuffle.crypto`, the wire models
and the client's verification: no server stack.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import math
import struct
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from segshuffle.core import accounting, blanket
from segshuffle.core.blanket import BlanketMode
from segshuffle.core.optimizer import optimize
from segshuffle.core.rules import (
    PUBLICATION_HEADROOM,
    accounting_users,
    default_delta,
    honest_users,
)
from segshuffle.crypto import (
    build_info,
    key_config,
    key_id_for,
    private_key_bytes,
    private_key_from_bytes,
    public_key_bytes,
    public_key_from_bytes,
)
from segshuffle.wire.models import (
    AEAD_ID_AES_128_GCM,
    KDF_ID_HKDF_SHA256,
    KEM_ID_X25519,
    CampaignConfig,
    CampaignCreate,
    CampaignView,
    PublishedParameters,
    b64url_encode,
    canonical_json,
)
from segshuffle.wire.plaintext import NONCE_LENGTH, Kind, encode_plaintext

from .errors import VerificationError
from .verify import verify_parameters

FORMAT = "segshuffle test vectors v1"
DEFAULT_PATH = Path("docs/test-vectors.json")

# --- deterministic HPKE (RFC 9180 base mode, DHKEM(X25519, HKDF-SHA256), AES-128-GCM) ---

_KEM_SUITE_ID = b"KEM" + struct.pack(">H", KEM_ID_X25519)
_HPKE_SUITE_ID = b"HPKE" + struct.pack(">HHH", KEM_ID_X25519, KDF_ID_HKDF_SHA256,
                                       AEAD_ID_AES_128_GCM)
_AEAD_KEY_LENGTH = 16
_AEAD_NONCE_LENGTH = 12
_HASH_LENGTH = 32


def _labeled_extract(suite_id: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    """RFC 9180 LabeledExtract with HKDF-SHA256."""
    return hmac.new(salt, b"HPKE-v1" + suite_id + label + ikm, hashlib.sha256).digest()


def _labeled_expand(suite_id: bytes, prk: bytes, label: bytes, info: bytes,
                    length: int) -> bytes:
    """RFC 9180 LabeledExpand with HKDF-SHA256 (one block: ``length`` <= 32)."""
    if not 0 < length <= _HASH_LENGTH:
        raise ValueError("this expansion yields at most one SHA-256 block")
    labeled = struct.pack(">H", length) + b"HPKE-v1" + suite_id + label + info
    return hmac.new(prk, labeled + b"\x01", hashlib.sha256).digest()[:length]


def seal_with_ephemeral(recipient_public_key: bytes, info: bytes, plaintext: bytes,
                        ephemeral_private_key: bytes) -> bytes:
    """HPKE base-mode ``enc || ct`` with a given ephemeral key (RFC 9180 4.1, 5.1, 5.2).

    For test vectors only: a real message must use a fresh ephemeral key
    (:func:`segshuffle.crypto.seal`); reusing one with another plaintext under the
    same key and ``info`` reuses the AEAD key and nonce.
    """
    ephemeral = X25519PrivateKey.from_private_bytes(ephemeral_private_key)
    recipient = public_key_from_bytes(recipient_public_key)
    enc = public_key_bytes(ephemeral)
    dh = ephemeral.exchange(recipient)
    eae_prk = _labeled_extract(_KEM_SUITE_ID, b"", b"eae_prk", dh)
    shared_secret = _labeled_expand(_KEM_SUITE_ID, eae_prk, b"shared_secret",
                                    enc + recipient_public_key, _HASH_LENGTH)
    psk_id_hash = _labeled_extract(_HPKE_SUITE_ID, b"", b"psk_id_hash", b"")
    info_hash = _labeled_extract(_HPKE_SUITE_ID, b"", b"info_hash", info)
    context = b"\x00" + psk_id_hash + info_hash  # mode_base
    secret = _labeled_extract(_HPKE_SUITE_ID, shared_secret, b"secret", b"")
    key = _labeled_expand(_HPKE_SUITE_ID, secret, b"key", context, _AEAD_KEY_LENGTH)
    base_nonce = _labeled_expand(_HPKE_SUITE_ID, secret, b"base_nonce", context,
                                 _AEAD_NONCE_LENGTH)
    # sequence number 0: the nonce is base_nonce itself; empty associated data
    return enc + AESGCM(key).encrypt(base_nonce, plaintext, b"")


def _derived(label: str, length: int = 32) -> bytes:
    """``length`` bytes of SHA-256 of a fixed label: the vectors' only source of "randomness"."""
    return hashlib.sha256(f"segshuffle test vectors/{label}".encode()).digest()[:length]


SERVER_PRIVATE_KEY = _derived("server key")
"""The raw X25519 private key of every vector (never use it for anything else)."""

# --- campaigns ---------------------------------------------------------------------------

ITEMS = ["café", "naïve", "Zürich", "東京", "emoji 😀", 'say "hi"', "back\\slash", "plain"]
"""Item names: non-ASCII, astral-plane, and characters JSON must escape."""
LEVELS = [0.5, 1.0, 2.0]
LEVEL_COUNTS = [250, 500, 250]
"""Round-1 histogram n_k the published parameters are computed from (n = 1000)."""
FAKE_TOLERANCE = 0.1
"""The vectors' campaign tolerates 10% fakes: n_min = 900, h = 810."""


GUARDED_RATIO = 3.0
"""The correlation ratio R of the vectors' guarded campaign (docs/protocol.md section 5.1)."""


def campaign_config(mode: BlanketMode, correlation_ratio: float = 1.0) -> CampaignConfig:
    """The configuration of the vectors' campaign in blanket ``mode`` (guarding against
    correlation up to ``correlation_ratio``: another campaign id when above 1)."""
    suffix = "" if correlation_ratio == 1.0 else f"-r{correlation_ratio:g}"
    request: dict[str, Any] = {
        "id": f"vectors-{mode.value}{suffix}", "items": ITEMS, "set_size": 2,
        "levels": LEVELS, "min_users": 100, "dropout_tolerance": 0.1,
        "fake_tolerance": FAKE_TOLERANCE, "blanket_mode": mode.value,
    }
    if correlation_ratio != 1.0:
        request["correlation_ratio"] = correlation_ratio
    return CampaignCreate.model_validate(request).to_config()


def optimized_parameters(config: CampaignConfig, key_id: str,
                         blanket_rate: float | None = None) -> PublishedParameters:
    """What a server publishes after a round 1 with :data:`LEVEL_COUNTS` (exact level counts).

    The same steps as the server's round-1 completion: delta by the campaign's
    rule, the optimizer in the campaign's blanket mode (at ``blanket_rate`` when given:
    the lambdas for that m), n_min from the dropout tolerance and h from n_min and the
    fake tolerance.
    """
    users = sum(LEVEL_COUNTS)
    delta = config.delta if config.delta is not None else default_delta(users)
    mode = blanket.parse_mode(config.blanket_mode)
    domain = config.privacy_domain_size
    s = config.set_size
    result = optimize([float(c) for c in LEVEL_COUNTS], config.levels, domain, s, delta,
                      dropout_tolerance=config.dropout_tolerance,
                      fake_tolerance=config.fake_tolerance, blanket_mode=mode,
                      blanket=blanket_rate, lower_bounds=blanket_rate is None,
                      headroom=PUBLICATION_HEADROOM,
                      correlation_ratio=config.correlation_ratio)
    m = float(result.m)
    return PublishedParameters(
        campaign_id=config.id, key_id=key_id, config_hash=config.hash_hex(),
        levels=list(config.levels), m=m, blanket_mode=mode.value,
        correlation_ratio=config.correlation_ratio,
        blanket_slots=blanket.blanket_slots(m, domain, mode),
        lambdas=[float(x) for x in result.lambdas], domain_size=config.domain_size,
        privacy_domain_size=domain, padding_items=config.padding_items, set_size=s,
        messages_per_user=blanket.messages_per_user(s, m, domain, mode),
        fixed_size=config.fixed_size, level_privacy=config.level_privacy,
        delta=float(delta), users=users,
        accounting_users=accounting_users(float(users), config.dropout_tolerance),
        honest_users=honest_users(float(users), config.dropout_tolerance,
                                  config.fake_tolerance),
        dropout_tolerance=config.dropout_tolerance,
        fake_tolerance=config.fake_tolerance,
        epsilons=[None if e is None else float(e) for e in result.epsilons],
        epsilons_lower=[None if e is None else float(e) for e in result.epsilons_lower],
        mse_bound=float(result.mse_bound), insecure=False,
    )


def tampered_parameters(honest: PublishedParameters) -> PublishedParameters:
    """``honest`` with the strictest level's rate raised to 1: a client must refuse it."""
    lambdas = [1.0, *honest.lambdas[1:]]
    return honest.model_copy(update={"lambdas": lambdas})


def correlation_ignored(honest: PublishedParameters) -> PublishedParameters:
    """``honest`` (of a guarded campaign) claiming R = 1, as if the campaign had not asked
    for a guard: refused (its lambdas may be tuned for independence)."""
    return honest.model_copy(update={"correlation_ratio": 1.0})


def fake_tolerance_ignored(honest: PublishedParameters) -> PublishedParameters:
    """``honest`` claiming to be accounted with all n_min users, as if f were 0: refused."""
    return honest.model_copy(update={"honest_users": honest.accounting_users})


PARAMETER_SETTINGS: tuple[tuple[str, int, int, float], ...] = (
    # (mode, s, d, m): the published m is the server's choice; the client checks what
    # follows from it.  Integer and non-integer m, both modes, s = 1, 2 and 4.
    ("slots", 1, 17, 0.5),
    ("slots", 1, 17, 1.0),
    ("slots", 2, 16, 0.6),
    ("slots", 2, 16, 2.0),
    ("slots", 4, 32, 1.5),
    ("slots", 4, 32, 3.0),
    ("independent", 1, 17, 0.5),
    ("independent", 2, 16, 2.0),
    ("independent", 4, 32, 1.5),
)
"""Campaigns of the ``parameters`` section beside the two optimized ones (n = 1000, the
round 1 of :data:`LEVEL_COUNTS`), each published honestly and tampered twice."""


def setting_config(mode: str, set_size: int, domain_size: int, m: float) -> CampaignConfig:
    """The configuration of one :data:`PARAMETER_SETTINGS` campaign."""
    return CampaignCreate.model_validate({
        "id": f"vectors-{mode}-s{set_size}-d{domain_size}-m{round(m * 100):03d}",
        "domain_size": domain_size, "set_size": set_size, "levels": LEVELS,
        "min_users": 100, "dropout_tolerance": 0.1, "fake_tolerance": FAKE_TOLERANCE,
        "blanket_mode": mode,
    }).to_config()


def _geometry(parameters: PublishedParameters, m: float) -> dict[str, Any]:
    """The fields that follow from m (the client recomputes them)."""
    mode = blanket.parse_mode(parameters.blanket_mode)
    d, s = parameters.privacy_domain_size, parameters.set_size
    return {"m": m, "blanket_slots": blanket.blanket_slots(m, d, mode),
            "messages_per_user": blanket.messages_per_user(s, m, d, mode)}


TAMPERINGS: tuple[tuple[str, Any], ...] = (
    ("the strictest level's lambda raised to 1", tampered_parameters),
    ("honest_users set to n_min, ignoring the fake tolerance", fake_tolerance_ignored),
    ("the strictest level's epsilon halved (understated)",
     lambda p: p.model_copy(update={"epsilons": [p.epsilons[0] / 2, *p.epsilons[1:]]})),
    ("delta ten times the campaign's rule",
     lambda p: p.model_copy(update={"delta": p.delta * 10})),
    ("m halved with its geometry, the lambdas kept",
     lambda p: p.model_copy(update=_geometry(p, p.m / 2))),
    ("one data message more per user than the geometry gives",
     lambda p: p.model_copy(update={"messages_per_user": p.messages_per_user + 1})),
    ("the levels reordered",
     lambda p: p.model_copy(update={"levels": list(reversed(p.levels))})),
    ("users below the campaign's min_users",
     lambda p: p.model_copy(update={"users": 99})),
)
"""Ways a server could misreport parameters; the client's verdict on each is recorded."""


def setting_cases(published: Mapping[str, Mapping[str, Any]] | None, key_id: str
                  ) -> list[dict[str, Any]]:
    """The honest and tampered documents of :data:`PARAMETER_SETTINGS`: the tamperings
    taken in turn, two per campaign, so each appears at least twice."""
    cases = []
    for number, (mode, s, d, m) in enumerate(PARAMETER_SETTINGS):
        config = setting_config(mode, s, d, m)
        if published is not None and config.id in published:
            honest = PublishedParameters.model_validate(published[config.id])
        else:
            honest = optimized_parameters(config, key_id, blanket_rate=m)
        title = f"{mode} blanket, s = {s}, d = {d}, m = {m:g} (published by the server)"
        cases.append(_parameters_case(title, config, honest, key_id))
        for turn in (2 * number, 2 * number + 1):
            name, tamper = TAMPERINGS[turn % len(TAMPERINGS)]
            cases.append(_parameters_case(f"tampered ({title}): {name} (hash recomputed)",
                                          config, tamper(honest), key_id))
    return cases


def level_verdicts(parameters: PublishedParameters) -> list[dict[str, Any]]:
    """For each level: does the published lambda_k meet delta_user(E_k) <= delta?"""
    mode = blanket.parse_mode(parameters.blanket_mode)
    rows = []
    for level, lam in zip(parameters.levels, parameters.lambdas, strict=True):
        arguments = (level, lam, parameters.set_size)
        holds = accounting.user_level_holds(
            *arguments, parameters.delta, parameters.honest_users, parameters.m,
            parameters.privacy_domain_size, mode=mode)
        bound = accounting.user_delta(
            *arguments, parameters.honest_users, parameters.m,
            parameters.privacy_domain_size, mode=mode, delta=parameters.delta)
        rows.append({"level": level, "lambda": lam, "delta_user": bound, "holds": holds})
    return rows


ACCOUNTANT_SETTINGS: tuple[tuple[str, int, int, int, float], ...] = (
    # (mode, s, d, h, m)
    ("slots", 1, 20, 2000, 1.0),
    ("slots", 1, 20, 2000, 0.6),
    ("slots", 1, 17, 5000, 1.5),
    ("slots", 2, 24, 1000, 2.0),
    ("slots", 2, 24, 1000, 0.7),
    ("slots", 2, 8, 30, 0.6),
    ("slots", 4, 21, 5000, 3.0),
    ("slots", 4, 21, 5000, 0.45),
    ("slots", 4, 128, 50000, 0.3),
    ("independent", 1, 20, 2000, 0.6),
    ("independent", 2, 24, 1000, 0.7),
    ("independent", 4, 21, 5000, 0.45),
)
"""Settings of the ``accountant`` section, each at lambda 0.3 and 1 and levels 0.5, 1, 2."""

ACCOUNTANT_LAMBDAS = (0.3, 1.0)
ACCOUNTANT_LEVELS = (0.5, 1.0, 2.0)
ACCOUNTANT_DELTA = 1e-5


def accountant_section() -> list[dict[str, Any]]:
    """Level verdicts of the accountant alone over :data:`ACCOUNTANT_SETTINGS`."""
    rows = []
    for mode, s, d, users, m in ACCOUNTANT_SETTINGS:
        for lam in ACCOUNTANT_LAMBDAS:
            verdicts = []
            for level in ACCOUNTANT_LEVELS:
                bound = accounting.user_delta(level, lam, s, users, m, d, mode=mode,
                                              delta=ACCOUNTANT_DELTA)
                verdicts.append({"level": level, "delta_user": bound,
                                 "holds": bound <= ACCOUNTANT_DELTA})
            rows.append({"mode": mode, "set_size": s, "domain_size": d, "users": users,
                         "m": m, "lambda": lam, "delta": ACCOUNTANT_DELTA,
                         "verdicts": verdicts})
    return rows


# --- sections ----------------------------------------------------------------------------


def _hpke_vector(config: CampaignConfig, round_: int, context: bytes, kind: Kind, value: int,
                 role: str, index: int) -> dict[str, Any]:
    private = private_key_from_bytes(SERVER_PRIVATE_KEY)
    public = public_key_bytes(private)
    key_id = key_id_for(public)
    info = build_info(config.id, round_, key_id, context)
    nonce = _derived(f"nonce/{index}", NONCE_LENGTH)
    plaintext = encode_plaintext(kind, value, nonce)
    ephemeral = _derived(f"ephemeral key/{index}")
    ciphertext = seal_with_ephemeral(public, info, plaintext, ephemeral)
    return {
        "campaign_id": config.id, "round": round_, "key_id": key_id,
        "context_hash": context.hex(), "info": info.hex(),
        "private_key": private_key_bytes(private).hex(), "public_key": public.hex(),
        "ephemeral_private_key": ephemeral.hex(), "ciphertext": b64url_encode(ciphertext),
        "plaintext": plaintext.hex(), "kind": kind.name.lower(), "value": value, "role": role,
    }


def hpke_section(campaigns: Sequence[tuple[CampaignConfig, PublishedParameters]]
                 ) -> list[dict[str, Any]]:
    """Sealed messages of both rounds: level, data, blanket, padding and null messages."""
    vectors = []
    for config, parameters in campaigns:
        d = config.domain_size
        config_hash = bytes.fromhex(config.hash_hex())
        parameters_hash = bytes.fromhex(parameters.hash_hex())
        messages = [
            (1, config_hash, Kind.LEVEL, 0, "level (round 1)"),
            (1, config_hash, Kind.LEVEL, len(config.levels) - 1, "level (round 1)"),
            (2, parameters_hash, Kind.LEVEL, 1, "level (round 2, level stream)"),
            (2, parameters_hash, Kind.ITEM, 3, "data item"),
            (2, parameters_hash, Kind.ITEM, d - 1, "blanket item"),
            (2, parameters_hash, Kind.ITEM, d, "padding item (id d)"),
            (2, parameters_hash, Kind.ITEM, d + config.set_size - 1,
             "padding item (id d + s - 1)"),
            (2, parameters_hash, Kind.NULL, 0, "null slot"),
        ]
        for round_, context, kind, value, role in messages:
            vectors.append(_hpke_vector(config, round_, context, kind, value, role,
                                        len(vectors)))
    return vectors


CANONICAL_CASES: list[tuple[str, Any]] = [
    ("integral floats are written as integers", [1.0, -2.0, 0.0, -0.0, 100.0, 1e20]),
    ("exponent form from 1e21 and below 1e-6",
     [1e21, 1.5e21, 1e-7, 2.5e-7, 1.7976931348623157e308, 5e-324, -1e-100]),
    ("no exponent between 1e-6 and 1e21", [2e-06, 1e-6, 0.000123, 123456789012345680000.0]),
    ("shortest round-trip digits", [0.1, 0.1 + 0.2, 1 / 3, 333333333.3333333, 2 / 3 * 1e-9]),
    ("integers", [0, 1, -1, 9007199254740991, -9007199254740991]),
    ("literals", [True, False, None]),
    ("strings: UTF-8, only the mandatory escapes",
     ["café", "東京", "😀", 'quote " backslash \\ slash /', "\b\f\n\r\t\x00\x1f\x7f",
      "\u2028\u2029", ""]),
    ("member names sorted by UTF-16 code units",
     {"€": 3, "😀": 4, "ﬁ": 5, "é": 2, "a": 1, "B": 0, "aa": 6, "": 7}),
    ("nested objects and arrays",
     {"outer": {"z": [1.0, {"b": 2e-06, "a": [[], {}]}], "a": {"ñ": None}}, "list": []}),
]


def canonical_section(extra: Sequence[tuple[str, Any]] = ()) -> list[dict[str, Any]]:
    """RFC 8785 canonical forms of :data:`CANONICAL_CASES` and of ``extra`` documents."""
    rows = []
    for description, obj in [*CANONICAL_CASES, *extra]:
        canonical = canonical_json(obj)
        rows.append({"description": description, "object": obj,
                     "canonical": canonical.decode("utf-8"),
                     "sha256": hashlib.sha256(canonical).hexdigest()})
    return rows


def client_checks(config: CampaignConfig, parameters: PublishedParameters,
                  key_id: str) -> list[str]:
    """The checks the client's round-2 verification (docs/protocol.md section 6) fails on
    these documents, in its order; empty when it accepts them (for every level)."""
    view = CampaignView(id=config.id, phase="round2", config=config,
                        config_hash=config.hash_hex(), key_id=key_id,
                        hpke_config=key_config(private_key_from_bytes(SERVER_PRIVATE_KEY)),
                        parameters=parameters, parameters_hash=parameters.hash_hex())
    for level_index in range(len(config.levels)):
        try:
            verify_parameters(view, level_index=level_index, key_id=key_id,
                              config_hash=config.hash_hex())
        except VerificationError as exc:
            return list(exc.checks)
    return []


def _parameters_case(description: str, config: CampaignConfig,
                     parameters: PublishedParameters, key_id: str) -> dict[str, Any]:
    verdicts = level_verdicts(parameters)
    rule = honest_users(parameters.users, parameters.dropout_tolerance,
                        parameters.fake_tolerance)
    checks = client_checks(config, parameters, key_id)
    return {
        "description": description,
        "config": config.model_dump(mode="json"), "config_hash": config.hash_hex(),
        "parameters": parameters.model_dump(mode="json"),
        "parameters_hash": parameters.hash_hex(),
        "honest_users_rule": rule,
        "level_verdicts": verdicts,
        "client_checks": checks,
        "client_accepts": not checks,
    }


def build_vectors(published: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Every section; ``published`` maps a campaign id to its already published parameters.

    Without it the optimizer computes them (:func:`optimized_parameters`).
    """
    key_id = key_id_for(public_key_bytes(private_key_from_bytes(SERVER_PRIVATE_KEY)))
    campaigns = []
    for mode in (BlanketMode.SLOTS, BlanketMode.INDEPENDENT):
        config = campaign_config(mode)
        if published is not None and config.id in published:
            parameters = PublishedParameters.model_validate(published[config.id])
        else:
            parameters = optimized_parameters(config, key_id)
        campaigns.append((config, parameters))
    (slots_config, slots_parameters), (independent_config, independent_parameters) = campaigns
    guarded_config = campaign_config(BlanketMode.SLOTS, GUARDED_RATIO)
    if published is not None and guarded_config.id in published:
        guarded_parameters = PublishedParameters.model_validate(published[guarded_config.id])
    else:
        guarded_parameters = optimized_parameters(guarded_config, key_id)
    cases = [
        _parameters_case("slots blanket, optimized for n = 1000 (250, 500, 250 per level)",
                         slots_config, slots_parameters, key_id),
        _parameters_case("independent blanket, optimized for the same round 1",
                         independent_config, independent_parameters, key_id),
        _parameters_case("tampered: the strictest level's lambda raised to 1 (hash "
                         "recomputed); a client must refuse", slots_config,
                         tampered_parameters(slots_parameters), key_id),
        _parameters_case("tampered: honest_users set to n_min, ignoring the fake tolerance "
                         "(hash recomputed); a client must refuse", slots_config,
                         fake_tolerance_ignored(slots_parameters), key_id),
        _parameters_case(f"slots blanket guarding against correlation up to R = "
                         f"{GUARDED_RATIO:g}, optimized for the same round 1",
                         guarded_config, guarded_parameters, key_id),
        _parameters_case("tampered: the guarded campaign's parameters without their "
                         "correlation_ratio (hash recomputed); a client must refuse",
                         guarded_config, correlation_ignored(guarded_parameters), key_id),
        *setting_cases(published, key_id),
    ]
    documents = [("a campaign configuration", slots_config.model_dump(mode="json")),
                 ("published parameters", slots_parameters.model_dump(mode="json"))]
    return {
        "format": FORMAT,
        "specification": "docs/wire.md",
        "hpke": hpke_section(campaigns),
        "canonical_json": canonical_section(documents),
        "accountant": accountant_section(),
        "parameters": cases,
    }


def published_parameters_of(vectors: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The honest published parameters of a vectors file, by campaign id."""
    return {case["parameters"]["campaign_id"]: case["parameters"]
            for case in vectors["parameters"] if case["client_accepts"]}


def dumps(vectors: Mapping[str, Any]) -> str:
    """The file's text: indented, UTF-8 (no ``\\u`` escapes), one trailing newline."""
    return json.dumps(vectors, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


RECOMPUTED_TOLERANCE = 1e-6
"""Relative tolerance of the one recomputed float, ``delta_user`` of a level verdict.

Every other value of the file is fixed (bytes, hashes, published parameters) and must
match exactly.  ``delta_user`` is the accountant's bound recomputed at the published
lambda_k, and its trailing digits depend on the machine: numpy sums in an order chosen
by the processor's vector instructions, and the bound is a difference of sums (seen:
up to 4e-9 relative between two machines with the same numpy and scipy).  ``holds``,
the verdict a client acts on, is decided with a certified margin and compared exactly."""

RECOMPUTED_ABSOLUTE_TOLERANCE = 1e-13
"""Absolute tolerance of ``delta_user``, beside the relative one.

Bounds far below every target delta sit at the floor of the FFT composition's
rounding, a few 1e-15 in absolute terms, which moves with the library versions and
the processor (seen: 1.3614e-13 on one machine and 1.3942e-13 on another, numpy 2.4
and scipy 1.17 against older ones).  1e-13 is a tenth of the smallest delta a
campaign may choose (:data:`segshuffle.core.rules.MIN_DELTA`), and ``holds`` is still
compared exactly."""


def _same(stored: Any, generated: Any, key: str | None = None) -> bool:
    """Equal as JSON values, but ``delta_user`` floats only to :data:`RECOMPUTED_TOLERANCE`
    relative or :data:`RECOMPUTED_ABSOLUTE_TOLERANCE` absolute."""
    if isinstance(stored, dict) and isinstance(generated, dict):
        return stored.keys() == generated.keys() and all(
            _same(stored[k], generated[k], k) for k in stored)
    if isinstance(stored, list) and isinstance(generated, list):
        return len(stored) == len(generated) and all(
            _same(a, b, key) for a, b in zip(stored, generated, strict=True))
    if key == "delta_user" and isinstance(stored, float) and isinstance(generated, float):
        return math.isclose(stored, generated, rel_tol=RECOMPUTED_TOLERANCE,
                            abs_tol=RECOMPUTED_ABSOLUTE_TOLERANCE)
    return type(stored) is type(generated) and stored == generated


def matches(text: str, vectors: Mapping[str, Any]) -> bool:
    """Whether a vectors file's ``text`` is ``vectors`` as :func:`dumps` writes them:
    byte for byte, or equal as JSON with ``delta_user`` within :data:`RECOMPUTED_TOLERANCE`."""
    if text == dumps(vectors):
        return True
    try:
        stored = json.loads(text)
    except ValueError:
        return False
    return _same(stored, json.loads(dumps(vectors)))


def summary(vectors: Mapping[str, Any]) -> str:
    """What a vectors file holds, in one line (what ``--check`` checked)."""
    verdicts = sum(len(row["verdicts"]) for row in vectors["accountant"])
    level_verdicts_ = sum(len(case["level_verdicts"]) for case in vectors["parameters"])
    refused = sum(not case["client_accepts"] for case in vectors["parameters"])
    return (f"{len(vectors['hpke'])} HPKE seals, {len(vectors['canonical_json'])} canonical "
            f"JSON forms, {len(vectors['accountant'])} accountant settings "
            f"({verdicts} level verdicts), {len(vectors['parameters'])} parameter documents "
            f"({level_verdicts_} level verdicts, {refused} to refuse)")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m segshuffle.client.vectors [--out PATH | --check PATH] [--reoptimize]``."""
    parser = argparse.ArgumentParser(prog="python -m segshuffle.client.vectors",
                                     description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--out", type=Path, help="write the vectors to this file")
    target.add_argument("--check", type=Path,
                        help="exit with status 1 unless this file equals a fresh generation")
    parser.add_argument("--reoptimize", action="store_true",
                        help="with --out or --check: recompute the published parameters "
                             "instead of taking them from the existing file")
    args = parser.parse_args(argv)
    existing = args.check or args.out
    published = None
    if existing is not None and existing.exists() and not args.reoptimize:
        published = published_parameters_of(json.loads(existing.read_text("utf-8")))
    generated = build_vectors(published)
    text = dumps(generated)
    if args.check is not None:
        if not matches(args.check.read_text("utf-8"), generated):
            print(f"{args.check} differs from the generated vectors", file=sys.stderr)
            return 1
        print(f"{args.check}: {summary(generated)}: each equals a fresh generation")
        return 0
    if args.out is not None:
        args.out.write_text(text, "utf-8")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
