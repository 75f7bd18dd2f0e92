"""Which service a database belongs to, decided before anything is written to it.

Every database of a service carries its identity twice:

- a table ``segshuffle_identity`` with one row, the service's name (``server``,
  ``shuffler``), in SQLite and in PostgreSQL alike;
- in SQLite also the file header's ``application_id`` (:func:`application_id`), so that
  ``file`` and ``sqlite3 db 'PRAGMA application_id'`` tell the file apart too.

On every start, :func:`classify` looks at what the database holds (its tables, its tag,
its application id) and decides:

- ``new``: nothing there (a PostgreSQL database the operator created for the service;
  a SQLite file is only ever created at a path that did not exist, by the service);
- ``ours``: tagged as this service's: migrations may run;
- ``adopt``: a database from before identities, recognised by its tables (every table
  of this service's first schema, none of the other service's): it is tagged, then
  migrated;
- anything else is refused with :class:`DatabaseIdentityError`, naming what the
  database is: empty, another service's, or foreign (its first tables are listed).

Nothing here does I/O; :mod:`.sqlite_base` and :mod:`.postgres_base` read the facts and
write the tag.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Literal

from .database import UnusableDatabaseError

IDENTITY_TABLE = "segshuffle_identity"

#: Tables only the first schema of each service has: how a database created before
#: identities is recognised.
FIRST_SCHEMA_TABLES: dict[str, frozenset[str]] = {
    "server": frozenset({"campaigns", "batches", "chunks", "counts", "nonces"}),
    "shuffler": frozenset({"tokens", "participations", "pending", "rounds"}),
}

#: Tables every database may have besides a service's own.
BOOKKEEPING_TABLES = frozenset({IDENTITY_TABLE, "schema_version"})

Verdict = Literal["new", "ours", "adopt"]


class DatabaseIdentityError(UnusableDatabaseError):
    """The database is not this service's (empty, another service's, or foreign)."""


def application_id(service: str) -> int:
    """The SQLite ``application_id`` of ``service``'s databases: a positive 31-bit number
    derived from its name (``server`` and ``shuffler`` differ, as any two names do)."""
    digest = hashlib.sha256(f"segshuffle:{service}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF or 1


def service_of_application_id(value: int) -> str | None:
    """The known service whose databases carry ``value``, if any."""
    for service in FIRST_SCHEMA_TABLES:
        if application_id(service) == value:
            return service
    return None


def _listed(tables: Collection[str]) -> str:
    names = sorted(tables)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"tables {shown}"


def classify(service: str, where: str, *, tables: Collection[str], tag: str | None,
             header_id: int = 0, empty_is_new: bool) -> Verdict:
    """What to do with the database at ``where`` (a path, or a redacted URL) for
    ``service``, from what it holds: its user ``tables``, the service name in its
    identity table (``tag``, None without one) and its SQLite ``header_id`` (0: none).

    ``empty_is_new``: a database without tables is new (PostgreSQL, created empty by the
    operator); otherwise it is refused as empty (a SQLite file that exists but holds
    nothing: a truncated file, a failed restore).
    """
    refusal = (f"the {service} database {where} is {{}}; refusing to start without "
               "touching it (give the service its own database, or a path that does not "
               "exist yet to create one)")
    if tag is not None:
        if tag == service:
            return "ours"
        raise DatabaseIdentityError(refusal.format(f"the {tag}'s database"))
    owner = service_of_application_id(header_id) if header_id else None
    if header_id and owner != service:
        what = f"the {owner}'s database" if owner else (
            f"another application's SQLite file (application_id {header_id:#x})")
        raise DatabaseIdentityError(refusal.format(what))
    if header_id:  # ours by its header, the tag not written yet
        return "adopt"
    own = set(tables) - BOOKKEEPING_TABLES
    if not own:
        if empty_is_new and not tables:
            return "new"
        raise DatabaseIdentityError(refusal.format(
            "empty (a database without any of the service's tables)"))
    for other, marks in FIRST_SCHEMA_TABLES.items():
        if other != service and marks <= own:
            raise DatabaseIdentityError(refusal.format(
                f"the {other}'s database (from before databases were tagged)"))
    marks = FIRST_SCHEMA_TABLES.get(service)
    if marks is not None and marks <= own:
        return "adopt"
    raise DatabaseIdentityError(refusal.format(
        f"not a {service} database ({_listed(own)})"))
