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
  "nothing" means nothing in the whole database: no table, view, materialized view,
  sequence, function or type in any schema, and no schema besides ``public`` and the
  service's own (:class:`DatabaseObject`; what an extension installs is not counted);
- ``ours``: tagged as this service's: migrations may run;
- ``adopt``: a database from before identities, recognised by its tables (every table
  of this service's first schema, none of the other service's) and holding nothing
  else but what the service made (:data:`OWN_OBJECTS`): it is tagged, then migrated;
- anything else is refused with :class:`DatabaseIdentityError`, naming what the
  database is: empty, another service's, or foreign (the first objects found are
  listed, such as ``schema app; table app.customers``).

A tagged database is the service's whatever else it holds: the tag is only ever
written by the service, after it found the database new or its own.

Nothing here does I/O; :mod:`.sqlite_base` and :mod:`.postgres_base` read the facts and
write the tag.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable
from typing import Literal, NamedTuple

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


class DatabaseObject(NamedTuple):
    """Something a database holds besides the tables of the service's schema: its kind
    (``schema``, ``table``, ``view``, ``materialized view``, ``sequence``, ``function``,
    ``type``, ...) and its name, qualified by its schema when it lies outside the
    service's (``app.customers``), so a message names it as ``psql`` would find it."""

    kind: str
    name: str


#: What a service's schema held besides tables before databases were tagged: an
#: untagged database holding these (and no other object) may still be the service's.
OWN_OBJECTS: dict[str, frozenset[DatabaseObject]] = {
    "server": frozenset(),
    "shuffler": frozenset({DatabaseObject("function", "shuffler_submit"),
                           DatabaseObject("function", "shuffler_submit_as")}),
}

LISTED_NAMES = 5
"""How many names a refusal lists (the rest are counted)."""

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


def _listed(objects: Iterable[DatabaseObject], unlisted: int = 0) -> str:
    """``objects`` for a message, grouped by kind in the order first met:
    ``schema app; tables app.customers, t``; past :data:`LISTED_NAMES` names (and the
    ``unlisted`` ones never read) only counted."""
    groups: dict[str, list[str]] = {}
    for kind, name in objects:
        groups.setdefault(kind, []).append(name)
    parts: list[str] = []
    shown = 0
    for kind, names in groups.items():
        room = LISTED_NAMES - shown
        if room <= 0:
            break
        listed = names[:room]
        shown += len(listed)
        parts.append(f"{kind}{'s' if len(names) > 1 else ''} {', '.join(listed)}")
    more = sum(len(names) for names in groups.values()) - shown + unlisted
    text = "; ".join(parts)
    if more:
        text = f"{text} and {more} more" if text else f"{more} objects"
    return text


def classify(service: str, where: str, *, tables: Collection[str], tag: str | None,
             header_id: int = 0, others: Collection[DatabaseObject] = (),
             unlisted: int = 0, empty_is_new: bool) -> Verdict:
    """What to do with the database at ``where`` (a path, or a redacted URL) for
    ``service``, from what it holds: the user ``tables`` of the service's schema, the
    service name in its identity table (``tag``, None without one), its SQLite
    ``header_id`` (0: none), every ``other`` object of the database, and how many more
    objects it holds that were not read (``unlisted``: reading is bounded).

    ``empty_is_new``: a database holding nothing is new (PostgreSQL, created empty by
    the operator); otherwise it is refused as empty (a SQLite file that exists but holds
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
    if not own and not others and not unlisted:
        if empty_is_new and not tables:
            return "new"
        raise DatabaseIdentityError(refusal.format(
            "empty (a database without any of the service's tables)"))
    for other, marks in FIRST_SCHEMA_TABLES.items():
        if other != service and marks <= own:
            raise DatabaseIdentityError(refusal.format(
                f"the {other}'s database (from before databases were tagged)"))
    foreign = [found for found in others if found not in OWN_OBJECTS.get(service, ())]
    marks = FIRST_SCHEMA_TABLES.get(service)
    if marks is not None and marks <= own and not foreign and not unlisted:
        return "adopt"
    found = foreign + [DatabaseObject("table", name) for name in sorted(own)] or list(others)
    raise DatabaseIdentityError(refusal.format(
        f"not a {service} database ({_listed(found, unlisted)})"))
