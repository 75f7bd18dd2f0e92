"""Disk forensics on a live shuffler: its files never hold what the server will receive.

Copies of the shuffler's database files (db, WAL, shared memory) taken in the middle of
round 2 and after its release are searched for every ciphertext the users submitted, raw
and in base64url.  Mid-round the stored rows are sealed under the round key, sit in
random-key order and carry nothing that groups them by user; after the release the
messages, the participations and the round key are gone.  The SQLite file layout is
read directly here on purpose: this is a test of what the SQLite backend leaves on disk.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from scipy import stats

from segshuffle.client import Client
from segshuffle.services.shuffler.vault import RoundKey
from segshuffle.testing.localstack import LocalStack
from segshuffle.wire.models import b64url_decode

from .sqlite_backend import rows as sqlite_rows

pytestmark = pytest.mark.slow  # both services as real processes

CID = "forensics"
USERS = 40


def _copy_files(stack: LocalStack, destination: Path) -> Path:
    destination.mkdir()
    database = stack.database_path("shuffler")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{database}{suffix}")
        if source.exists():
            shutil.copyfile(source, destination / f"copy.sqlite3{suffix}")
    return destination / "copy.sqlite3"


def _raw(copy: Path) -> bytes:
    return b"".join(Path(f"{copy}{s}").read_bytes() for s in ("", "-wal", "-shm")
                    if Path(f"{copy}{s}").exists())


def _leaks(raw: bytes, sent: list[str]) -> list[str]:
    """The submitted ciphertexts (base64url text) found in ``raw``, raw or as text."""
    return [text for text in sent if b64url_decode(text) in raw or text.encode() in raw]


@pytest.fixture(scope="module")
def submissions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, list]]:
    recorded: list[dict[str, object]] = []

    def record(request: httpx.Request) -> None:
        if request.method == "POST" and request.url.path.endswith("/rounds/2/submissions"):
            recorded.append(json.loads(request.content))

    with LocalStack(tmp_path_factory.mktemp("forensics"), min_users=2) as stack:
        stack.create_campaign({"id": CID, "domain_size": 16, "set_size": 3,
                               "levels": [1.0, 2.0], "min_users": 10})
        users = [Client(stack.shuffler_url, CID, server_key=stack.server_key,
                        http=httpx.Client(timeout=30, event_hooks={"request": [record]}),
                        rng=np.random.default_rng(i)) for i in range(USERS)]
        invitations = stack.invitations(CID, USERS)
        try:
            for index, user in enumerate(users):
                user.campaign()
                user.enroll(invitations[index])
                user.submit_level(index % 2)
            stack.release(CID, 1)
            for index, user in enumerate(users):
                user.submit_data([index % 16, (index + 1) % 16, (index + 5) % 16])
            yield stack, recorded
        finally:
            for user in users:
                user.close()
                user._http.close()


def test_copies_mid_round_and_after_release(submissions: tuple[LocalStack, list],
                                            tmp_path: Path) -> None:
    """One test, in this order: the release the second part needs ends the round the
    first part inspects (a module fixture shared by two tests would depend on their order)."""
    _mid_round(submissions, tmp_path)
    _after_release(submissions, tmp_path)


def _mid_round(submissions: tuple[LocalStack, list], tmp_path: Path) -> None:
    stack, recorded = submissions
    sent = [[body["level"], *body["data"]] for body in recorded]  # per user, in arrival order
    flat = [text for user in sent for text in user]
    assert len(sent) == USERS and len(flat) > 3 * USERS
    copy = _copy_files(stack, tmp_path / "mid")
    assert _leaks(_raw(copy), flat) == []

    # What is stored, read back with the round key (an attacker would also need it), from
    # a consistent snapshot: file copies taken one after another may straddle a checkpoint.
    snapshot = tmp_path / "snapshot.sqlite3"
    with sqlite3.connect(stack.database_path("shuffler")) as live, \
            sqlite3.connect(snapshot) as target:
        live.backup(target)
    stored = sqlite_rows(snapshot, "SELECT stream, row_key, ciphertext FROM pending WHERE "
                                    "campaign_id = ? AND round = 2 ORDER BY row_key", CID)
    columns = {row[1] for row in sqlite_rows(snapshot, "PRAGMA table_info(pending)")}
    assert columns == {"campaign_id", "round", "stream", "row_key", "ciphertext"}
    assert len(stored) == len(flat)
    key_files = list((Path(f"{stack.database_path('shuffler')}.keys")).glob("round-*.key"))
    keys = [RoundKey(path.read_bytes()) for path in key_files]
    owner = {b64url_decode(text): (user, arrival)
             for user, texts in enumerate(sent) for arrival, text in enumerate(texts)}

    def unseal(stream: str, row_key: bytes, stored: bytes) -> bytes:
        for key in keys:
            try:
                return key.open(CID, 2, stream, row_key, stored)
            except Exception:  # another round's key
                continue
        raise AssertionError("a stored row opens under no round key")

    users_in_storage_order = [owner[unseal(*row)][0] for row in stored]
    # No arrival order: the users' arrival ranks are uncorrelated with the storage order.
    rho = stats.spearmanr(np.arange(len(stored)), users_in_storage_order).statistic
    assert abs(rho) < 0.2, rho
    # No grouping: one user's messages are neighbours no more often than by chance.
    adjacent = sum(a == b for a, b in itertools.pairwise(users_in_storage_order))
    per_user = len(stored) / USERS
    expected = per_user - 1  # E[adjacent pairs of one user] in a uniform arrangement
    assert adjacent <= expected + 4 * np.sqrt(expected) + 2, (adjacent, expected)


def _after_release(submissions: tuple[LocalStack, list], tmp_path: Path) -> None:
    stack, recorded = submissions
    flat = [text for body in recorded for text in [body["level"], *body["data"]]]
    stack.release(CID, 2)
    assert stack.results(CID).round2_messages == len(flat) - USERS
    copy = _copy_files(stack, tmp_path / "after")
    assert _leaks(_raw(copy), flat) == []
    for table in ("pending", "participations", "tokens"):
        assert sqlite_rows(copy, f"SELECT COUNT(*) FROM {table}") == [(0,)], table
    assert list(Path(f"{stack.database_path('shuffler')}.keys").glob("round-*.key")) == []
