"""Open the shuffler's storage named by its ``database`` setting: the SQLite
:class:`~.storage.Storage` or the PostgreSQL :class:`~.storage_postgres.PostgresStorage`
(imported only when used, so a SQLite deployment needs no PostgreSQL driver)."""

from __future__ import annotations

from ..database import parse_database
from .storage_api import ShufflerStorage


def open_storage(database: str, *, synchronous: str = "NORMAL",
                 pool_size: int = 8) -> ShufflerStorage:
    """The shuffler's storage for a ``database`` setting (path, ``sqlite:///`` or
    ``postgresql://`` URL); raises :class:`~..sqlite_base.UnusableDatabaseError` when it
    cannot be opened."""
    target = parse_database(database)
    if target.kind == "postgresql":
        from .storage_postgres import PostgresStorage

        return PostgresStorage(target.location, pool_size=pool_size)
    from .storage import Storage

    return Storage(target.location, synchronous=synchronous)
