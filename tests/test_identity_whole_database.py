"""A PostgreSQL database is identified by everything it holds, in every schema.

Tables in another schema than the service's, a view, a sequence, a function or a type
each make a database foreign: it is refused, naming what was found, with nothing
created.  A database holding nothing (extensions aside) is new; the service's own, and
one from before databases were tagged, are recognised.
"""

# ruff: noqa: F811  (the imported ``postgres_url`` fixture is a parameter of each test)

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from segshuffle.services import identity
from segshuffle.services.identity import DatabaseIdentityError
from segshuffle.services.server.backends import open_repository
from segshuffle.services.shuffler.backends import open_storage

from .postgres_support import postgres_url  # noqa: F401  (the fixture)

OPENERS: dict[str, Callable[[str], Any]] = {"server": open_repository,
                                            "shuffler": open_storage}

_EVERYTHING = """
SELECT n.nspname, c.relname, c.relkind::text FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%%'
UNION ALL
SELECT n.nspname, p.proname, 'function' FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%%'
UNION ALL
SELECT nspname, '', 'schema' FROM pg_namespace
"""


def _everything(url: str) -> set[tuple[str, str, str]]:
    """Every relation, function and schema of the database: 'nothing created' is checkable."""
    with psycopg.connect(url) as db:
        return {tuple(row) for row in db.execute(_EVERYTHING, {})}  # type: ignore[misc]


def _run(url: str, script: str) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(script)


FOREIGN = {
    "a table in another schema": (
        "CREATE SCHEMA app; CREATE TABLE app.customers (id serial PRIMARY KEY, name text)",
        r"\(schema app; table app\.customers\)"),
    "an empty schema of its own": ("CREATE SCHEMA app", r"\(schema app\)"),
    "a view and a sequence": ("CREATE VIEW v AS SELECT 1 AS x; CREATE SEQUENCE s",
                              r"\(view v; sequence s\)"),
    "a function": ("CREATE FUNCTION f() RETURNS integer LANGUAGE sql AS 'SELECT 1'",
                   r"\(function f\)"),
    "a type": ("CREATE TYPE mood AS ENUM ('calm', 'tense')", r"\(type mood\)"),
    "a materialized view": ("CREATE MATERIALIZED VIEW m AS SELECT 1 AS x",
                            r"\(materialized view m\)"),
}


@pytest.mark.parametrize("case", sorted(FOREIGN))
def test_a_database_holding_anything_foreign_is_refused_untouched(
        postgres_url: str, case: str) -> None:
    script, named = FOREIGN[case]
    _run(postgres_url, script)
    before = _everything(postgres_url)
    for service, opener in OPENERS.items():
        with pytest.raises(DatabaseIdentityError,
                           match=rf"is not a {service} database {named}"):
            opener(postgres_url)
        assert _everything(postgres_url) == before


def test_a_refusal_lists_the_first_objects_and_counts_the_rest(postgres_url: str) -> None:
    _run(postgres_url, "; ".join(f"CREATE TABLE t{i:02d} (x integer)" for i in range(12)))
    with pytest.raises(DatabaseIdentityError,
                       match=r"\(tables t00, t01, t02, t03, t04 and 7 more\)"):
        open_repository(postgres_url)


def test_only_as_many_objects_as_the_limit_are_read(postgres_url: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from segshuffle.services import postgres_base

    monkeypatch.setattr(postgres_base, "INVENTORY_LIMIT", 3)
    _run(postgres_url, "CREATE SCHEMA app; "
         + "; ".join(f"CREATE TABLE app.t{i} (x integer)" for i in range(6)))
    with psycopg.connect(postgres_url) as db:
        tables, others, unlisted = postgres_base.inventory(db)
    assert (tables, len(others), unlisted) == (set(), 3, 4)
    with pytest.raises(DatabaseIdentityError,
                       match=r"\(schema app; tables app\.t0, app\.t1 and 4 more\)"):
        open_repository(postgres_url)


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_an_extension_alone_leaves_a_database_new(postgres_url: str, service: str) -> None:
    """What an extension installs (its functions, its types) is the operator's setup,
    not data: such a database is still new."""
    try:
        _run(postgres_url, "CREATE EXTENSION IF NOT EXISTS pgcrypto")
    except psycopg.Error as exc:  # not installed on this server, or not trusted
        pytest.skip(f"pgcrypto unavailable: {exc}")
    OPENERS[service](postgres_url).close()
    OPENERS[service](postgres_url).close()


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_the_services_own_database_is_recognised_with_everything_it_made(
        postgres_url: str, service: str) -> None:
    """Its own functions (the shuffler's), sequences and indexes are not foreign: the
    database opens again, and once its tag is gone it is adopted by its tables."""
    OPENERS[service](postgres_url).close()
    OPENERS[service](postgres_url).close()
    _run(postgres_url, f"DROP TABLE {identity.IDENTITY_TABLE}")
    OPENERS[service](postgres_url).close()
    with psycopg.connect(postgres_url) as db:
        assert db.execute(f"SELECT service FROM {identity.IDENTITY_TABLE}").fetchall() == \
            [(service,)]


def test_an_untagged_database_with_foreign_objects_is_not_adopted(postgres_url: str) -> None:
    open_storage(postgres_url).close()
    _run(postgres_url, f"DROP TABLE {identity.IDENTITY_TABLE}; CREATE VIEW report AS SELECT 1")
    with pytest.raises(DatabaseIdentityError, match=r"not a shuffler database \(view report; "
                                                    r"tables acknowledged"):
        open_storage(postgres_url)


def test_a_service_schema_other_than_public_is_its_own(postgres_url: str) -> None:
    """With ``search_path`` naming another schema, that schema is the service's: it is
    not foreign, its tables are made there, and ``public`` (empty) is not listed."""
    _run(postgres_url, "CREATE SCHEMA segshuffle")
    url = f"{postgres_url}?options=-csearch_path%3Dsegshuffle"
    open_repository(url).close()
    open_repository(url).close()
    with psycopg.connect(postgres_url) as db:
        assert db.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'segshuffle' "
                          f"AND tablename = '{identity.IDENTITY_TABLE}'").fetchone() == (1,)


def test_tables_in_public_are_foreign_to_a_service_in_another_schema(
        postgres_url: str) -> None:
    _run(postgres_url, "CREATE SCHEMA segshuffle; CREATE TABLE public.notes (x integer)")
    with pytest.raises(DatabaseIdentityError, match=r"\(table public\.notes\)"):
        open_storage(f"{postgres_url}?options=-csearch_path%3Dsegshuffle")
