"""Round keys: sealing at rest, destruction, the start-up sweep, and resumable release order."""

from __future__ import annotations

import asyncio
import secrets
import stat
from pathlib import Path

import httpx
import pytest
from cryptography.exceptions import InvalidTag

from segshuffle.services import errors
from segshuffle.services.shuffler.enrollment import token_hash
from segshuffle.services.shuffler.release import Releaser
from segshuffle.services.shuffler.storage import Storage
from segshuffle.services.shuffler.upstream import ServerLink
from segshuffle.services.shuffler.vault import (
    RoundKey,
    RoundKeyMissingError,
    RoundKeys,
    seal_submission,
)


def test_sealed_rows_open_only_in_their_place(tmp_path: Path) -> None:
    key = RoundKeys(tmp_path).get("c", 1, create=True)
    row = secrets.token_bytes(16)
    ciphertext = secrets.token_bytes(80)
    sealed = key.seal("c", 1, "levels", row, ciphertext)
    assert ciphertext not in sealed and len(sealed) == 12 + 80 + 16
    assert key.open("c", 1, "levels", row, sealed) == ciphertext
    assert key.seal("c", 1, "levels", row, ciphertext) != sealed  # fresh nonce each time
    for place in [("d", 1, "levels", row), ("c", 2, "levels", row), ("c", 1, "data", row),
                  ("c", 1, "levels", secrets.token_bytes(16))]:
        with pytest.raises(InvalidTag):
            key.open(*place, sealed)
    other = RoundKey(secrets.token_bytes(32))
    with pytest.raises(InvalidTag):
        other.open("c", 1, "levels", row, sealed)


def test_a_chunk_opens_at_once_and_only_in_its_places(tmp_path: Path) -> None:
    """``open_many`` (a release chunk, one associated-data prefix) opens exactly what
    ``open`` opens, and refuses a row moved to another key, stream or round."""
    key = RoundKeys(tmp_path).get("c", 2, create=True)
    rows = [secrets.token_bytes(16) for _ in range(5)]
    ciphertexts = [secrets.token_bytes(80) for _ in rows]
    sealed = key.seal_many("c", 2, [("data", r, c) for r, c in zip(rows, ciphertexts,
                                                                    strict=True)])
    assert key.open_many("c", 2, "data", rows, sealed) == ciphertexts
    assert key.open_many("c", 2, "data", [], []) == []
    with pytest.raises(InvalidTag):
        key.open_many("c", 2, "data", rows[::-1], sealed)  # rows swapped between keys
    for place in (("c", 2, "levels"), ("c", 1, "data"), ("d", 2, "data")):
        with pytest.raises(InvalidTag):
            key.open_many(*place, rows, sealed)
    with pytest.raises(ValueError):
        key.open_many("c", 2, "data", rows[:4], sealed)


def test_a_submission_draws_its_randomness_in_one_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nonces of a whole submission come from one call to the OS generator (not one
    per message); row keys are keyed hashes of the ciphertexts (no draw), and both still
    differ from message to message: every stored row opens under its own row key and
    nowhere else."""
    from segshuffle.services.shuffler import vault

    key = RoundKeys(tmp_path).get("c", 2, create=True)
    draws: list[int] = []
    token_bytes = secrets.token_bytes

    def counted(count: int) -> bytes:
        draws.append(count)
        return token_bytes(count)

    monkeypatch.setattr(vault.secrets, "token_bytes", counted)
    streams = {"levels": [b"L" * 40], "data": [bytes([i]) * 50 for i in range(6)]}
    stored = seal_submission(key, "c", 2, streams)
    assert draws == [12 * 7]
    assert [m.row_key for m in stored] == key.row_keys([c for texts in streams.values()
                                                       for c in texts])
    assert [m.stream for m in stored] == ["levels"] + ["data"] * 6
    assert len({m.row_key for m in stored}) == 7
    assert len({m.sealed[:12] for m in stored}) == 7  # the nonces
    plain = [c for texts in streams.values() for c in texts]
    for message, ciphertext in zip(stored, plain, strict=True):
        assert key.open("c", 2, message.stream, message.row_key, message.sealed) == ciphertext
    with pytest.raises(InvalidTag):
        key.open("c", 2, "data", stored[1].row_key, stored[2].sealed)


def test_key_files_are_private_and_destroyed(tmp_path: Path) -> None:
    keys = RoundKeys(tmp_path / "keys")
    key = keys.get("c", 1, create=True)
    (path,) = (tmp_path / "keys").glob("round-*.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    sealed = key.seal("c", 1, "levels", bytes(16), b"x")
    reloaded = RoundKeys(tmp_path / "keys").get("c", 1)  # a restarted process
    assert reloaded.open("c", 1, "levels", bytes(16), sealed) == b"x"
    keys.destroy("c", 1)
    keys.destroy("c", 1)  # idempotent
    assert list((tmp_path / "keys").iterdir()) == []
    with pytest.raises(RoundKeyMissingError):
        keys.get("c", 1)
    with pytest.raises(RoundKeyMissingError):
        RoundKeys(tmp_path / "keys").get("c", 1)


def test_sweep_destroys_only_finished_rounds(tmp_path: Path) -> None:
    keys = RoundKeys(tmp_path)
    for round_number in (1, 2):
        keys.get("live", round_number, create=True)
        keys.get("done", round_number, create=True)
    assert keys.sweep_finished([("done", 1), ("done", 2), ("gone", 1)]) == 2
    assert len(list(tmp_path.glob("round-*.key"))) == 2
    assert RoundKeys(tmp_path).get("live", 2) is not None


def _submitted(tmp_path: Path, users: int = 12) -> tuple[Storage, RoundKeys, list[bytes]]:
    storage = Storage(tmp_path / "s.sqlite3")
    keys = RoundKeys(tmp_path / "keys")
    key = keys.get("c", 1, create=True)
    sent = [secrets.token_bytes(80) for _ in range(users)]
    for i, ciphertext in enumerate(sent):
        storage.submit("c", 1, token_hash(f"u{i}"),
                       seal_submission(key, "c", 1, {"levels": [ciphertext]}))
    return storage, keys, sent


def _link() -> ServerLink:
    return ServerLink("http://server", "t", transport=httpx.MockTransport(
        lambda request: httpx.Response(503)))


def test_a_restarted_releaser_rebuilds_byte_identical_chunks(tmp_path: Path) -> None:
    storage, keys, sent = _submitted(tmp_path)
    first = Releaser(storage, _link(), keys, chunk_size=5)
    record = first.start("c", 1, required=12)
    chunks = [first.chunk(record, "levels", i) for i in range(record.chunk_count("levels"))]
    assert sorted(c for chunk in chunks for c in chunk) == sorted(sent)
    assert [c for chunk in chunks for c in chunk] != sent  # not the arrival order
    again = Releaser(storage, _link(), RoundKeys(tmp_path / "keys"), chunk_size=5)
    assert [again.chunk(record, "levels", i) for i in range(3)] == chunks
    again.finish(record)
    assert list((tmp_path / "keys").glob("round-*.key")) == []


def test_a_round_whose_key_is_gone_fails_clearly(tmp_path: Path) -> None:
    storage, keys, _ = _submitted(tmp_path)
    releaser = Releaser(storage, _link(), keys, chunk_size=5)
    record = releaser.start("c", 1, required=12)
    keys.destroy("c", 1)
    with pytest.raises(errors.UnavailableError, match="key"):
        asyncio.run(releaser.forward(record))
    assert "key" in releaser.last_error[("c", 1)]


def test_row_keys_are_hmac_sha256_under_the_derived_row_key() -> None:
    """The precomputed pad states give HMAC-SHA256 exactly (RFC 2104), so the row keys of
    a round opened by an earlier version still match: a replay is refused across an
    upgrade."""
    import hashlib
    import hmac

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from segshuffle.services.shuffler.vault import RoundKey

    root = bytes(range(32))
    row_key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                   info=b"segshuffle/v1/shuffler/row").derive(root)
    messages = [b"", b"x", bytes(range(256)) * 3, secrets.token_bytes(77)]
    assert RoundKey(root).row_keys(messages) == [
        hmac.new(row_key, m, hashlib.sha256).digest()[:16] for m in messages]
