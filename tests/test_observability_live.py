"""Observability of real ``segshuffle serve`` processes: ``/metrics`` over HTTP on both
services moves with submissions and chunks, and the log files are JSON lines carrying the
request id the client sent, with no token or address."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from segshuffle.client import Client
from segshuffle.testing.localstack import LocalStack

pytestmark = pytest.mark.slow  # both services as real processes

CID = "live-metrics-9c1"
USERS = 3


def metric(text: str, name: str, **labels: str) -> float:
    """The value of sample ``name`` with exactly ``labels`` in a Prometheus exposition."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("observability"), min_users=2) as running:
        running.create_campaign({"id": CID, "domain_size": 4, "set_size": 1,
                                 "levels": [1.0, 2.0], "min_users": USERS})
        yield running


def test_metrics_and_json_logs_of_real_processes(stack: LocalStack) -> None:
    with httpx.Client(timeout=30) as http:
        before = http.get(f"{stack.shuffler_url}/metrics")
        assert before.status_code == 200
        assert before.headers["content-type"].startswith("text/plain")
        assert metric(before.text, "segshuffle_shuffler_submissions_total", round="1") == 0
        users = [Client(stack.shuffler_url, CID, server_key=stack.server_key,
                         policy=stack.client_policy())
                 for _ in range(USERS)]
        try:
            invitations = stack.invitations(CID, USERS)
            sent = []
            for index, user in enumerate(users):
                user.campaign()
                user.enroll(invitations[index])
                sent.append(user.submit_level(index % 2).level_ciphertext)
            tokens = [user.session.token for user in users]
        finally:
            for user in users:
                user.close()
        stack.release(CID, 1)
        traced = http.get(f"{stack.shuffler_url}/v1/campaigns/{CID}/rounds/1",
                          headers={"X-Request-ID": "trace-42.live"})
        assert traced.headers["x-request-id"] == "trace-42.live"
        shuffler = http.get(f"{stack.shuffler_url}/metrics").text
        server = http.get(f"{stack.server_url}/metrics").text
        for url in (stack.server_url, stack.shuffler_url):
            assert http.get(f"{url}/readyz").json()["version"]
    assert metric(shuffler, "segshuffle_shuffler_submissions_total", round="1") == USERS
    acknowledged = metric(shuffler, "segshuffle_shuffler_chunks_acknowledged_total", round="1")
    assert acknowledged >= 1
    assert metric(server, "segshuffle_server_chunks_stored_total", round="1",
                  stream="levels") == acknowledged
    assert metric(server, "segshuffle_server_messages_accepted_total", round="1",
                  stream="levels") == USERS
    secrets = [*tokens, *sent, stack.operator_token, stack.shuffler_token, CID]
    for text in (shuffler, server):
        assert not any(secret in text for secret in secrets)
    logs = {service: Path(stack.log_path(service)).read_text()
            for service in ("server", "shuffler")}
    for service, text in logs.items():
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        assert lines and all({"ts", "level", "logger", "msg"} <= line.keys() for line in lines)
        assert any(line.get("request_id") for line in lines), service
        assert not any(secret in text for secret in secrets[:-1]), service
        assert "127.0.0.1:" not in text.replace(f"127.0.0.1:{stack.ports[service]}", "")
    traced_lines = [json.loads(line) for line in logs["shuffler"].splitlines()
                    if "trace-42.live" in line]
    assert [line["msg"].split()[:3] for line in traced_lines] == [
        ["GET", "/v1/campaigns/{campaign_id}/rounds/{round_number}", "200"]]
