"""What a request costs the shuffler's PostgreSQL storage (services/shuffler/storage_postgres.py):
the calls of the request path are one round trip each, and the lock waits of statements
sent on their own are bounded by the connections' ``lock_timeout`` (a session setting
made once per connection, services/postgres_base.py) like those of transactions.

Round trips are counted at ``psycopg.Connection.wait``, which every statement and every
``BEGIN``/``COMMIT`` of a connection goes through.
"""

# ruff: noqa: F811  (the imported ``postgres_url`` fixture is a parameter of each test)

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from segshuffle.services.postgres_base import lock_timeout_setting
from segshuffle.services.shuffler.storage_api import (
    InvitationUsedError,
    StoredMessage,
    TokenTakenError,
)
from segshuffle.services.shuffler.storage_postgres import PostgresStorage

from .postgres_support import postgres_url  # noqa: F401  (the fixture)

WAIT = 60.0


@contextmanager
def storage_on(url: str, **options: Any) -> Iterator[PostgresStorage]:
    storage = PostgresStorage(url, pool_size=2, **options)
    try:
        yield storage
    finally:
        storage.close()


def round_trips(monkeypatch: pytest.MonkeyPatch, call: Callable[[], Any]) -> int:
    """How many times ``call`` waited for the database (round trips of its connections)."""
    waits = 0
    original = psycopg.Connection.wait

    def counting(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        nonlocal waits
        waits += 1
        return original(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Connection, "wait", counting)
        call()
    return waits


def test_the_request_path_is_one_round_trip_per_call(postgres_url: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Enrollment (five round trips before: BEGIN, the lock timeout, two inserts, COMMIT),
    the token lookup of a submission and the submission itself: one each."""
    with storage_on(postgres_url) as storage:
        for _ in range(6):  # past psycopg's prepare threshold: prepared statements from here
            storage.add_token_for_invitation("c", secrets.token_bytes(32),
                                             secrets.token_bytes(32), 10**10)
        token = secrets.token_bytes(32)
        assert round_trips(monkeypatch, lambda: storage.add_token_for_invitation(
            "c", token, secrets.token_bytes(32), 10**10)) == 1
        assert round_trips(monkeypatch, lambda: storage.token_campaign(token)) == 1
        messages = [StoredMessage("levels", secrets.token_bytes(16), b"sealed")]
        assert round_trips(monkeypatch, lambda: storage.submit("c", 1, token, messages)) == 1
        assert storage.token_campaign(token) == "c" and storage.participants("c", 1) == 1


def test_pooled_connections_carry_the_lock_timeout(postgres_url: str) -> None:
    with storage_on(postgres_url, lock_timeout=2.5) as storage:
        with storage._connection() as db:
            row = db.execute("SELECT current_setting('lock_timeout')").fetchone()
        assert row == ("2500ms",)
        assert storage._fetch_one("SHOW lock_timeout", ()) == ("2500ms",)
    assert lock_timeout_setting(0.0001) == "1ms" and lock_timeout_setting(30) == "30000ms"


def test_an_enrollment_waiting_for_a_lock_fails_after_the_lock_timeout(
        postgres_url: str) -> None:
    """An enrollment is one statement on its own (no transaction setting its own timeout):
    waiting for another replica's uncommitted use of the same invitation, it fails after
    ``lock_timeout`` with :class:`psycopg.errors.LockNotAvailable` and records nothing;
    once that use commits, the invitation is refused as used."""
    invitation = secrets.token_bytes(32)
    with storage_on(postgres_url, lock_timeout=0.3) as storage, \
            psycopg.connect(postgres_url) as holder:
        holder.execute("INSERT INTO used_invitations (invitation_hash, expires) "
                       "VALUES (%s, 10000000000)", (invitation,))
        started = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable):
            storage.add_token_for_invitation("c", b"t" * 32, invitation, 10**10)
        assert 0.25 <= time.monotonic() - started < 10
        assert storage.token_campaign(b"t" * 32) is None
        holder.commit()
        with pytest.raises(InvitationUsedError):
            storage.add_token_for_invitation("c", b"t" * 32, invitation, 10**10)
        assert storage.token_campaign(b"t" * 32) is None


def test_an_enrollment_waits_for_a_use_that_rolls_back_and_then_succeeds(
        postgres_url: str) -> None:
    invitation = secrets.token_bytes(32)
    with storage_on(postgres_url) as storage, psycopg.connect(postgres_url) as holder, \
            ThreadPoolExecutor(1) as pool:
        holder.execute("INSERT INTO used_invitations (invitation_hash, expires) "
                       "VALUES (%s, 10000000000)", (invitation,))
        enrolling = pool.submit(storage.add_token_for_invitation, "c", b"t" * 32,
                                invitation, 10**10)
        time.sleep(0.3)
        assert not enrolling.done()  # waits for the holder's row
        holder.rollback()
        enrolling.result(timeout=WAIT)
        assert storage.token_campaign(b"t" * 32) == "c"


def test_a_token_hash_recorded_twice_leaves_the_invitation_unused(postgres_url: str) -> None:
    with storage_on(postgres_url) as storage:
        storage.add_token("c", b"t" * 32)
        with pytest.raises(TokenTakenError, match="already enrolled"):
            storage.add_token_for_invitation("c", b"t" * 32, b"i" * 32, 10**10)
        storage.add_token_for_invitation("c", b"u" * 32, b"i" * 32, 10**10)  # not used up
        assert storage.token_campaign(b"u" * 32) == "c"
        with pytest.raises(TokenTakenError, match="already enrolled"):
            storage.add_token("d", b"u" * 32)
