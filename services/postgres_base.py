"""Shared PostgreSQL setup of the services: a connection pool, one transaction style and
versioned migrations (the counterpart of :mod:`.sqlite_base`).

Several replicas of a service may share one database, so nothing here relies on a
process-local lock:

- :meth:`PostgresStore._transaction` is one ``BEGIN`` ... ``COMMIT`` on a pooled
  connection (``READ COMMITTED``), rolled back on any exception. Code that must be
  serialised against other writers of the same thing takes a transaction-scoped
  advisory lock with :func:`lock` (exclusive) or :func:`lock_shared`, keyed by a text
  such as ``"shuffler:round:c1:2"``; the lock is released at commit or rollback, so a
  crashed replica never leaves one behind.
- :func:`identify` refuses a database that is not this service's (another service's, or
  one holding anything foreign, in any schema: :func:`inventory`) before anything is
  written, and tags a new one;
- :func:`migrate` applies pending migrations under an exclusive advisory lock, so
  replicas starting together apply each step exactly once; ``schema_version`` records
  them as in SQLite, and a database newer than the code is refused.

A store made with ``lock_timeout`` bounds every lock wait of its pooled connections by
that many seconds (a session setting made once per connection, so no statement pays a
round trip for it); a wait past it fails with :class:`psycopg.errors.LockNotAvailable`.
:meth:`PostgresStore._fetch_one` runs one statement on its own (autocommit: a statement,
or a call of a PL/pgSQL function, is one transaction) through a cursor kept with the
connection: one round trip, and no cursor or adapter set made per call.

Connection failures at start are :class:`~.sqlite_base.UnusableDatabaseError` with the
URL's password redacted; the pool waits at most ``connect_timeout`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, LiteralString

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from . import identity
from .database import SchemaVersionError, UnusableDatabaseError, redact_url

_CURSOR = "_segshuffle_cursor"
"""The attribute of a pooled connection that holds its cursor (:meth:`PostgresStore._fetch_one`)."""

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    applied_at DOUBLE PRECISION NOT NULL
)
"""


@dataclass(frozen=True)
class PostgresMigration:
    """One step of a service's PostgreSQL schema: its version and its SQL script (one or
    more statements without parameters, run as one transaction)."""

    version: int
    description: str
    script: str


def lock_timeout_setting(seconds: float) -> str:
    """``seconds`` as a ``lock_timeout`` setting (whole milliseconds, at least 1)."""
    return f"{max(1, round(seconds * 1000))}ms"


def lock(db: psycopg.Connection, key: str) -> None:
    """Take the exclusive transaction-scoped advisory lock named ``key`` (waits for it)."""
    db.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))


def lock_shared(db: psycopg.Connection, key: str) -> None:
    """Take the shared transaction-scoped advisory lock named ``key``: any number of
    shared holders, excluded only by an exclusive holder (:func:`lock`)."""
    db.execute("SELECT pg_advisory_xact_lock_shared(hashtextextended(%s, 0))", (key,))


def schema_version(db: psycopg.Connection) -> int:
    """The highest migration recorded in ``db`` (0 for a database never migrated)."""
    row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


def migrate(db: psycopg.Connection, migrations: Sequence[PostgresMigration], *,
            service: str) -> int:
    """Apply the pending migrations in order, each in its own transaction under the
    service's exclusive migration lock, and return the resulting version. Raises
    :class:`SchemaVersionError` if the database is newer than ``migrations``."""
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, ... in order, got {versions}")
    latest = versions[-1] if versions else 0
    for migration in migrations:
        with db.transaction():
            lock(db, f"{service}:migrations")
            db.execute(_VERSION_TABLE)
            current = schema_version(db)
            if current > latest:
                raise SchemaVersionError(
                    f"the {service} database is at schema version {current}, but this "
                    f"version of the {service} only knows versions up to {latest}; "
                    "refusing to start (upgrade the service or use another database)")
            if current < migration.version:
                db.execute(migration.script)
                db.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, %s)",
                           (migration.version, time.time()))
    with db.transaction():
        db.execute(_VERSION_TABLE)
        version = schema_version(db)
    if version > latest:
        raise SchemaVersionError(
            f"the {service} database is at schema version {version}, but this version of "
            f"the {service} only knows versions up to {latest}; refusing to start")
    return version


INVENTORY_LIMIT = 200
"""How many objects :func:`inventory` reads at most (the rest are only counted): a
service's own database holds about a dozen, so a longer list is foreign anyway, and a
database with millions of objects costs no more to identify than one with 200."""

_INVENTORY = """
WITH user_schemas AS (
    SELECT oid, nspname FROM pg_namespace
    WHERE nspname NOT IN ('pg_catalog', 'information_schema')
      AND nspname NOT LIKE 'pg\\_toast%%' AND nspname NOT LIKE 'pg\\_temp\\_%%'
), parts AS (
    SELECT classid, objid FROM pg_depend
    WHERE deptype IN ('i', 'a', 'e') AND (refclassid, refobjid) <> (classid, objid)
), found AS (
    SELECT 'schema' AS kind, s.nspname AS schema, s.nspname AS name
    FROM user_schemas s
    WHERE s.nspname <> 'public' AND s.nspname IS DISTINCT FROM current_schema()
      AND NOT EXISTS (SELECT 1 FROM parts WHERE classid = 'pg_namespace'::regclass
                                            AND objid = s.oid)
    UNION ALL
    SELECT CASE c.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                          WHEN 'S' THEN 'sequence' WHEN 'f' THEN 'foreign table'
                          ELSE 'table' END, s.nspname, c.relname
    FROM pg_class c JOIN user_schemas s ON s.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'f', 'v', 'm', 'S')
      AND NOT EXISTS (SELECT 1 FROM parts WHERE classid = 'pg_class'::regclass
                                            AND objid = c.oid)
    UNION ALL
    SELECT CASE p.prokind WHEN 'p' THEN 'procedure' WHEN 'a' THEN 'aggregate'
                          ELSE 'function' END, s.nspname, p.proname
    FROM pg_proc p JOIN user_schemas s ON s.oid = p.pronamespace
    WHERE NOT EXISTS (SELECT 1 FROM parts WHERE classid = 'pg_proc'::regclass
                                            AND objid = p.oid)
    UNION ALL
    SELECT 'type', s.nspname, t.typname
    FROM pg_type t JOIN user_schemas s ON s.oid = t.typnamespace
    WHERE NOT EXISTS (SELECT 1 FROM parts WHERE classid = 'pg_type'::regclass
                                            AND objid = t.oid)
)
SELECT kind, schema IS NOT DISTINCT FROM current_schema() AND kind <> 'schema',
       CASE WHEN kind = 'schema' OR schema IS NOT DISTINCT FROM current_schema()
            THEN name ELSE schema || '.' || name END,
       count(*) OVER ()
FROM found
ORDER BY 2 DESC, array_position(ARRAY['schema', 'table', 'foreign table', 'view',
    'materialized view', 'sequence', 'function', 'procedure', 'aggregate', 'type'], kind), 3
LIMIT %(limit)s
"""
"""Everything a database holds, as :func:`inventory` reads it: the schemas besides
``public`` and the service's own (``current_schema()``, where its tables are made), and
in every schema but the system ones the tables, views, materialized views, sequences,
functions and types.  An object that is part of another is not listed on its own (a
table's row type and indexes, an array type, the sequence of a ``serial`` column, a
partition: ``pg_depend`` kinds internal and auto), nor is what an extension installed
(kind ``e``: ``plpgsql``, ``pgcrypto``), so a database the operator just created, from
a template with extensions or not, is empty.  The service schema's own tables come
first, so :data:`INVENTORY_LIMIT` never hides one of them; then schemas, tables,
views and so on, as a refusal lists them."""


def inventory(db: psycopg.Connection
              ) -> tuple[set[str], list[identity.DatabaseObject], int]:
    """What the database holds (:data:`_INVENTORY`): the names of the tables in the
    service's schema, every other object (named with its schema when outside it), and
    how many more objects there are than :data:`INVENTORY_LIMIT` let it read."""
    rows = db.execute(_INVENTORY, {"limit": INVENTORY_LIMIT}).fetchall()
    tables: set[str] = set()
    others: list[identity.DatabaseObject] = []
    for kind, in_service_schema, name, _ in rows:
        if in_service_schema and kind == "table":
            tables.add(str(name))
        else:
            others.append(identity.DatabaseObject(str(kind), str(name)))
    unlisted = int(rows[0][3]) - len(rows) if rows else 0
    return tables, others, unlisted


def identify(db: psycopg.Connection, *, service: str, where: str) -> identity.Verdict:
    """Decide whose database this is before anything else is written (:mod:`.identity`),
    and tag a new or adopted one, under an advisory lock that every service takes for
    this step (so a server and a shuffler started on one empty database do not both
    claim it).  Raises :class:`~.identity.DatabaseIdentityError`, having written nothing."""
    with db.transaction():
        lock(db, "segshuffle:identity")
        tables, others, unlisted = inventory(db)
        tag = None
        if identity.IDENTITY_TABLE in tables:
            row = db.execute(
                f"SELECT service FROM {identity.IDENTITY_TABLE} LIMIT 1").fetchone()
            tag = None if row is None else str(row[0])
        verdict = identity.classify(service, where, tables=tables, tag=tag, others=others,
                                    unlisted=unlisted, empty_is_new=True)
        if verdict != "ours":
            db.execute(f"CREATE TABLE IF NOT EXISTS {identity.IDENTITY_TABLE} "
                       "(service TEXT PRIMARY KEY)")
            db.execute(f"INSERT INTO {identity.IDENTITY_TABLE} (service) VALUES (%s) "
                       "ON CONFLICT DO NOTHING", (service,))
    return verdict


class PostgresStore:
    """A connection pool with one transaction style for both services' PostgreSQL storage."""

    def __init__(self, url: str, migrations: Sequence[PostgresMigration], *, service: str,
                 pool_size: int = 8, connect_timeout: float = 10.0,
                 lock_timeout: float | None = None) -> None:
        if lock_timeout is not None and lock_timeout <= 0:
            raise ValueError(f"lock_timeout must be positive, got {lock_timeout}")
        self.url = url
        self.service = service
        self._pool_size = max(1, pool_size)
        self._connect_timeout = connect_timeout
        self._lock_timeout_setting = (None if lock_timeout is None
                                      else lock_timeout_setting(lock_timeout))
        """``lock_timeout`` as the session setting every pooled connection gets."""
        self._async_pool: AsyncConnectionPool | None = None
        """The event loop's own pool (:meth:`open_async`), ``None`` until it is open."""
        configure: Callable[[psycopg.Connection[Any]], None] | None = None
        setting = self._lock_timeout_setting
        if setting is not None:

            def configure(db: psycopg.Connection[Any]) -> None:
                """Bound the lock waits of every statement of this (autocommit) session."""
                db.execute("SELECT set_config('lock_timeout', %s, false)", (setting,))
        try:  # one direct connection first: its error says what is wrong, and it migrates
            with psycopg.connect(url, autocommit=True,
                                 connect_timeout=max(1, round(connect_timeout))) as db:
                identify(db, service=service, where=redact_url(url))
                migrate(db, migrations, service=service)
        except psycopg.Error as exc:
            raise UnusableDatabaseError(
                f"cannot use the {service} database {redact_url(url)} ({_reason(exc)}); "
                "refusing to start") from None
        self._pool = ConnectionPool(url, min_size=1, max_size=max(1, pool_size), open=False,
                                    kwargs={"autocommit": True}, configure=configure,
                                    name=f"segshuffle-{service}")
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout:
            self._pool.close()
            raise UnusableDatabaseError(
                f"cannot connect to the {service} database {redact_url(url)} within "
                f"{connect_timeout:g} s; refusing to start") from None

    def close(self) -> None:
        self._pool.close()

    async def open_async(self) -> None:
        """Open a second pool, of asynchronous connections, for the event loop it runs in.

        A request's hot statements (the shuffler's token lookup and submission) then run
        on the loop itself, as any asynchronous endpoint's would, instead of in a worker
        thread: a thread hand-off (waking the thread, the GIL going back and forth, the
        result posted back to the loop) cost more CPU than the statement's own round
        trip.  Opened by the application's startup in its loop, closed by its shutdown
        (:meth:`close_async`); until then, and in code that never opens it, the
        synchronous pool in worker threads serves every call.  Same size and session
        settings as the synchronous pool.
        """
        if self._async_pool is not None:
            return
        setting = self._lock_timeout_setting

        async def configure(db: psycopg.AsyncConnection[Any]) -> None:
            if setting is not None:
                await db.execute("SELECT set_config('lock_timeout', %s, false)", (setting,))

        pool: AsyncConnectionPool = AsyncConnectionPool(
            self.url, min_size=1, max_size=self._pool_size, open=False,
            kwargs={"autocommit": True}, configure=configure,
            name=f"segshuffle-{self.service}-async")
        try:
            await pool.open(wait=True, timeout=self._connect_timeout)
        except PoolTimeout:
            await pool.close()
            raise UnusableDatabaseError(
                f"cannot connect to the {self.service} database {redact_url(self.url)} "
                f"within {self._connect_timeout:g} s; refusing to start") from None
        self._async_pool = pool

    async def close_async(self) -> None:
        """Close the event loop's pool (:meth:`open_async`), if open."""
        pool, self._async_pool = self._async_pool, None
        if pool is not None:
            await pool.close()

    @property
    def async_ready(self) -> bool:
        """Whether :meth:`_fetch_one_async` can run (the loop's pool is open)."""
        return self._async_pool is not None

    def ping(self) -> bool:
        """Whether the database answers a trivial query."""
        try:
            with self._pool.connection(timeout=2.0) as db:
                return db.execute("SELECT 1").fetchone() == (1,)
        except (PoolTimeout, psycopg.Error):
            return False

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection in autocommit mode, for single-statement reads."""
        with self._pool.connection() as db:
            yield db

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection]:
        """One transaction on a pooled connection: committed when the block ends, rolled
        back if it raises."""
        with self._pool.connection() as db, db.transaction():
            yield db

    def _fetch_one(self, query: LiteralString, params: Sequence[Any]) -> tuple[Any, ...] | None:
        """The first row of one statement run on its own (autocommit), or ``None``.

        The cheapest way to the database: the connection is taken from the pool and given
        back without the context manager's commit check (there is no transaction to end),
        and the statement runs on a binary cursor kept with the connection, whose
        adapters are made once (psycopg prepares the statement after a few uses).
        """
        pool = self._pool
        db = pool.getconn()
        try:
            cursor = db.__dict__.get(_CURSOR)
            if cursor is None:
                cursor = db.__dict__[_CURSOR] = db.cursor(binary=True)
            cursor.execute(query, params)
            return cursor.fetchone()
        finally:
            pool.putconn(db)

    async def _fetch_one_async(self, query: LiteralString,
                               params: Sequence[Any]) -> tuple[Any, ...] | None:
        """:meth:`_fetch_one` on the event loop's pool (:meth:`open_async`)."""
        pool = self._async_pool
        if pool is None:
            raise RuntimeError("the asynchronous pool is not open (open_async)")
        db = await pool.getconn()
        try:
            cursor = db.__dict__.get(_CURSOR)
            if cursor is None:
                cursor = db.__dict__[_CURSOR] = db.cursor(binary=True)
            await cursor.execute(query, params)
            return await cursor.fetchone()
        finally:
            await pool.putconn(db)


def _reason(exc: BaseException) -> str:
    """The last line of a libpq error, which names the cause (e.g. failed authentication)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
