"""A fresh PostgreSQL database per test, for the services' PostgreSQL backend.

The tests reach a PostgreSQL server through ``SEGSHUFFLE_TEST_POSTGRES_URL`` (a URL of a
role that may create databases; ``.ci/postgres`` installs, starts and prepares one and
``.ci/run`` exports the URL). Without it these tests are skipped, except under CI
(``CI=true``), where a missing server is a failure rather than a silent skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

URL_VARIABLE = "SEGSHUFFLE_TEST_POSTGRES_URL"


def server_url() -> str:
    """The configured server's URL, or skip (fail under CI) when there is none."""
    url = os.environ.get(URL_VARIABLE, "")
    if not url:
        message = f"no PostgreSQL server for the tests: set {URL_VARIABLE} (.ci/postgres)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return url


def database_url(server: str, name: str) -> str:
    """``server``'s URL with its database name replaced by ``name``."""
    base, _, query = server.partition("?")
    scheme, _, rest = base.partition("://")
    authority = rest.split("/", 1)[0]
    return f"{scheme}://{authority}/{name}" + (f"?{query}" if query else "")


@contextmanager
def fresh_database(prefix: str = "segshuffle_test") -> Iterator[str]:
    """Create an empty database, yield its URL, and drop it afterwards (closing whatever
    connections the test left open)."""
    import psycopg

    server = server_url()
    name = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(server, name)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of a fresh, empty PostgreSQL database, dropped after the test."""
    with fresh_database() as url:
        yield url
