"""Open the server's storage named by its ``database`` setting: the SQLite
:class:`~.storage.Repository` or the PostgreSQL :class:`~.storage_postgres.PostgresRepository`
(imported only when used, so a SQLite deployment needs no PostgreSQL driver)."""

from __future__ import annotations

from ..database import parse_database
from .storage_api import ServerStorage


def open_repository(database: str, *, synchronous: str = "FULL",
                    pool_size: int = 8) -> ServerStorage:
    """The server's storage for a ``database`` setting (path, ``sqlite:///`` or
    ``postgresql://`` URL); raises :class:`~..sqlite_base.UnusableDatabaseError` when it
    cannot be opened."""
    target = parse_database(database)
    if target.kind == "postgresql":
        from .storage_postgres import PostgresRepository

        return PostgresRepository(target.location, pool_size=pool_size)
    from .storage import Repository

    return Repository(target.location, synchronous=synchronous)
