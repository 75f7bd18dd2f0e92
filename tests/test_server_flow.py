"""End-to-end flows through the server app (TestClient): round 1, parameters, round 2, results."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from segshuffle.core.estimator import estimate_frequencies
from segshuffle.services.server import create_app
from segshuffle.wire.models import canonical_json

from .test_server_support import ADMIN, Sealer, deliver, make_settings

ITEMS = ["news", "sports", "weather", "tech", "health", "travel"]


def create(client, body, headers=ADMIN):
    response = client.post("/v1/campaigns", json=body, headers=headers)
    assert response.status_code == 201, response.text
    assert response.headers["location"] == f"/v1/campaigns/{body['id']}"
    return response.json()


def user_population(n, d, s, k, seed=3):
    rng = np.random.default_rng(seed)
    levels = rng.integers(0, k, size=n)
    sets = [sorted(rng.choice(d, size=rng.integers(1, s + 1), replace=False).tolist())
            for _ in range(n)]
    return levels.tolist(), sets


def test_insecure_campaign_counts_every_message_exactly(tmp_path):
    """lambda = 1, m = 0: every item is sent, so the estimates are the true shares."""
    app = create_app(make_settings(tmp_path, allow_insecure_parameters=True))
    n, s = 40, 2
    levels, sets = user_population(n, len(ITEMS), s, 2)
    with TestClient(app) as client:
        view = create(client, {"id": "exact", "items": ITEMS, "set_size": s, "levels": [1, 3],
                               "min_users": 10, "dropout_tolerance": 0.0,
                               "insecure_parameters": {"m": 0, "lambdas": [1, 1]}})
        assert view["phase"] == "round1" and view["parameters"] is None
        deliver(client, "exact", 1, "b1", {"levels": Sealer(view, 1).levels(levels)})
        view = client.get("/v1/campaigns/exact").json()
        parameters = view["parameters"]
        assert view["phase"] == "round2"
        assert parameters["m"] == 0 and parameters["lambdas"] == [1, 1]
        assert parameters["insecure"] is True
        assert parameters["epsilons"] == [None, None]  # lambda = 1 and no blanket: no privacy
        assert parameters["messages_per_user"] == s
        # Padding (docs/protocol.md section 2): fewer than s items get padding ids d, d+1.
        sealer = Sealer(view, 2)
        data, level_messages = [], []
        for level, items in zip(levels, sets, strict=True):
            padded = items + [len(ITEMS) + i for i in range(s - len(items))]
            data += sealer.slots(padded)
            level_messages += sealer.levels([level])
        done = deliver(client, "exact", 2, "b2", {"levels": level_messages, "data": data})[-1]
        assert done["phase"] == "done"
        assert done["streams"]["data"]["accepted"] == n * s
        results = client.get("/v1/campaigns/exact/results", headers=ADMIN).json()
    truth = np.zeros(len(ITEMS) + s)
    for items in sets:
        truth[items] += 1
        truth[len(ITEMS):len(ITEMS) + s - len(items)] += 1
    estimates = [row["estimate"] for row in results["items"] + results["padding"]]
    np.testing.assert_allclose(estimates, truth / n, atol=1e-12)
    assert [row["name"] for row in results["items"]] == ITEMS
    assert [row["id"] for row in results["padding"]] == [6, 7]
    assert math.isclose(sum(r["projected"] for r in results["items"] + results["padding"]), s)
    assert results["privacy"]["round2_users"] == n
    assert results["dropped_messages"] == 0


@pytest.mark.slow  # over 8 s: the fast tier stays within 3 minutes
def test_optimized_campaign_publishes_hashed_parameters_and_decodes(tmp_path):
    app = create_app(make_settings(tmp_path))
    n, d, s = 120, 8, 2
    levels, sets = user_population(n, d, s, 3, seed=11)
    rng = np.random.default_rng(5)
    with TestClient(app) as client:
        view = create(client, {"id": "opt", "domain_size": d, "set_size": s,
                               "levels": [0.5, 1.0, 4.0], "min_users": 50})
        config_hash = hashlib.sha256(canonical_json(view["config"])).hexdigest()
        assert view["config_hash"] == config_hash
        completion = deliver(client, "opt", 1, "r1", {"levels": Sealer(view, 1).levels(levels)},
                             chunk_size=32)[-1]
        view = client.get("/v1/campaigns/opt").json()
        parameters = view["parameters"]
        assert completion["parameters_hash"] == view["parameters_hash"]
        assert view["parameters_hash"] == hashlib.sha256(canonical_json(parameters)).hexdigest()
        assert parameters["config_hash"] == config_hash
        assert parameters["key_id"] == view["key_id"] == view["hpke_config"]["key_id"]
        assert parameters["users"] == n
        assert parameters["accounting_users"] == math.ceil(0.9 * n)
        assert math.isclose(parameters["delta"], 0.01 / n)
        assert parameters["privacy_domain_size"] == d + s
        assert all(0 <= lam <= 1 for lam in parameters["lambdas"])
        assert parameters["lambdas"] == sorted(parameters["lambdas"])
        assert parameters["m"] > 0
        for level, eps in zip(parameters["levels"], parameters["epsilons"], strict=True):
            assert eps is not None and eps <= level * (1 + 1e-6)
        # Round 2 with fixed-size submissions: s item slots + ceil(m) blanket slots each.
        m, lambdas = parameters["m"], parameters["lambdas"]
        slots, gamma, domain = math.ceil(m), m / math.ceil(m), d + s
        sealer = Sealer(view, 2)
        data, level_messages, holders = [], [], np.zeros(domain)
        for level, items in zip(levels, sets, strict=True):
            padded = items + [d + i for i in range(s - len(items))]
            holders[padded] += 1
            values = [j if rng.random() < lambdas[level] else None for j in padded]
            values += [int(rng.integers(domain)) if rng.random() < gamma else None
                       for _ in range(slots)]
            assert len(values) == parameters["messages_per_user"]
            data += sealer.slots(values)
            level_messages += sealer.levels([level])
        deliver(client, "opt", 2, "r2", {"levels": level_messages, "data": data},
                chunk_size=100)
        results = client.get("/v1/campaigns/opt/results", headers=ADMIN).json()
    assert results["parameters_hash"] == view["parameters_hash"]
    rows = results["items"] + results["padding"]
    assert [r["id"] for r in rows] == list(range(domain))
    estimates = np.array([r["estimate"] for r in rows])
    errors = np.array([r["standard_error"] for r in rows])
    assert np.all(errors > 0)
    # Unbiased decoding: within 5 standard errors of the truth (a loose, fixed-seed check).
    assert np.all(np.abs(estimates - holders / n) < 5 * errors + 1e-9)
    privacy = results["privacy"]
    assert [row["level"] for row in privacy["levels"]] == [0.5, 1.0, 4.0]
    for row in privacy["levels"]:
        assert row["epsilon_lower"] <= row["epsilon_upper"] <= row["level"] * (1 + 1e-6)
    assert privacy["round2_users"] == n and privacy["accounting_users"] == math.ceil(0.9 * n)


def test_estimates_match_the_core_estimator(tmp_path):
    """The server's decoding is exactly estimate_frequencies on the decrypted counts."""
    app = create_app(make_settings(tmp_path, allow_insecure_parameters=True))
    with TestClient(app) as client:
        view = create(client, {"id": "core", "domain_size": 4, "set_size": 1, "levels": [1, 2],
                               "min_users": 4, "padding": False, "dropout_tolerance": 0.2,
                               "insecure_parameters": {"m": 1.5, "lambdas": [0.5, 0.75]}})
        deliver(client, "core", 1, "a", {"levels": Sealer(view, 1).levels([0, 0, 1, 1, 1])})
        view = client.get("/v1/campaigns/core").json()
        assert view["parameters"]["blanket_slots"] == 2
        sealer = Sealer(view, 2)
        values = [0, None, 3, 1, 1, None, 2, 2, 2, 3, None, None, 0, 0, 1]
        deliver(client, "core", 2, "b", {"levels": sealer.levels([0, 1, 1, 1]),
                                         "data": sealer.slots(values)})
        results = client.get("/v1/campaigns/core/results", headers=ADMIN).json()
    counts = np.bincount([v for v in values if v is not None], minlength=4)
    expected = estimate_frequencies(counts, [1, 3], [0.5, 0.75], 1.5)
    np.testing.assert_allclose([r["estimate"] for r in results["items"]], expected.values)
    np.testing.assert_allclose([r["standard_error"] for r in results["items"]],
                               expected.standard_errors)
    assert results["padding"] == []


def test_independent_campaign_publishes_its_geometry_and_decodes(tmp_path):
    """Independent blanket: one slot per item of the privacy domain (s + D messages per
    user), the same mean correction n2 m / D and the independent blanket variance."""
    app = create_app(make_settings(tmp_path, allow_insecure_parameters=True))
    with TestClient(app) as client:
        view = create(client, {"id": "ind", "domain_size": 4, "set_size": 1, "levels": [1, 2],
                               "min_users": 4, "dropout_tolerance": 0.2,
                               "blanket_mode": "independent",
                               "insecure_parameters": {"m": 1.5, "lambdas": [0.5, 0.75]}})
        assert view["config"]["blanket_mode"] == "independent"
        deliver(client, "ind", 1, "a", {"levels": Sealer(view, 1).levels([0, 0, 1, 1, 1])})
        view = client.get("/v1/campaigns/ind").json()
        parameters = view["parameters"]
        assert parameters["blanket_mode"] == "independent"
        assert parameters["privacy_domain_size"] == 5  # d + s padding ids
        assert parameters["blanket_slots"] == 5 and parameters["messages_per_user"] == 1 + 5
        sealer = Sealer(view, 2)
        values = [0, None, 3, 1, 4, None, 2, 2, 2, 3, None, None, 0, 0, 1, 4, None]
        deliver(client, "ind", 2, "b", {"levels": sealer.levels([0, 1, 1, 1]),
                                        "data": sealer.slots(values)})
        results = client.get("/v1/campaigns/ind/results", headers=ADMIN).json()
    counts = np.bincount([v for v in values if v is not None], minlength=5)
    expected = estimate_frequencies(counts, [1, 3], [0.5, 0.75], 1.5, mode="independent")
    rows = results["items"] + results["padding"]
    np.testing.assert_allclose([r["estimate"] for r in rows], expected.values)
    np.testing.assert_allclose([r["standard_error"] for r in rows], expected.standard_errors)
    slots = estimate_frequencies(counts, [1, 3], [0.5, 0.75], 1.5)
    assert not np.allclose(expected.standard_errors, slots.standard_errors)
    assert results["privacy"]["blanket_mode"] == "independent"
    assert results["privacy"]["messages_per_user"] == 6


@pytest.mark.slow  # over 8 s: the fast tier stays within 3 minutes
def test_level_privacy_debiases_the_histogram(tmp_path):
    app = create_app(make_settings(tmp_path))
    with TestClient(app) as client:
        view = create(client, {"id": "rr", "domain_size": 5, "set_size": 1, "levels": [1, 2],
                               "min_users": 10, "level_privacy": 1.0})
        assert view["config"]["level_privacy"] == 1.0
        deliver(client, "rr", 1, "x", {"levels": Sealer(view, 1).levels([0] * 30 + [1] * 10)})
        parameters = client.get("/v1/campaigns/rr").json()["parameters"]
    assert parameters["level_privacy"] == 1.0
    assert parameters["users"] == 40
    # The debiased histogram is rescaled to the 40 participants, whatever the clipping did.
    assert parameters["accounting_users"] == 36


def test_debiased_level_counts():
    from segshuffle.services.server.aggregation import level_counts
    from segshuffle.wire.models import CampaignCreate

    config = CampaignCreate.model_validate({
        "id": "rr", "domain_size": 5, "set_size": 1, "levels": [1, 2, 3], "min_users": 2,
        "level_privacy": 3.0}).to_config()
    e = math.exp(3.0)
    p, q = e / (e + 2), 1 / (e + 2)
    # Unclipped: n^_k = (o_k - n q) / (p - q), which already sums to n.
    counts = level_counts(config, [50, 30, 20])
    assert counts == pytest.approx([(o - 100 * q) / (p - q) for o in (50, 30, 20)])
    # Clipped at 0, then rescaled to the participants.
    counts = level_counts(config, [97, 3, 0])
    assert counts[2] == 0.0 and sum(counts) == pytest.approx(100)
    assert counts[0] > 97
    exact = level_counts(config.model_copy(update={"level_privacy": None}), [97, 3, 0])
    assert exact == [97.0, 3.0, 0.0]


def test_state_survives_a_restart(tmp_path):
    settings = make_settings(tmp_path, allow_insecure_parameters=True)
    body = {"id": "keep", "domain_size": 3, "set_size": 1, "levels": [1], "min_users": 3,
            "dropout_tolerance": 0.0, "insecure_parameters": {"m": 0, "lambdas": [1]}}
    with TestClient(create_app(settings)) as client:
        view = create(client, body)
        deliver(client, "keep", 1, "one", {"levels": Sealer(view, 1).levels([0, 0, 0])})
        before = client.get("/v1/campaigns/keep").json()
        # Half of round 2 arrives before the restart.
        sealer = Sealer(before, 2)
        level_messages = sealer.levels([0, 0, 0])
        deliver(client, "keep", 2, "two", {"levels": level_messages}, complete=False)
    with TestClient(create_app(settings)) as client:
        after = client.get("/v1/campaigns/keep").json()
        assert after == before
        assert json.dumps(after["hpke_config"]) == json.dumps(before["hpke_config"])
        deliver(client, "keep", 2, "two", {"data": sealer.slots([0, 1, 2])}, complete=False)
        # The shuffler resumes after a crash: it resends the same chunk, then completes.
        again = deliver(client, "keep", 2, "two", {"levels": level_messages})
        assert all(r.get("duplicate") for r in again[:-1])
        results = client.get("/v1/campaigns/keep/results", headers=ADMIN).json()
    assert [r["estimate"] for r in results["items"]] == pytest.approx([1 / 3] * 3)
