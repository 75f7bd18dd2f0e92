"""Which database a service keeps its state in: one setting, ``database``, read as a URL.

- ``sqlite:///path/to/file.sqlite3`` or a bare path: an embedded SQLite file (the
  default; ``segshuffle demo`` and most tests use it). One process owns it (the
  shuffler enforces it: :func:`.sqlite_base.hold_single_process`).
- ``postgresql://user@host:port/dbname?...`` (or ``postgres://``): a PostgreSQL database
  reached through a connection pool; several replicas of a service may share it. Each
  party (the shuffler's operator, the server's operator) has a database of its own.
  Keep the password out of the URL: libpq reads it from ``PGPASSFILE`` (a Docker or
  Kubernetes secret file) or ``PGPASSWORD``.

Pure: nothing here opens a connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


class UnusableDatabaseError(RuntimeError):
    """The database cannot be used as it is; the message says why and what to do."""


class SchemaVersionError(UnusableDatabaseError):
    """The database was written by a newer version of the service than this one."""


class DatabaseInUseError(UnusableDatabaseError):
    """Another process already serves from this SQLite file."""


class CorruptDatabaseError(UnusableDatabaseError):
    """The database file is damaged or not a SQLite database (``PRAGMA quick_check``)."""


def require_sqlite_directory(database: str) -> None:
    """For a SQLite ``database`` setting, its directory must exist (a ValueError naming it
    otherwise): a service does not make a directory tree where a typo pointed it.  The one
    function here that looks at the file system (one ``stat``)."""
    target = parse_database(database)
    if target.kind != "sqlite" or target.location == ":memory:":
        return
    directory = Path(target.location).expanduser().absolute().parent
    if not directory.is_dir():
        raise ValueError(f"the directory of the database {target.location} ({directory}) "
                         "does not exist: create it first, or give another path")


SQLITE_SCHEME = "sqlite://"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


@dataclass(frozen=True)
class DatabaseTarget:
    """A parsed ``database`` setting."""

    kind: Literal["sqlite", "postgresql"]
    location: str
    """The SQLite file's path, or the PostgreSQL connection URL."""

    @property
    def redacted(self) -> str:
        """The location without a password, for logs and error messages."""
        if self.kind == "sqlite":
            return self.location
        return redact_url(self.location)


def parse_database(value: str) -> DatabaseTarget:
    """Read a ``database`` setting; raises ``ValueError`` for an empty value or an unknown
    scheme (``mysql://...``)."""
    text = value.strip()
    if not text:
        raise ValueError("database must not be empty")
    if text.startswith(POSTGRES_SCHEMES):
        return DatabaseTarget("postgresql", text)
    if text.startswith(SQLITE_SCHEME):
        path = text[len(SQLITE_SCHEME):]
        if not path.startswith("/") or path == "/":
            raise ValueError(f"a SQLite URL is sqlite:///path/to/file, got {redact_url(text)!r}")
        # sqlite:///data/x.db is the absolute path /data/x.db; sqlite:///./x.db a relative one.
        return DatabaseTarget("sqlite", path[1:] if path.startswith("/./") else path)
    scheme, separator, _ = text.partition("://")
    if separator and _URL_SCHEME.fullmatch(scheme):
        raise ValueError(f"unknown database scheme {scheme!r}: use a SQLite path, "
                         "sqlite:///path or postgresql://...")
    return DatabaseTarget("sqlite", text)


def redact_url(url: str) -> str:
    """``url`` with the password of its user-info part replaced by ``***``."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    authority, slash, tail = rest.partition("/")
    if "@" not in authority:
        return url
    userinfo, host = authority.rsplit("@", 1)
    user = userinfo.split(":", 1)[0]
    shown = f"{user}:***" if ":" in userinfo else user
    return f"{scheme}://{shown}@{host}{slash}{tail}"
