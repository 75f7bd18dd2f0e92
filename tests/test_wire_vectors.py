"""docs/test-vectors.json, checked independently of the package's own encoders.

The HPKE vectors are opened with nothing but ``cryptography`` and an ``info``
built here from the layout in docs/wire.md; canonical forms and hashes are
re-derived with the ``rfc8785`` package (the package's :func:`canonical_json` is
its own implementation).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from segshuffle.client import vectors
from segshuffle.client.errors import VerificationError
from segshuffle.client.verify import verify_parameters
from segshuffle.core import accounting, rules
from segshuffle.crypto import DecryptError, open_, private_key_from_bytes
from segshuffle.wire.models import CampaignConfig, PublishedParameters

from .vector_documents import vector_key_config, vector_view

ROOT = Path(__file__).resolve().parent.parent
VECTORS_PATH = ROOT / "docs" / "test-vectors.json"
VECTORS = json.loads(VECTORS_PATH.read_text("utf-8"))
SUITE = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.AES_128_GCM)
KINDS = {"null": 0, "level": 1, "item": 2}


def documented_info(campaign_id: str, round_: int, key_id: str, context_hash: bytes) -> bytes:
    """docs/wire.md: "segshuffle/v1" 0x00 campaign id 0x00 round 0x00 key id 0x00 hash."""
    return (b"segshuffle/v1" + b"\x00" + campaign_id.encode("ascii") + b"\x00"
            + str(round_).encode("ascii") + b"\x00" + key_id.encode("ascii") + b"\x00"
            + context_hash)


def unpadded_b64url(text: str) -> bytes:
    assert "=" not in text
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def jcs_sha256(obj: object) -> str:
    return hashlib.sha256(rfc8785.dumps(obj)).hexdigest()


def campaign_hashes() -> dict[str, tuple[str, str]]:
    """(config hash, parameters hash) of each honest campaign, re-derived with rfc8785."""
    return {case["config"]["id"]: (jcs_sha256(case["config"]), jcs_sha256(case["parameters"]))
            for case in VECTORS["parameters"] if case["client_accepts"]}


_BUILD_VECTORS = vectors.build_vectors  # the generator itself, whatever a test patches


@functools.cache
def _fresh_generation() -> str:
    return vectors.dumps(_BUILD_VECTORS(vectors.published_parameters_of(VECTORS)))


def _generated() -> dict:
    """A fresh generation of the vectors from the file's published parameters, made once
    per test process (a copy each time)."""
    return json.loads(_fresh_generation())


@pytest.mark.parametrize("vector", VECTORS["hpke"],
                         ids=[f"{v['campaign_id']}-r{v['round']}-{v['role']}"
                              for v in VECTORS["hpke"]])
def test_hpke_vector_opens_with_cryptography_and_the_documented_info(vector):
    private = X25519PrivateKey.from_private_bytes(bytes.fromhex(vector["private_key"]))
    public = private.public_key().public_bytes(serialization.Encoding.Raw,
                                               serialization.PublicFormat.Raw)
    assert public.hex() == vector["public_key"]
    assert hashlib.sha256(public).digest()[:8].hex() == vector["key_id"]
    context = bytes.fromhex(vector["context_hash"])
    config_hash, parameters_hash = campaign_hashes()[vector["campaign_id"]]
    assert context.hex() == (config_hash if vector["round"] == 1 else parameters_hash)
    info = documented_info(vector["campaign_id"], vector["round"], vector["key_id"], context)
    assert info.hex() == vector["info"]
    ciphertext = unpadded_b64url(vector["ciphertext"])
    assert len(ciphertext) == 80 and len(vector["ciphertext"]) == 107
    plaintext = SUITE.decrypt(ciphertext, private, info)
    assert plaintext.hex() == vector["plaintext"]
    # the 32-byte layout: version, kind, value (u32 big endian), 16-byte nonce, 10 zeros
    assert len(plaintext) == 32
    version, kind, value = struct.unpack(">BBI", plaintext[:6])
    assert (version, kind, value) == (1, KINDS[vector["kind"]], vector["value"])
    assert plaintext[22:] == bytes(10)
    # any other info refuses the message
    with pytest.raises(Exception):  # noqa: B017 - cryptography raises InvalidTag
        SUITE.decrypt(ciphertext, private, info[:-1] + bytes([info[-1] ^ 1]))


def test_hpke_vectors_cover_every_kind_and_role_in_both_rounds():
    seen = {(v["round"], v["kind"], v["role"].split(" (")[0]) for v in VECTORS["hpke"]}
    assert {(1, "level", "level"), (2, "level", "level"), (2, "item", "data item"),
            (2, "item", "blanket item"), (2, "item", "padding item"),
            (2, "null", "null slot")} <= seen
    assert {v["campaign_id"] for v in VECTORS["hpke"]} == {"vectors-slots",
                                                           "vectors-independent"}
    config = CampaignConfig.model_validate(VECTORS["parameters"][0]["config"])
    padding = [v["value"] for v in VECTORS["hpke"] if v["role"].startswith("padding")]
    assert set(padding) == {config.domain_size, config.domain_size + config.set_size - 1}
    assert len({v["ciphertext"] for v in VECTORS["hpke"]}) == len(VECTORS["hpke"])


def test_hpke_vectors_open_with_the_package_too():
    for vector in VECTORS["hpke"]:
        key = private_key_from_bytes(bytes.fromhex(vector["private_key"]))
        info = bytes.fromhex(vector["info"])
        ciphertext = unpadded_b64url(vector["ciphertext"])
        assert open_(key, info, ciphertext).hex() == vector["plaintext"]
        with pytest.raises(DecryptError):
            open_(key, info.replace(b"/v1", b"/v2"), ciphertext)


@pytest.mark.parametrize("case", VECTORS["canonical_json"],
                         ids=[c["description"] for c in VECTORS["canonical_json"]])
def test_canonical_json_vector_matches_rfc8785(case):
    expected = rfc8785.dumps(case["object"])
    assert case["canonical"].encode("utf-8") == expected
    assert case["sha256"] == hashlib.sha256(expected).hexdigest()
    assert vectors.canonical_json(case["object"]) == expected


def test_canonical_json_vectors_cover_floats_exponents_non_ascii_and_nesting():
    text = "".join(case["canonical"] for case in VECTORS["canonical_json"])
    for fragment in ("[1,-2,0,0,100,", "1e+21", "1e-7", "0.000002", "café", "東京", "😀",
                     '{"list":[],"outer":{"a":{"ñ":null}', '\\t\\u0000\\u001f'):
        assert fragment in text


@pytest.mark.parametrize("case", VECTORS["parameters"],
                         ids=[c["description"].split(",")[0] for c in VECTORS["parameters"]])
def test_parameters_vector_hashes_and_verdicts(case):
    assert case["config_hash"] == jcs_sha256(case["config"])
    assert case["parameters_hash"] == jcs_sha256(case["parameters"])
    config = CampaignConfig.model_validate(case["config"])
    parameters = PublishedParameters.model_validate(case["parameters"])
    assert config.hash_hex() == case["config_hash"] == parameters.config_hash
    assert parameters.hash_hex() == case["parameters_hash"]
    verdicts = case["level_verdicts"]
    assert [row["level"] for row in verdicts] == parameters.levels
    for row, lam in zip(verdicts, parameters.lambdas, strict=True):
        assert row["lambda"] == lam
        holds = accounting.user_level_holds(
            row["level"], lam, parameters.set_size, parameters.delta,
            parameters.honest_users, parameters.m, parameters.privacy_domain_size,
            mode=parameters.blanket_mode)
        assert holds is row["holds"]
        assert (row["delta_user"] <= parameters.delta) is row["holds"]
    rule = rules.honest_users(parameters.users, parameters.dropout_tolerance,
                              parameters.fake_tolerance)
    assert case["honest_users_rule"] == rule
    assert case["client_accepts"] is (not case["client_checks"])
    if case["client_accepts"]:  # the accountant's verdicts and the honest count are part of it
        assert parameters.honest_users == rule and all(row["holds"] for row in verdicts)


def test_the_vectors_campaign_tolerates_fakes_and_one_case_ignores_them():
    """The vectors exercise h = ceil((1 - f) n_min) < n_min and its refusal."""
    honest = [case for case in VECTORS["parameters"] if case["client_accepts"]]
    assert honest and all(case["parameters"]["fake_tolerance"] == 0.1
                          and case["parameters"]["honest_users"] == 810
                          and case["parameters"]["accounting_users"] == 900 for case in honest)
    assert any(case["parameters"]["honest_users"] == case["parameters"]["accounting_users"]
               and not case["client_accepts"] for case in VECTORS["parameters"])


@pytest.mark.parametrize("case", VECTORS["parameters"],
                         ids=[c["description"].split(",")[0] for c in VECTORS["parameters"]])
@pytest.mark.parametrize("accountant", [
    "numpy", pytest.param("portable", marks=pytest.mark.slow)])  # portable: ~40 s in all
def test_the_client_reaches_the_vectors_verdict(case, accountant, monkeypatch):
    """Whichever accountant the client has (segshuffle.client.accountant: the numpy one, or
    the standard-library port of a light install) it reaches every document's verdict."""
    monkeypatch.setenv("SEGSHUFFLE_ACCOUNTANT", accountant)
    view = vector_view(case)
    hpke = vector_key_config()
    for level_index in range(len(case["level_verdicts"])):
        if case["client_accepts"]:
            verify_parameters(view, level_index=level_index, key_id=hpke.key_id,
                              config_hash=case["config_hash"])
            continue
        with pytest.raises(VerificationError) as refusal:
            verify_parameters(view, level_index=level_index, key_id=hpke.key_id,
                              config_hash=case["config_hash"])
        assert list(refusal.value.checks) == case["client_checks"]


def test_the_parameter_documents_cover_what_a_port_must_decide():
    cases = VECTORS["parameters"]
    assert len(cases) >= 30
    honest = [case for case in cases if case["client_accepts"]]
    published = [PublishedParameters.model_validate(c["parameters"]) for c in honest]
    modes = {(p.blanket_mode, p.set_size, float(p.m).is_integer()) for p in published}
    for mode in ("slots", "independent"):
        assert {s for m, s, _ in modes if m == mode} == {1, 2, 4}
        assert {whole for m, _, whole in modes if m == mode} == {True, False}
    refused = {check for case in cases for check in case["client_checks"]}
    assert {"lambdas", "honest_users", "epsilons", "delta", "messages_per_user",
            "levels", "users"} <= refused
    # every tampering of vectors.TAMPERINGS is applied at least twice
    for name, _ in vectors.TAMPERINGS:
        assert sum(name in case["description"] for case in cases) >= 2, name


@pytest.mark.slow
def test_the_file_is_what_the_generator_writes():
    assert vectors.matches(VECTORS_PATH.read_text("utf-8"), _generated())


def test_only_the_recomputed_bound_may_differ_and_only_in_its_last_digits():
    """The check holds on any machine (delta_user's trailing digits moved by up to 4e-9
    relative between two machines with the same libraries) but nothing else moves."""
    generated = _generated()
    text = vectors.dumps(generated)

    def with_first(key: str, change) -> str:
        document = json.loads(text)
        stack = [document]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if key in node and isinstance(node[key], float):
                    node[key] = change(node[key])
                    return vectors.dumps(document)
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        raise AssertionError(f"no float {key!r} in the vectors")

    assert vectors.matches(with_first("delta_user", lambda v: v * (1 + 1e-8)), generated)
    assert not vectors.matches(with_first("delta_user", lambda v: v * (1 + 1e-4)), generated)
    # At the FFT's rounding floor (bounds of about 1e-13) libraries and processors move
    # the bound by a few 1e-15 (seen: 1.3614e-13 against 1.3942e-13): absolute 1e-13.
    tiny = with_first("delta_user", lambda v: 1.3614e-13)
    assert vectors.matches(tiny, json.loads(vectors.dumps(json.loads(tiny))))
    assert _matches_with_tiny(tiny, 1.3942e-13)
    assert not _matches_with_tiny(tiny, 2.5e-13)
    assert not vectors.matches(with_first("lambda", lambda v: v * (1 + 1e-12)), generated)
    assert not vectors.matches(text.replace('"holds": true', '"holds": false', 1), generated)
    assert not vectors.matches("not json", generated)


def _matches_with_tiny(text: str, recomputed: float) -> bool:
    """Whether ``text`` (whose first delta_user is 1.3614e-13) matches a generation
    that recomputed that bound as ``recomputed``."""
    generated = json.loads(text.replace("1.3614e-13", repr(recomputed), 1))
    return vectors.matches(text, generated)


@pytest.mark.slow
def test_the_generator_checks_a_file(tmp_path, capsys, monkeypatch):
    # The generation itself is the one of _generated (about 10 s, once per worker).
    monkeypatch.setattr(vectors, "build_vectors", lambda published: _generated())
    copy = tmp_path / "vectors.json"
    copy.write_text(VECTORS_PATH.read_text("utf-8"), "utf-8")
    assert vectors.main(["--check", str(copy)]) == 0
    said = capsys.readouterr().out  # what it checked, in one line
    assert said.count("\n") == 1 and "72 level verdicts" in said and "16 HPKE seals" in said
    copy.write_text(VECTORS_PATH.read_text("utf-8").replace('"round": 2', '"round": 1', 1))
    assert vectors.main(["--check", str(copy)]) == 1


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)  # type: ignore[arg-type]
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.slow
def test_the_published_parameters_are_what_the_server_publishes():
    """The server's round-1 completion reproduces the vectors' parameters (up to rounding)."""
    from segshuffle.services.server.aggregation import publish_parameters

    for case in VECTORS["parameters"][:2]:
        config = CampaignConfig.model_validate(case["config"])
        expected = case["parameters"]
        published, _ = publish_parameters(config, case["config_hash"], expected["key_id"],
                                          vectors.LEVEL_COUNTS)
        actual = published.model_dump(mode="json")
        assert actual.keys() == expected.keys()
        for name, value in expected.items():
            assert _close(actual[name], value), name


def test_the_deterministic_seal_is_plain_hpke():
    key = private_key_from_bytes(vectors.SERVER_PRIVATE_KEY)
    public = bytes.fromhex(VECTORS["hpke"][0]["public_key"])
    info = b"segshuffle/v1\x00any"
    first = vectors.seal_with_ephemeral(public, info, bytes(32), bytes(range(32)))
    assert first == vectors.seal_with_ephemeral(public, info, bytes(32), bytes(range(32)))
    assert first != vectors.seal_with_ephemeral(public, info, bytes(32), bytes(range(1, 33)))
    assert open_(key, info, first) == bytes(32)
    assert SUITE.decrypt(first, key, info) == bytes(32)


def test_the_client_layer_needs_no_server_stack():
    modules = ["segshuffle.wire.models", "segshuffle.wire.plaintext", "segshuffle.client.vectors",
               "segshuffle.crypto", "segshuffle.client", "segshuffle.client.verify"]
    script = ("import sys\n" + "".join(f"import {m}\n" for m in modules)
              + "print(sorted({m.split('.')[0] for m in sys.modules}"
              " & {'fastapi', 'uvicorn', 'starlette'}))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_the_accountant_section_covers_what_a_port_must_reproduce():
    rows = VECTORS["accountant"]
    verdicts = [(row, v) for row in rows for v in row["verdicts"]]
    assert len(verdicts) >= 30
    assert {row["mode"] for row in rows} == {"slots", "independent"}
    assert {row["set_size"] for row in rows} >= {1, 2, 4}
    slot_rates = {row["m"] for row in rows if row["mode"] == "slots"}
    assert any(float(m).is_integer() for m in slot_rates)
    assert any(not float(m).is_integer() for m in slot_rates)
    assert {v["holds"] for _, v in verdicts} == {True, False}
    for row, verdict in verdicts:
        assert verdict["holds"] == (verdict["delta_user"] <= row["delta"])


@pytest.mark.parametrize("index", range(0, 24, 5))
def test_the_accountant_section_is_what_the_accountant_computes(index):
    row = VECTORS["accountant"][index]
    for verdict in row["verdicts"]:
        bound = accounting.user_delta(verdict["level"], row["lambda"], row["set_size"],
                                      row["users"], row["m"], row["domain_size"],
                                      mode=row["mode"], delta=row["delta"])
        assert bound == pytest.approx(verdict["delta_user"], rel=vectors.RECOMPUTED_TOLERANCE)
