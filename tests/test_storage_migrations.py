"""Versioned schema migrations of both services' SQLite storage."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from segshuffle.services import sqlite_base
from segshuffle.services.server import storage as server_storage
from segshuffle.services.shuffler import storage as shuffler_storage
from segshuffle.services.sqlite_base import Migration, SchemaVersionError

BACKENDS: dict[str, tuple[Callable[[Path], Any], tuple[Migration, ...]]] = {
    "server": (server_storage.Repository, server_storage.MIGRATIONS),
    "shuffler": (shuffler_storage.Storage, shuffler_storage.MIGRATIONS),
}


def _versions(path: Path) -> list[int]:
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute("SELECT version FROM schema_version ORDER BY version")]


@pytest.mark.parametrize("service", sorted(BACKENDS))
def test_fresh_database_ends_at_latest_version(tmp_path: Path, service: str) -> None:
    factory, migrations = BACKENDS[service]
    path = tmp_path / "db.sqlite3"
    factory(path).close()
    latest = sqlite_base.latest_version(migrations)
    assert latest >= 1
    assert _versions(path) == list(range(1, latest + 1))


@pytest.mark.parametrize("service", sorted(BACKENDS))
def test_reopening_is_idempotent(tmp_path: Path, service: str) -> None:
    factory, _ = BACKENDS[service]
    path = tmp_path / "db.sqlite3"
    factory(path).close()
    first = _versions(path)
    factory(path).close()
    factory(path).close()
    assert _versions(path) == first


@pytest.mark.parametrize("service", sorted(BACKENDS))
def test_database_created_before_versioning_is_adopted(tmp_path: Path, service: str) -> None:
    factory, migrations = BACKENDS[service]
    path = tmp_path / "db.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(migrations[0].script)
    factory(path).close()
    assert _versions(path)[-1] == sqlite_base.latest_version(migrations)


@pytest.mark.parametrize("service", sorted(BACKENDS))
def test_newer_version_is_refused(tmp_path: Path, service: str) -> None:
    factory, migrations = BACKENDS[service]
    path = tmp_path / "db.sqlite3"
    factory(path).close()
    newer = sqlite_base.latest_version(migrations) + 1
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, 0)", (newer,))
    with pytest.raises(SchemaVersionError, match=f"schema version {newer}"):
        factory(path)


def test_migrations_apply_in_order_and_failed_step_rolls_back(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    steps = (Migration(1, "a", "CREATE TABLE a (x INTEGER);"),
             Migration(2, "b", "CREATE TABLE b (x INTEGER);\nINSERT INTO missing VALUES (1);"))
    with pytest.raises(sqlite3.OperationalError):
        sqlite_base.open_database(path, steps, service="test")
    assert _versions(path) == [1]
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "a" in tables and "b" not in tables
    fixed = (steps[0], Migration(2, "b", "CREATE TABLE b (x INTEGER);"))
    sqlite_base.open_database(path, fixed, service="test").close()
    assert _versions(path) == [1, 2]


def test_misnumbered_migrations_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="numbered"):
        sqlite_base.open_database(tmp_path / "db.sqlite3",
                                  (Migration(2, "b", "CREATE TABLE b (x);"),), service="test")
