"""A ciphertext already stored in a round is refused: another token
resending a ciphertext it saw would raise the round's participant count, and with it the
round-2 threshold, while the server drops the copy as a replay."""

# ruff: noqa: F811  (the imported ``postgres_url`` fixture is a parameter of each test)

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from segshuffle.services.shuffler.backends import open_storage
from segshuffle.services.shuffler.enrollment import token_hash
from segshuffle.services.shuffler.storage_api import (
    AlreadySubmittedError,
    ReplayedCiphertextError,
)
from segshuffle.services.shuffler.vault import RoundKey, seal_submission

from .postgres_support import postgres_url  # noqa: F401  (the fixture)


def _check_replays_are_refused(database: str) -> None:
    storage = open_storage(database)
    key = RoundKey(secrets.token_bytes(32))
    try:
        victim_level, victim_data = secrets.token_bytes(80), secrets.token_bytes(80)
        storage.submit("c", 2, token_hash("victim"), seal_submission(
            key, "c", 2, {"levels": [victim_level], "data": [victim_data]}))
        # the victim's level message resent by another token: refused, nothing stored
        with pytest.raises(ReplayedCiphertextError, match="already submitted in round 2"):
            storage.submit("c", 2, token_hash("copycat"), seal_submission(
                key, "c", 2, {"levels": [victim_level], "data": [secrets.token_bytes(80)]}))
        # one data message of the victim among fresh ones: refused too
        with pytest.raises(ReplayedCiphertextError):
            storage.submit("c", 2, token_hash("copycat"), seal_submission(
                key, "c", 2, {"levels": [secrets.token_bytes(80)],
                              "data": [secrets.token_bytes(80), victim_data]}))
        # the same ciphertext twice in one submission
        twice = secrets.token_bytes(80)
        with pytest.raises(ReplayedCiphertextError):
            storage.submit("c", 2, token_hash("doubler"), seal_submission(
                key, "c", 2, {"levels": [secrets.token_bytes(80)], "data": [twice, twice]}))
        assert storage.participants("c", 2) == 1
        assert storage.pending_count("c", 2, "levels") == 1
        assert storage.pending_count("c", 2, "data") == 1
        # the refused tokens have not submitted: a fresh submission of theirs is taken
        assert storage.submit("c", 2, token_hash("copycat"), seal_submission(
            key, "c", 2, {"levels": [secrets.token_bytes(80)],
                          "data": [secrets.token_bytes(80)]})) == 2
        # a retried submission of the victim is still "already submitted", not a replay
        with pytest.raises(AlreadySubmittedError):
            storage.submit("c", 2, token_hash("victim"), seal_submission(
                key, "c", 2, {"levels": [victim_level], "data": [victim_data]}))
        # another round, or another round key, is another table of row keys
        other = RoundKey(secrets.token_bytes(32))
        storage.submit("c", 1, token_hash("victim"), seal_submission(
            other, "c", 1, {"levels": [victim_level]}))
    finally:
        storage.close()


def test_sqlite_refuses_replayed_ciphertexts(tmp_path: Path) -> None:
    _check_replays_are_refused(str(tmp_path / "shuffler.sqlite3"))


def test_postgres_refuses_replayed_ciphertexts(postgres_url: str) -> None:
    _check_replays_are_refused(postgres_url)


def test_row_keys_are_keyed() -> None:
    """Without the round key a row key says nothing about its ciphertext."""
    ciphertext = secrets.token_bytes(80)
    one, two = RoundKey(secrets.token_bytes(32)), RoundKey(secrets.token_bytes(32))
    assert one.row_keys([ciphertext]) == one.row_keys([ciphertext])
    assert one.row_keys([ciphertext]) != two.row_keys([ciphertext])
    assert len(one.row_keys([ciphertext])[0]) == 16
