"""End to end over real HTTP between real processes: 2000 users, both rounds.

One campaign runs once per module (server and shuffler as uvicorn subprocesses,
the shuffler talking to the server through a recording proxy, the users
connecting from 127.0.0.2 so that their address is recognisable), then:

- every estimate is within 4 standard errors of the truth;
- the server's decoded counts equal an offline recomputation from the plaintexts
  the users sent, and so do both level histograms;
- nothing that identifies a user reaches the server: its database, its log and
  the requests it received contain no user token and no user address, the chunks
  carry nothing but ciphertexts, all of one length, and no arrival order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population
from segshuffle.wire.models import CIPHERTEXT_LENGTH, PublishedParameters, Results, b64url_decode

from .test_e2e_support import RecordingProxy, decoded_counts, proxied_stack, run_rounds

pytestmark = pytest.mark.slow  # about a minute: 2000 users over HTTP (still run by default)

USERS = 2000
ITEMS = 24
SET_SIZE = 3
LEVELS = [0.5, 1.0, 2.0]
SHARES = [0.3, 0.4, 0.3]
USER_ADDRESS = "127.0.0.2"


@dataclass
class Run:
    stack: LocalStack
    proxy: RecordingProxy
    population: Population
    results: Results
    parameters: PublishedParameters
    tokens: list[str]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    rng = np.random.default_rng(11)
    # skewed item popularity, 1..5 distinct items per user (fitted to s = 3 by the clients)
    weights = 1.0 / np.arange(1, ITEMS + 1)
    weights /= weights.sum()
    sets = [list(rng.choice(ITEMS, size=int(rng.integers(1, 6)), replace=False, p=weights))
            for _ in range(USERS)]
    with proxied_stack(tmp_path_factory.mktemp("e2e"), min_users=50) as (stack, proxy):
        stack.create_campaign({"id": "e2e", "domain_size": ITEMS, "set_size": SET_SIZE,
                               "levels": LEVELS, "min_users": 100, "delta": 1e-5})
        population = Population.with_shares(stack.shuffler_url, "e2e", sets,
                                            SHARES, seed=3, local_address=USER_ADDRESS,
                                            server_key=stack.server_key,
                                            invitations=stack.invitations("e2e", len(sets)))
        run_rounds(population, 1)
        stack.release("e2e", 1)
        run_rounds(population, 2)
        stack.release("e2e", 2)
        results = stack.results("e2e")
        parameters = stack.campaign("e2e").parameters
        assert parameters is not None
        tokens = [c.session.token for c in population._clients if c.session.token]
        yield Run(stack, proxy, population, results, parameters, tokens)


def test_all_users_took_part_in_both_rounds(run: Run) -> None:
    assert run.population.errors() == []
    assert run.results.privacy.users == USERS
    assert run.results.privacy.round2_users == USERS
    assert len(run.tokens) == USERS and len(set(run.tokens)) == USERS


def test_estimates_within_four_standard_errors(run: Run) -> None:
    d = run.parameters.privacy_domain_size
    holders = np.zeros(d)
    for user in run.population.users:
        assert user.round2 is not None
        holders[list(user.round2.items)] += 1
    truth = holders / USERS
    entries = sorted(list(run.results.items) + list(run.results.padding), key=lambda e: e.id)
    assert len(entries) == d == ITEMS + SET_SIZE
    for entry, w in zip(entries, truth, strict=True):
        assert entry.estimate is not None and entry.standard_error is not None
        assert abs(entry.estimate - w) <= 4 * entry.standard_error, (entry, w)
    # and the guarantee that was published holds for every level
    for k, level in enumerate(LEVELS):
        eps = run.parameters.epsilons[k]
        assert eps is not None and eps <= level * (1 + 1e-9)


def test_decoded_counts_equal_offline_recount(run: Run) -> None:
    d = run.parameters.privacy_domain_size
    expected = run.population.sent_item_counts(d)
    assert decoded_counts(run.results, run.parameters).tolist() == expected.tolist()
    assert run.results.dropped_messages == 0
    levels1 = run.population.sent_level_counts(len(LEVELS), 1)
    levels2 = run.population.sent_level_counts(len(LEVELS), 2)
    assert [lv.users_round1 for lv in run.results.privacy.levels] == levels1.tolist()
    assert [lv.users_round2 for lv in run.results.privacy.levels] == levels2.tolist()
    # every user sent exactly s + ceil(m) data slots, null or not
    slots = {len(u.round2.slots) for u in run.population.users if u.round2 is not None}
    assert slots == {SET_SIZE + run.parameters.blanket_slots}


def _server_files(stack: LocalStack) -> bytes:
    data = b""
    for path in sorted(stack.directory.iterdir()):
        if path.is_file() and path.name.startswith("server"):
            data += path.read_bytes()
    return data


def test_server_sees_no_user_identifier(run: Run) -> None:
    stack = run.stack
    server_bytes = _server_files(stack)  # database, WAL and log
    shuffler_log = stack.log_path("shuffler").read_bytes()
    assert server_bytes and shuffler_log
    for token in run.tokens:
        encoded = token.encode()
        assert encoded not in server_bytes
        assert encoded not in shuffler_log
    assert USER_ADDRESS.encode() not in server_bytes
    assert USER_ADDRESS.encode() not in shuffler_log
    for request in run.proxy.requests:
        raw = json.dumps(request.headers).encode() + request.path.encode() + request.body
        assert USER_ADDRESS.encode() not in raw
        assert not any(t.encode() in raw for t in run.tokens[:200])
        assert not {k.lower() for k in request.headers} & {"x-forwarded-for", "forwarded",
                                                          "x-real-ip", "cookie"}


def test_forwarded_batches_hold_only_uniform_ciphertexts(run: Run) -> None:
    chunks = [r for r in run.proxy.requests if r.method == "PUT"]
    assert chunks, "the shuffler forwarded nothing through the proxy"
    lengths: set[int] = set()
    per_round: dict[tuple[str, str], int] = {}
    for request in chunks:
        body = json.loads(request.body)
        assert set(body) == {"chunk_index", "chunk_count", "stream", "ciphertexts"}
        for text in body["ciphertexts"]:
            lengths.add(len(b64url_decode(text)))
        round_number = request.path.split("/rounds/")[1].split("/")[0]
        key = (round_number, body["stream"])
        per_round[key] = per_round.get(key, 0) + len(body["ciphertexts"])
    assert lengths == {CIPHERTEXT_LENGTH}
    messages = SET_SIZE + run.parameters.blanket_slots
    assert per_round == {("1", "levels"): USERS, ("2", "levels"): USERS,
                         ("2", "data"): USERS * messages}


def test_release_order_is_independent_of_arrival_order(run: Run) -> None:
    # Round 1's level stream as the server received it, against the order in which the
    # shuffler accepted the submissions: the rank correlation of a uniform permutation
    # has standard deviation 1/sqrt(n - 1) ~ 0.022, so |rho| < 0.11 is a 5-sigma check.
    bodies = [json.loads(r.body) for r in run.proxy.requests
              if r.method == "PUT" and "/rounds/1/" in r.path]
    released = [c for b in sorted(bodies, key=lambda b: b["chunk_index"])
                for c in b["ciphertexts"]]
    position = {c: i for i, c in enumerate(released)}
    assert len(position) == USERS
    pairs = [(u.finished[1], position[u.round1.level_ciphertext])
             for u in run.population.users if u.round1 is not None]
    arrival, released_at = (np.array(v, dtype=float) for v in zip(*pairs, strict=True))
    rho = stats.spearmanr(arrival, released_at).statistic
    assert abs(rho) < 0.11, rho


def test_storage_files_exist(run: Run) -> None:
    assert Path(run.stack.database_path("server")).exists()
    assert Path(run.stack.database_path("shuffler")).exists()
