"""A round's completion is a durable job: answered at once, computed once, resumed after a
restart (the server app through TestClient; the storage contract is in
tests/test_storage_contract.py)."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from segshuffle.services.server import create_app, service
from segshuffle.services.server.backends import open_repository

from .test_server_support import ADMIN, SHUFFLER, Sealer, complete_round, deliver, make_settings

LEVELS = [0, 1, 2, 1, 0, 2, 1, 1] * 5


def _settings(tmp_path, **changes):
    """A server whose campaigns may fix their parameters (the optimizer's own speed is not
    what these tests measure: they wrap the step that runs it)."""
    return make_settings(tmp_path, allow_insecure_parameters=True, **changes)


def _create(client: TestClient, campaign_id: str) -> dict:
    response = client.post("/v1/campaigns", headers=ADMIN, json={
        "id": campaign_id, "domain_size": 8, "set_size": 2, "levels": [0.5, 1.0, 4.0],
        "min_users": 20, "insecure_parameters": {"m": 1, "lambdas": [0.5, 0.5, 1]}})
    assert response.status_code == 201, response.text
    return response.json()


class _SlowOptimizer:
    """publish_parameters made slow and counted: the work a completion must do once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0
        self.lock = threading.Lock()
        self.original = service.publish_parameters

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.calls += 1
        time.sleep(self.seconds)
        return self.original(*args, **kwargs)


def _complete_url(campaign_id: str, round_: int, batch_id: str) -> str:
    return f"/v1/campaigns/{campaign_id}/rounds/{round_}/batches/{batch_id}/complete"


def test_repeated_completion_requests_run_the_optimizer_once(tmp_path, monkeypatch) -> None:
    # Regression: every request computed the parameters itself, so a shuffler that gave up
    # waiting and asked again started a second optimizer beside the first.
    slow = _SlowOptimizer(1.5)
    monkeypatch.setattr(service, "publish_parameters", slow)
    app = create_app(_settings(tmp_path))
    with TestClient(app) as client:
        view = _create(client, "once")
        deliver(client, "once", 1, "r1", {"levels": Sealer(view, 1).levels(LEVELS)},
                chunk_size=10, complete=False)
        url = _complete_url("once", 1, "r1")
        complete_round(client, "once", 1, "r1", timeout=0.0)  # the first request
        started = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: client.post(url, headers=SHUFFLER), range(4)))
        assert time.monotonic() - started < 1.0  # answered at once, not after the work
        for answer in answers:
            assert answer.status_code in (200, 202), answer.text
        pending = [a for a in answers if a.status_code == 202]
        assert pending, "the work was done inside the requests"
        body = pending[0].json()
        assert body["state"] in ("waiting", "computing") and body["round"] == 1
        assert body["attempts"] <= 1 and pending[0].headers["retry-after"]
        final = complete_round(client, "once", 1, "r1", timeout=60.0)
        assert final.status_code == 200 and final.json()["phase"] == "round2"
        again = client.post(url, headers=SHUFFLER)
        assert again.status_code == 200 and again.json() == final.json()
        metrics = client.get("/metrics").text
    assert slow.calls == 1
    assert re.search(r'completion_computations_total\{round="1"\} 1\.0', metrics)


def test_a_job_claimed_by_a_dead_process_is_computed_again(tmp_path, monkeypatch) -> None:
    settings = _settings(tmp_path, completion_lease_seconds=1.0)
    app = create_app(settings)
    with TestClient(app) as client:
        view = _create(client, "dead")
        deliver(client, "dead", 1, "r1", {"levels": Sealer(view, 1).levels(LEVELS)},
                chunk_size=10, complete=False)
    # A process that requested and claimed the job, then died (its lease not renewed).
    repository = open_repository(settings.database)
    try:
        assert repository.request_completion("dead", 1, "r1") is not None
        claimed = repository.claim_completion("a-dead-process", 1.0)
        assert claimed is not None and claimed.attempts == 1
    finally:
        repository.close()
    with TestClient(create_app(settings)) as client:
        answer = client.post(_complete_url("dead", 1, "r1"), headers=SHUFFLER)
        assert answer.status_code == 202 and answer.json()["attempts"] >= 1
        final = complete_round(client, "dead", 1, "r1", timeout=60.0)
        assert final.status_code == 200 and final.json()["phase"] == "round2"
        assert client.get("/v1/campaigns/dead").json()["parameters"] is not None


def test_a_failed_computation_is_retried_and_reported(tmp_path, monkeypatch) -> None:
    failures = iter([RuntimeError("the disk is full")])
    original = service.publish_parameters

    def flaky(*args, **kwargs):
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return original(*args, **kwargs)

    monkeypatch.setattr(service, "publish_parameters", flaky)
    monkeypatch.setattr("segshuffle.services.server.completion.retry_delay", lambda _: 0.3)
    with TestClient(create_app(_settings(tmp_path))) as client:
        view = _create(client, "flaky")
        deliver(client, "flaky", 1, "r1", {"levels": Sealer(view, 1).levels(LEVELS)},
                chunk_size=10, complete=False)
        url = _complete_url("flaky", 1, "r1")
        seen_error = None
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            answer = client.post(url, headers=SHUFFLER)
            if answer.status_code == 200:
                break
            assert answer.status_code == 202, answer.text
            seen_error = answer.json()["last_error"] or seen_error
            time.sleep(0.05)
        assert answer.status_code == 200 and answer.json()["phase"] == "round2"
        assert seen_error is not None and "the disk is full" in seen_error


@pytest.mark.parametrize("phase_after", ["aborted"])
def test_an_aborted_campaign_leaves_no_job(tmp_path, monkeypatch, phase_after) -> None:
    slow = _SlowOptimizer(1.0)
    monkeypatch.setattr(service, "publish_parameters", slow)
    settings = _settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        view = _create(client, "gone")
        deliver(client, "gone", 1, "r1", {"levels": Sealer(view, 1).levels(LEVELS)},
                chunk_size=10, complete=False)
        assert client.post(_complete_url("gone", 1, "r1"), headers=SHUFFLER).status_code == 202
        aborted = client.post("/v1/campaigns/gone/abort", headers=ADMIN, json={"reason": "x"})
        assert aborted.status_code == 200, aborted.text
        time.sleep(1.5)
        assert client.get("/v1/campaigns/gone").json()["phase"] == phase_after
    repository = open_repository(settings.database)
    try:
        assert repository.completion_jobs() == []
    finally:
        repository.close()
