"""What the tests know about the SQLite backend's files, kept in one place.

The storage contract (tests/test_storage_contract.py) holds for every backend and uses
no SQL.  A few tests check properties of the files a backend leaves behind (nothing
written by a refused request, no identity or arrival order on disk); for SQLite they
read the database here.  Another backend brings its own version of these helpers.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def snapshot(path: str | Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of a SQLite database, sorted per table."""
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall()) for t in tables}


def rows(path: str | Path, query: str, *parameters: Any) -> list[tuple[Any, ...]]:
    """The rows of one query on a SQLite database (opened read-only for the call)."""
    db = sqlite3.connect(path)
    try:
        return db.execute(query, parameters).fetchall()
    finally:
        db.close()


def pending_messages(path: str | Path, campaign_id: str) -> int:
    """Ciphertexts a shuffler's SQLite file holds for a campaign (every round and stream),
    read without opening a second store on a file its running shuffler holds."""
    ((count,),) = rows(path, "SELECT COUNT(*) FROM pending WHERE campaign_id = ?", campaign_id)
    return int(count)
