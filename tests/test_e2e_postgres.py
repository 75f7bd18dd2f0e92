"""One whole campaign with both services on PostgreSQL, over real HTTP between real
processes: the decoded counts equal an offline recomputation from what the users sent,
exactly as on SQLite, and both databases end the campaign holding no message.

Needs ``SEGSHUFFLE_TEST_POSTGRES_URL`` (``.ci/postgres``); skipped without it, failed
without it under CI.
"""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population

from .postgres_support import fresh_database
from .test_e2e_support import decoded_counts, run_rounds

pytestmark = pytest.mark.slow

USERS = 300
ITEMS = 12


def test_a_campaign_on_postgresql(tmp_path) -> None:
    rng = np.random.default_rng(5)
    sets = [list(rng.choice(ITEMS, size=int(rng.integers(1, 4)), replace=False))
            for _ in range(USERS)]
    with fresh_database() as server_db, fresh_database() as shuffler_db:
        server_env = {"SEGSHUFFLE_SERVER_DATABASE": server_db,
                      "SEGSHUFFLE_SERVER_KEY_DIR": str(tmp_path / "server-keys")}
        shuffler_env = {"SEGSHUFFLE_SHUFFLER_DATABASE": shuffler_db,
                        "SEGSHUFFLE_SHUFFLER_KEY_DIRECTORY": str(tmp_path / "round-keys")}
        with LocalStack(tmp_path / "stack", min_users=20, server_env=server_env,
                        shuffler_env=shuffler_env) as stack:
            stack.create_campaign({"id": "pg", "domain_size": ITEMS, "set_size": 2,
                                   "levels": [0.5, 1.0, 2.0], "min_users": 50,
                                   "delta": 1e-5})
            population = Population.with_shares(
                stack.shuffler_url, "pg", sets, [0.3, 0.4, 0.3], seed=2,
                server_key=stack.server_key, invitations=stack.invitations("pg", USERS))
            run_rounds(population, 1)
            stack.release("pg", 1)
            run_rounds(population, 2)
            stack.release("pg", 2)
            results = stack.results("pg")
            parameters = stack.campaign("pg").parameters
            assert parameters is not None
            assert population.errors() == []
            assert results.privacy.users == USERS
            expected = population.sent_item_counts(parameters.privacy_domain_size)
            assert decoded_counts(results, parameters).tolist() == expected.tolist()
            assert results.dropped_messages == 0
            assert not list((tmp_path / "stack").glob("*.sqlite3"))  # nothing fell back
        with psycopg.connect(shuffler_db) as db:
            assert db.execute("SELECT count(*) FROM pending").fetchone() == (0,)
            assert db.execute("SELECT count(*) FROM participations").fetchone() == (0,)
        with psycopg.connect(server_db) as db:
            phase = db.execute("SELECT phase FROM campaigns WHERE id = 'pg'").fetchone()
            assert phase == ("done",)
