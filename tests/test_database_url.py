"""The ``database`` setting as a URL: SQLite paths and URLs, PostgreSQL URLs, refusals."""

from __future__ import annotations

import pytest

from segshuffle.services.database import parse_database, redact_url
from segshuffle.services.server.settings import Settings as ServerSettings
from segshuffle.services.shuffler.settings import Settings as ShufflerSettings

TOKENS = {"admin_token": "a" * 20, "shuffler_token": "s" * 20}


@pytest.mark.parametrize(("value", "kind", "location"), [
    ("server.sqlite3", "sqlite", "server.sqlite3"),
    ("/var/lib/x/server.sqlite3", "sqlite", "/var/lib/x/server.sqlite3"),
    ("sqlite:///var/lib/x.sqlite3", "sqlite", "/var/lib/x.sqlite3"),
    ("sqlite:///./x.sqlite3", "sqlite", "./x.sqlite3"),
    ("postgresql://app@db:5432/server", "postgresql", "postgresql://app@db:5432/server"),
    ("postgres://db/server?sslmode=require", "postgresql", "postgres://db/server?sslmode=require"),
])
def test_database_settings_parse(value: str, kind: str, location: str) -> None:
    target = parse_database(value)
    assert (target.kind, target.location) == (kind, location)


@pytest.mark.parametrize(("value", "message"), [
    ("", "must not be empty"), ("mysql://db/x", "unknown database scheme 'mysql'"),
    ("sqlite://relative", "sqlite:///path"),
])
def test_bad_database_settings_are_refused(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_database(value)


def test_passwords_never_show() -> None:
    assert redact_url("postgresql://app:hunter2@db/x") == "postgresql://app:***@db/x"
    assert parse_database("postgresql://app:hunter2@db/x").redacted == \
        "postgresql://app:***@db/x"
    assert redact_url("postgresql://db/x") == "postgresql://db/x"


def test_postgresql_needs_a_shared_key_directory(tmp_path) -> None:
    url = "postgresql://app@db/server"
    with pytest.raises(ValueError, match="KEY_DIR is required with a PostgreSQL"):
        ServerSettings(database=url, **TOKENS)
    assert ServerSettings(database=url, key_dir=str(tmp_path), **TOKENS).key_directory == \
        str(tmp_path)
    assert ServerSettings(database=str(tmp_path / "s.db"), **TOKENS).key_directory == \
        str(tmp_path / "s.db") + ".keys"
    shuffler = {"server_token": "t", "operator_token": "o", "enrollment": "open"}
    with pytest.raises(ValueError, match="KEY_DIRECTORY is required"):
        ShufflerSettings(database="postgresql://app@db/shuffler", **shuffler)
    assert ShufflerSettings(database="sqlite:///data/s.db", **shuffler).round_key_directory \
        == "/data/s.db.keys"
