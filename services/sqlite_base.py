"""Shared SQLite setup of the services: connection pragmas and versioned migrations.

Both services keep their state in one SQLite file each (docs/architecture.md).  This
module opens that file the same way for both (WAL journal, the configured
``synchronous`` mode, a 10 s busy timeout, ``secure_delete`` so that deleted rows are
overwritten rather than left in free pages, autocommit so that every transaction is an
explicit ``BEGIN IMMEDIATE``) and brings its schema to the latest version;
:class:`SQLiteStore` is the base of both storages (one lock, one transaction style).

The schema is an ordered tuple of :class:`Migration` per service.  The table
``schema_version`` records every migration applied, one row per version; each
migration and its row are written in one transaction, so a crash leaves the database
at the version before or after it.  Migration 1 of each service is the schema as it
was before versioning, written with ``IF NOT EXISTS``, so a database created before
versioning is adopted at version 1 unchanged.  A database whose version is newer than
the code knows is refused (:class:`SchemaVersionError`) rather than written to.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from segshuffle.private_files import (
    create_private_file,
    make_private_folder,
    open_private_append,
    report_open,
)

from . import identity
from .database import (
    CorruptDatabaseError,
    DatabaseInUseError,
    SchemaVersionError,
    UnusableDatabaseError,
)

__all__ = ["CorruptDatabaseError", "DatabaseInUseError", "Migration", "SQLiteStore",
           "SchemaVersionError", "UnusableDatabaseError", "migrate", "open_database"]

T = TypeVar("T")

SYNCHRONOUS_MODES = ("NORMAL", "FULL", "EXTRA")
"""The ``PRAGMA synchronous`` modes the services accept."""

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    applied_at REAL NOT NULL
)
"""


@dataclass(frozen=True)
class Migration:
    """One step of a service's schema: its version number and its SQL script."""

    version: int
    description: str
    script: str

    def statements(self) -> Iterator[str]:
        """The script's statements, one by one (split where SQLite says one is complete)."""
        buffer = ""
        for line in self.script.splitlines(keepends=True):
            buffer += line
            if sqlite3.complete_statement(buffer):
                yield buffer.strip()
                buffer = ""
        if buffer.strip():
            raise ValueError(f"migration {self.version} ends with an incomplete statement")


def latest_version(migrations: Sequence[Migration]) -> int:
    """The version a database reaches once every migration is applied."""
    return migrations[-1].version if migrations else 0


def _check_order(migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, ... in order, got {versions}")


def schema_version(db: sqlite3.Connection) -> int:
    """The highest migration recorded in ``db`` (0 for a database never migrated)."""
    db.execute(_VERSION_TABLE)
    row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


def migrate(db: sqlite3.Connection, migrations: Sequence[Migration], *, service: str) -> int:
    """Apply the pending migrations in order and return the resulting version.

    Each migration runs in its own ``BEGIN IMMEDIATE`` transaction, and the version
    is read again inside it, so two processes opening the same file apply each step
    once.  Raises :class:`SchemaVersionError` if the database is at a version newer
    than the latest of ``migrations``.
    """
    _check_order(migrations)
    latest = latest_version(migrations)
    db.execute(_VERSION_TABLE)
    for migration in migrations:
        db.execute("BEGIN IMMEDIATE")
        try:
            current = schema_version(db)
            if current > latest:
                raise SchemaVersionError(
                    f"the {service} database is at schema version {current}, but this "
                    f"version of the {service} only knows versions up to {latest}; "
                    "refusing to start (upgrade the service or use another database)"
                )
            if current < migration.version:
                for statement in migration.statements():
                    db.execute(statement)
                db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                           (migration.version, time.time()))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    version = schema_version(db)
    if version > latest:
        raise SchemaVersionError(
            f"the {service} database is at schema version {version}, but this version of "
            f"the {service} only knows versions up to {latest}; refusing to start"
        )
    return version


def _synchronous(synchronous: str) -> str:
    mode = synchronous.upper()
    if mode not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}")
    return mode


WAL_AUTOCHECKPOINT_PAGES = 10_000
"""WAL frames (4 KiB pages) after which a commit copies the WAL back into the database
(SQLite's default: 1,000).  Writes with random keys (token hashes, row keys) touch
scattered pages, and a checkpoint copies each page once however often it was written
since the last one: checkpointing ten times less often cut a submission's commit from
about 75 to 50 microseconds of CPU at 10,000 users (round 2).  Durability is the WAL's
and ``synchronous``'s, as before; the WAL file grows to about 40 MiB between checkpoints,
and the explicit ``TRUNCATE`` checkpoints after deletions (:meth:`SQLiteStore._checkpoint`)
still remove old page images at once."""


def _configure(db: sqlite3.Connection, mode: str) -> None:
    """The pragmas both services use besides the busy timeout, which
    :func:`open_database` sets before it reads anything (``journal_mode=WAL`` writes the
    file's header)."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={mode}")
    db.execute("PRAGMA secure_delete=ON")
    db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")


def _tag(db: sqlite3.Connection, service: str) -> None:
    """Write the identity (header ``application_id`` and the identity table) in one
    transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(f"PRAGMA application_id={identity.application_id(service)}")
        db.execute(f"CREATE TABLE IF NOT EXISTS {identity.IDENTITY_TABLE} "
                   "(service TEXT PRIMARY KEY)")
        db.execute(f"INSERT OR IGNORE INTO {identity.IDENTITY_TABLE} (service) VALUES (?)",
                   (service,))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _create(path: Path, service: str) -> None:
    """A new database at ``path``, which does not exist: made under a temporary name with
    its identity, then linked into place, so that no start ever sees a half-made file
    there (a crash leaves at most the temporary file).

    Private under any umask (:mod:`segshuffle.private_files`): missing folders are made
    0700, and the file is made 0600 before SQLite opens it (an empty file is an empty
    database), so its ``-wal`` and ``-shm``, which SQLite creates with the database's
    own mode, are 0600 too."""
    make_private_folder(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
    try:
        os.close(create_private_file(temporary))
        db = sqlite3.connect(str(temporary), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            _tag(db, service)
        finally:
            db.close()  # the last connection checkpoints and removes the WAL
        # another process may have created it meanwhile: identified then like any file
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        for leftover in (temporary, Path(f"{temporary}-wal"), Path(f"{temporary}-shm")):
            leftover.unlink(missing_ok=True)


def _identify(db: sqlite3.Connection, path: str, service: str) -> identity.Verdict:
    """What the database open as ``db`` at ``path`` is, for ``service``
    (:func:`identity.classify`); reads only."""
    header_id = int(db.execute("PRAGMA application_id").fetchone()[0])
    tables = {str(row[0]) for row in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    tag = None
    if identity.IDENTITY_TABLE in tables:
        row = db.execute(f"SELECT service FROM {identity.IDENTITY_TABLE} LIMIT 1").fetchone()
        tag = None if row is None else str(row[0])
    return identity.classify(service, path, tables=tables, tag=tag, header_id=header_id,
                             empty_is_new=path == ":memory:")


WAL_HEADER_BYTES = 32
"""The size of a ``-wal`` file that holds no transaction (its header alone)."""


def _reader(path: Path, *, with_wal: bool) -> sqlite3.Connection:
    """A connection that reads the database at ``path`` and cannot change any file.

    Without ``with_wal``: the main file as it lies (``immutable``: no lock, and no
    ``-wal``, ``-shm`` or ``-journal`` looked at).  With it: also the transactions
    committed to the ``-wal`` beside it, through the ``-shm`` beside it opened read-only
    (``readonly_shm``; SQLite rebuilds an index it cannot trust in its own memory), with
    the database file read-only: a checkpoint, which would copy the ``-wal`` into the
    file and delete it when the connection closes, first needs an exclusive lock, which
    a read-only file cannot take.  Both keep SQLite's own locking VFS, so closing them
    leaves the locks of any other connection of this process in place."""
    options = "mode=ro&readonly_shm=1" if with_wal else "mode=ro&immutable=1"
    return sqlite3.connect(f"{path.absolute().as_uri()}?{options}", uri=True,
                           isolation_level=None)


def _identify_file(path: Path, service: str) -> identity.Verdict:
    """What the file at ``path`` is, for ``service``, decided without writing to it or to
    anything beside it (a ``-wal``, ``-shm`` or ``-journal`` stays byte for byte).

    The main file alone decides first: a database is tagged when it is created (and the
    tag checkpointed into the file before it is linked into place), and a tag is never
    taken away, so a file that is the service's by its main file is the service's.  Only
    when the main file says otherwise, and a ``-wal`` beside it holds transactions (with
    its ``-shm``: without one, reading the ``-wal`` would create it), is the database
    read again with them, since that file's schema (or tag) may still be in its ``-wal``
    alone.  If that read fails, the first refusal stands.  A ``-journal`` is never read:
    a file with one is not the service's (its databases keep a ``-wal``), and a rollback
    would write."""
    try:
        return _classified(path, service, with_wal=False)
    except identity.DatabaseIdentityError as refusal:
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        if not (wal.is_file() and wal.stat().st_size > WAL_HEADER_BYTES and shm.is_file()):
            raise
        try:
            return _classified(path, service, with_wal=True)
        except CorruptDatabaseError:
            raise refusal from None


def _classified(path: Path, service: str, *, with_wal: bool) -> identity.Verdict:
    """:func:`_identify` on a :func:`_reader` of ``path``."""
    try:
        db = _reader(path, with_wal=with_wal)
        try:
            return _identify(db, str(path), service)
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise _corrupt(path, service, exc) from None


def database_files(path: str | Path) -> list[Path]:
    """The folder and files of the SQLite database at ``path``: its folder, the file,
    its ``-wal`` and its ``-shm``."""
    file = Path(path)
    return [file.absolute().parent, file, Path(f"{file}-wal"), Path(f"{file}-shm")]


def _check_file(path: Path, service: str) -> None:
    """Refuse, without opening it, a file that is empty or not a SQLite database."""
    try:
        with path.open("rb") as handle:
            header = handle.read(16)
    except OSError as exc:
        raise UnusableDatabaseError(f"the {service} database {path} cannot be opened "
                                    f"({exc.strerror}); refusing to start") from None
    if not header:
        raise identity.DatabaseIdentityError(
            f"the {service} database {path} is an empty file (0 bytes: a truncated file or "
            "a failed restore?); refusing to start without touching it (restore it, or "
            "remove it to start afresh)")
    if header != b"SQLite format 3\x00":
        raise CorruptDatabaseError(
            f"the {service} database {path} cannot be read (not a SQLite database); "
            "refusing to start: restore it from a backup or move it away")


def open_database(path: str | Path, migrations: Sequence[Migration], *, service: str,
                  synchronous: str = "NORMAL") -> sqlite3.Connection:
    """Open ``service``'s database at ``path``: created (with its identity, private) only
    when the path does not exist; otherwise identified (:mod:`.identity`) without writing
    to it (:func:`_identify_file`), then opened, configured, checked (``PRAGMA
    quick_check``) and migrated.  The connection is closed if any step fails.  An empty,
    foreign or other service's file is :class:`~.identity.DatabaseIdentityError`; one
    SQLite cannot read, or that fails the integrity check, :class:`CorruptDatabaseError`.
    Once open, the database's folder and files that others may use are reported
    (:func:`~segshuffle.private_files.report_open`)."""
    mode = _synchronous(synchronous)
    name = str(path)
    verdict: identity.Verdict | None = None
    if name != ":memory:":
        file = Path(name)
        if not file.exists():
            _create(file, service)
        _check_file(file, service)
        verdict = _identify_file(file, service)
    try:
        db = sqlite3.connect(name, isolation_level=None, check_same_thread=False)
    except sqlite3.DatabaseError as exc:
        raise _corrupt(path, service, exc) from None
    try:
        try:
            db.execute("PRAGMA busy_timeout=10000")
            if verdict is None:
                verdict = _identify(db, name, service)
            _configure(db, mode)
            check_integrity(db, path, service=service)
        except sqlite3.DatabaseError as exc:
            raise _corrupt(path, service, exc) from None
        if verdict != "ours":
            _tag(db, service)
        migrate(db, migrations, service=service)
    except BaseException:
        db.close()
        raise
    if name != ":memory:":
        report_open(database_files(name))
    return db


def check_integrity(db: sqlite3.Connection, path: str | Path, *, service: str) -> None:
    """Refuse a damaged database before anything is written to it (``PRAGMA quick_check``,
    which reads every page once: O(size), seconds for gigabytes)."""
    problems = [str(row[0]) for row in db.execute("PRAGMA quick_check(5)").fetchall()]
    if problems != ["ok"]:
        raise CorruptDatabaseError(
            f"the {service} database {path} is damaged ({'; '.join(problems)}); refusing to "
            "start: restore it from a backup or move it away")


def _corrupt(path: str | Path, service: str, exc: sqlite3.DatabaseError) -> CorruptDatabaseError:
    return CorruptDatabaseError(
        f"the {service} database {path} cannot be read ({exc}); refusing to start: restore it "
        "from a backup or move it away")


def hold_single_process(path: str, service: str) -> IO[bytes]:
    """An exclusive ``flock`` on ``path`` + ``.lock``, held until the returned file is closed.

    A store that keeps state in memory next to its file (the shuffler's open-round counts)
    is only right while it is the file's one writer, as the services' SQLite databases
    are meant to be ("one process owns it", :mod:`.database`).  The lock makes that
    rule a check: a second process (or a second store in this one) pointed at the same
    file is :class:`DatabaseInUseError` at start, instead of two writers whose counts
    drift apart.  ``flock`` on a file of its own: SQLite's POSIX locks on the database
    are untouched, and the kernel drops the lock when the process ends, however it ends
    (the empty lock file stays; it holds nothing).
    """
    lock = open_private_append(path + ".lock")  # held open as the lock itself
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise DatabaseInUseError(
            f"the {service} database {path} is in use by another process (it holds "
            f"{path}.lock); one process serves a SQLite database: stop the other one, or "
            "use PostgreSQL for replicas") from None
    except BaseException:
        lock.close()
        raise
    return lock


class SQLiteStore:
    """One connection under one lock, with one transaction style for both services.

    Reads run under the lock in autocommit mode; every state change runs inside
    :meth:`_transaction` (``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any
    exception), so it is atomic against crashes and against the other threads.
    """

    def __init__(self, path: str | Path, migrations: Sequence[Migration], *, service: str,
                 synchronous: str = "NORMAL", single_process: bool = False) -> None:
        mode = _synchronous(synchronous)
        self.path = str(path)
        self._lock = threading.RLock()
        self._db = open_database(self.path, migrations, service=service, synchronous=mode)
        try:
            self._owner = (hold_single_process(self.path, service)
                           if single_process and self.path != ":memory:" else None)
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._owner is not None:
                self._owner.close()
                self._owner = None

    def run_inline(self, function: Callable[..., T], *args: Any) -> tuple[bool, T | None]:
        """Run ``function(*args)`` in the calling thread if the store is free right now.

        Returns ``(True, result)``, or ``(False, None)`` without running it when another
        thread holds the store (a release reading or deleting a large round): the caller
        then runs it in a worker thread instead. The event loop uses this for the short
        calls of a request (a token lookup, one submission's transaction: tens of
        microseconds with ``synchronous=NORMAL``), which costs far less than handing the
        call to a thread and back, and never waits behind a long one.
        """
        if not self._lock.acquire(blocking=False):
            return False, None
        try:
            return True, function(*args)
        finally:
            self._lock.release()

    @property
    def call_threads(self) -> int:
        """Worker threads worth giving this store's short calls (:mod:`..storage_calls`): one.

        The store has one connection behind one lock, so a second thread could only wait
        for the first.  Worse, waiting threads feed on themselves: while any of them holds
        the lock, :meth:`run_inline` finds the store busy and the next call goes to a
        thread too, so under load most calls ended up handed to threads that queued on
        the lock (and on the GIL) instead of running inline.  With one thread the calls
        that find the store busy run one after another, and the loop is back inline as
        soon as that thread is idle.
        """
        return 1

    def ping(self) -> bool:
        """Whether the database answers a trivial query."""
        with self._lock:
            return self._db.execute("SELECT 1").fetchone() == (1,)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it, so old page images are gone."""
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
