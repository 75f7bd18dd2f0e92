"""Each service opens only its own database: an empty, foreign or
other service's database is refused before anything is written to it, on SQLite and on
PostgreSQL; a new one is created only where nothing exists yet."""

# ruff: noqa: F811  (the imported ``postgres_url`` fixture is a parameter of each test)

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from segshuffle.services import identity
from segshuffle.services.identity import DatabaseIdentityError
from segshuffle.services.server.backends import open_repository
from segshuffle.services.shuffler.backends import open_storage

from .postgres_support import postgres_url  # noqa: F401  (the fixture)
from .test_server_support import run_serve_server

OPENERS: dict[str, Callable[[str], Any]] = {"server": open_repository,
                                            "shuffler": open_storage}
OTHER = {"server": "shuffler", "shuffler": "server"}


def _fingerprint(directory: Path) -> dict[str, str]:
    """Every file in ``directory`` and its content's hash: 'nothing written' is checkable."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_a_zero_byte_file_is_refused_untouched(tmp_path: Path, service: str) -> None:
    path = tmp_path / "db.sqlite3"
    path.write_bytes(b"")
    before = _fingerprint(tmp_path)
    with pytest.raises(DatabaseIdentityError, match=r"is an empty file \(0 bytes"):
        OPENERS[service](str(path))
    assert _fingerprint(tmp_path) == before


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path: Path, service: str) -> None:
    path = tmp_path / "f.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    before = _fingerprint(tmp_path)
    with pytest.raises(DatabaseIdentityError, match=rf"not a {service} database \(table t\)"):
        OPENERS[service](str(path))
    assert _fingerprint(tmp_path) == before


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_the_other_services_file_is_refused_and_survives(tmp_path: Path, service: str) -> None:
    other = OTHER[service]
    path = tmp_path / "other.sqlite3"
    OPENERS[other](str(path)).close()
    before = _fingerprint(tmp_path)
    with pytest.raises(DatabaseIdentityError, match=rf"is the {other}'s database"):
        OPENERS[service](str(path))
    assert _fingerprint(tmp_path) == before
    OPENERS[other](str(path)).close()  # its owner still opens it


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_an_untagged_database_is_adopted_by_its_owner_only(tmp_path: Path,
                                                           service: str) -> None:
    """A database from before identities: recognised by its first schema's tables."""
    other = OTHER[service]
    path = tmp_path / "old.sqlite3"
    OPENERS[service](str(path)).close()
    with sqlite3.connect(path) as db:  # as it was before tags
        db.execute("PRAGMA application_id=0")
        db.execute(f"DROP TABLE {identity.IDENTITY_TABLE}")
    db.close()
    with pytest.raises(DatabaseIdentityError, match=rf"the {service}'s database \(from before"):
        OPENERS[other](str(path))
    OPENERS[service](str(path)).close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] == \
            identity.application_id(service)
        assert db.execute(f"SELECT service FROM {identity.IDENTITY_TABLE}").fetchall() == \
            [(service,)]
    db.close()


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_a_new_database_is_created_only_where_nothing_was(tmp_path: Path,
                                                          service: str) -> None:
    path = tmp_path / "sub" / "new.sqlite3"
    OPENERS[service](str(path)).close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] == \
            identity.application_id(service)
    db.close()
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".new")] == []
    OPENERS[service](str(path)).close()  # and it is opened again as its own


def test_the_two_services_have_distinct_application_ids() -> None:
    ids = {service: identity.application_id(service) for service in OPENERS}
    assert len(set(ids.values())) == 2 and all(0 < v < 2**31 for v in ids.values())


# -- PostgreSQL --------------------------------------------------------------------------
def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as db:
        return {row[0] for row in db.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema()")}


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_postgres_refuses_the_other_services_database(postgres_url: str,
                                                     service: str) -> None:
    other = OTHER[service]
    OPENERS[other](postgres_url).close()
    before = _tables(postgres_url)
    with pytest.raises(DatabaseIdentityError, match=rf"is the {other}'s database"):
        OPENERS[service](postgres_url)
    assert _tables(postgres_url) == before


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_postgres_refuses_a_foreign_database(postgres_url: str, service: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE t (x integer)")
    with pytest.raises(DatabaseIdentityError, match=rf"not a {service} database \(table t\)"):
        OPENERS[service](postgres_url)
    assert _tables(postgres_url) == {"t"}


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_postgres_tags_an_empty_database(postgres_url: str, service: str) -> None:
    OPENERS[service](postgres_url).close()
    with psycopg.connect(postgres_url) as db:
        assert db.execute(f"SELECT service FROM {identity.IDENTITY_TABLE}").fetchall() == \
            [(service,)]
    OPENERS[service](postgres_url).close()


@pytest.mark.slow  # a subprocess importing the service stack
def test_serve_refuses_an_empty_database_in_one_line_with_status_2(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"")
    done = run_serve_server(tmp_path, "--database", str(path), "--port", "0")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "empty file" in lines[0]
    assert path.read_bytes() == b""
