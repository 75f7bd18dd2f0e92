"""Refusing a SQLite file changes nothing, whatever lies beside it.

A file left by a process that did not close it (a crash, a copy of a running service's
folder) has a ``-wal`` (and usually a ``-shm``) beside it, or a ``-journal`` if it is in
rollback mode.  Opening it as usual would fold the ``-wal`` into the file and delete it,
or roll the ``-journal`` back.  A file that is not the service's is refused with every
file byte for byte as it was; the service's own still opens and keeps what its ``-wal``
holds.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from segshuffle.services.database import UnusableDatabaseError
from segshuffle.services.identity import DatabaseIdentityError
from segshuffle.services.server.backends import open_repository
from segshuffle.services.shuffler.backends import open_storage

OPENERS: dict[str, Callable[[str], Any]] = {"server": open_repository,
                                            "shuffler": open_storage}
OTHER = {"server": "shuffler", "shuffler": "server"}
TOKEN = bytes(range(32))


def _fingerprint(directory: Path) -> dict[str, str]:
    """Every file in ``directory`` and its content's hash."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir())}


def _copy_files(live: Path, image: Path) -> Path:
    """The files of ``live``'s folder as they are now (a crash image) in ``image``'s."""
    image.parent.mkdir(parents=True, exist_ok=True)
    for file in live.parent.iterdir():
        if file.name.startswith(live.name):
            shutil.copyfile(file, image.parent / file.name.replace(live.name, image.name))
    return image


def _foreign_with_wal(tmp_path: Path, *, schema_in_file: bool) -> Path:
    """Another application's WAL database left open: its last transactions (with
    ``schema_in_file=False``, its whole schema) only in its ``-wal``."""
    live = tmp_path / "live" / "app.db"
    live.parent.mkdir()
    db = sqlite3.connect(live, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    if schema_in_file:
        db.execute("CREATE TABLE t (x)")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE IF NOT EXISTS t (x)")
    db.execute("INSERT INTO t VALUES (randomblob(3000))")
    try:
        return _copy_files(live, tmp_path / "image" / "app.db")
    finally:
        db.close()


def _store_with_wal(tmp_path: Path, service: str) -> Path:
    """``service``'s database, with a write, as a crash left it (its ``-wal`` not folded
    into the file)."""
    live = tmp_path / "live" / f"{service}.sqlite3"
    store = OPENERS[service](str(live))
    try:
        if service == "server":
            store.create_campaign("c1", {"id": "c1"}, "hash", "key", b"public key")
        else:
            store.add_token("c1", TOKEN)
        return _copy_files(live, tmp_path / "image" / f"{service}.sqlite3")
    finally:
        store.close()


def _assert_wal_beside(path: Path, *, shm: bool) -> None:
    assert Path(f"{path}-wal").stat().st_size > 32
    assert Path(f"{path}-shm").exists() == shm


@pytest.mark.parametrize("shm", ["as-left", "missing", "garbage"])
@pytest.mark.parametrize("service", sorted(OPENERS))
def test_a_foreign_file_with_a_wal_is_refused_byte_for_byte(tmp_path: Path, service: str,
                                                            shm: str) -> None:
    path = _foreign_with_wal(tmp_path, schema_in_file=True)
    if shm == "missing":
        Path(f"{path}-shm").unlink()
    elif shm == "garbage":
        Path(f"{path}-shm").write_bytes(b"\xaa" * 32768)
    _assert_wal_beside(path, shm=shm != "missing")
    before = _fingerprint(path.parent)
    with pytest.raises(DatabaseIdentityError, match=rf"not a {service} database \(tables? t\)"):
        OPENERS[service](str(path))
    assert _fingerprint(path.parent) == before


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_a_foreign_schema_only_in_the_wal_is_named_and_left_alone(tmp_path: Path,
                                                                 service: str) -> None:
    """The file alone holds no table: what it is is read from its ``-wal`` too (not
    "empty"), still without writing."""
    path = _foreign_with_wal(tmp_path, schema_in_file=False)
    before = _fingerprint(path.parent)
    with pytest.raises(DatabaseIdentityError, match=rf"not a {service} database \(tables? t\)"):
        OPENERS[service](str(path))
    assert _fingerprint(path.parent) == before


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_a_foreign_schema_only_in_a_wal_without_shm_is_refused_untouched(
        tmp_path: Path, service: str) -> None:
    """Without a ``-shm`` the ``-wal`` cannot be read without making one: the file is
    refused by what it holds itself, and no ``-shm`` appears."""
    path = _foreign_with_wal(tmp_path, schema_in_file=False)
    Path(f"{path}-shm").unlink()
    before = _fingerprint(path.parent)
    with pytest.raises(DatabaseIdentityError, match="refusing to start without touching it"):
        OPENERS[service](str(path))
    assert _fingerprint(path.parent) == before


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_the_other_services_file_with_a_wal_is_refused_byte_for_byte(tmp_path: Path,
                                                                    service: str) -> None:
    other = OTHER[service]
    path = _store_with_wal(tmp_path, other)
    _assert_wal_beside(path, shm=True)
    before = _fingerprint(path.parent)
    with pytest.raises(DatabaseIdentityError, match=rf"is the {other}'s database"):
        OPENERS[service](str(path))
    assert _fingerprint(path.parent) == before
    OPENERS[other](str(path)).close()  # its owner still opens it


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_a_foreign_file_with_a_hot_journal_is_refused_byte_for_byte(tmp_path: Path,
                                                                   service: str) -> None:
    """A rollback-mode file copied in the middle of a transaction: its ``-journal`` is
    neither rolled back nor deleted."""
    live = tmp_path / "live" / "app.db"
    live.parent.mkdir()
    db = sqlite3.connect(live, isolation_level=None)
    db.execute("CREATE TABLE t (x)")
    db.execute("PRAGMA cache_size=1")  # the transaction's pages spill into the file
    db.execute("BEGIN")
    db.execute("INSERT INTO t SELECT randomblob(3000) FROM "
               "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
               "WHERE i < 100) SELECT i FROM n)")
    try:
        path = _copy_files(live, tmp_path / "image" / "app.db")
    finally:
        db.execute("ROLLBACK")
        db.close()
    assert Path(f"{path}-journal").stat().st_size > 0
    before = _fingerprint(path.parent)
    with pytest.raises(UnusableDatabaseError, match="refusing to start"):
        OPENERS[service](str(path))
    assert _fingerprint(path.parent) == before


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_the_services_own_file_with_a_wal_opens_and_keeps_its_data(tmp_path: Path,
                                                                  service: str) -> None:
    path = _store_with_wal(tmp_path, service)
    _assert_wal_beside(path, shm=True)
    store = OPENERS[service](str(path))
    try:
        if service == "server":
            assert store.campaign("c1") is not None
        else:
            assert store.token_campaign(TOKEN) == "c1"
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("service", sorted(OPENERS))
def test_an_unreadable_wal_beside_a_foreign_file_leaves_its_refusal(tmp_path: Path,
                                                                   service: str) -> None:
    path = _foreign_with_wal(tmp_path, schema_in_file=True)
    Path(f"{path}-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\xff" * 4096)
    before = _fingerprint(path.parent)
    with pytest.raises(DatabaseIdentityError, match=rf"not a {service} database \(tables? t\)"):
        OPENERS[service](str(path))
    assert _fingerprint(path.parent) == before
