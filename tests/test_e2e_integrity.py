"""Count integrity over real processes: with lambda = 1 and m = 0 (insecure server flag),
every user holding one unique item, every decoded count is exactly 1."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from segshuffle.client import VerificationError
from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population

from .test_e2e_support import decoded_counts, run_rounds

pytestmark = pytest.mark.slow  # real service processes end to end

USERS = 300


def test_every_count_is_exactly_one(tmp_path: Path) -> None:
    with LocalStack(tmp_path, min_users=2, allow_insecure=True) as stack:
        stack.create_campaign({
            "id": "integrity", "domain_size": USERS, "set_size": 1, "levels": [1.0],
            "min_users": USERS, "insecure_parameters": {"m": 0.0, "lambdas": [1.0]},
        })
        sets = [[i] for i in range(USERS)]
        population = Population(stack.shuffler_url, "integrity", sets,
                                [0] * USERS, seed=1, allow_insecure=True,
                                server_key=stack.server_key,
                                invitations=stack.invitations("integrity", USERS))
        run_rounds(population, 1)
        stack.release("integrity", 1)
        parameters = stack.campaign("integrity").parameters
        assert parameters is not None and parameters.insecure
        assert (parameters.m, parameters.lambdas, parameters.messages_per_user) == (0.0, [1.0], 1)

        # a client that does not opt in refuses these unaccounted parameters
        careful = Population(stack.shuffler_url, "integrity", [[0]], [0],
                             server_key=stack.server_key,
                             invitations=stack.invitations("integrity", 1))

        async def refused() -> None:
            async with careful:
                client = careful._clients[0]
                with pytest.raises(VerificationError, match="insecure") as refused:
                    await client.campaign()  # already in round 1, before its level is sent
                assert refused.value.check == "insecure_parameters"

        asyncio.run(refused())

        run_rounds(population, 2)
        stack.release("integrity", 2)
        results = stack.results("integrity")
        counts = decoded_counts(results, parameters)
        assert counts[:USERS].tolist() == [1] * USERS  # every real item exactly once
        assert counts[USERS:].tolist() == [0]  # the padding item: nobody needed it
        assert results.dropped_messages == 0
        assert results.privacy.round2_users == USERS
