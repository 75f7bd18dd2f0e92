"""The server as a real uvicorn process on a loopback port: full flow, kill -9, restart, logs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from .test_server_support import ADMIN, ADMIN_TOKEN, SHUFFLER_TOKEN, Sealer, deliver

PORT_LINE = re.compile(r"server listening on port (\d+)")


class ServerProcess:
    """``python -m segshuffle.services.server`` with its settings in the environment."""

    def __init__(self, directory: Path, **env: str) -> None:
        self.log_path = directory / f"server-{time.monotonic_ns()}.log"
        environment = {
            **os.environ,
            "SEGSHUFFLE_SERVER_DATABASE": str(directory / "server.sqlite3"),
            "SEGSHUFFLE_SERVER_ADMIN_TOKEN": ADMIN_TOKEN,
            "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": SHUFFLER_TOKEN,
            "SEGSHUFFLE_SERVER_PORT": "0",
            "SEGSHUFFLE_SERVER_ALLOW_INSECURE_PARAMETERS": "true",
            "SEGSHUFFLE_SERVER_DECRYPT_WORKERS": "2",
            "SEGSHUFFLE_SERVER_PARALLEL_THRESHOLD": "40",
            **env,
        }
        self.log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "segshuffle.services.server"],
            env=environment, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = self._wait_for_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = PORT_LINE.search(self.log_path.read_text())
            if found:
                return int(found.group(1))
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.log_path.read_text()}")
            time.sleep(0.05)
        raise AssertionError("server did not start")

    def client(self) -> httpx.Client:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz").status_code == 200:
                    return httpx.Client(base_url=self.url, timeout=60)
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError("server not ready")

    def stop(self, sig: int = signal.SIGTERM) -> str:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)
        self.log.close()
        return self.log_path.read_text()


@pytest.fixture
def directory(tmp_path):
    return tmp_path


@pytest.mark.slow
def test_full_flow_across_a_kill_and_restart(directory):
    n, d, s = 60, 5, 1
    rng = np.random.default_rng(1)
    levels = rng.integers(0, 2, size=n).tolist()
    items = rng.integers(0, d, size=n).tolist()
    server = ServerProcess(directory)
    logs = []
    try:
        with server.client() as client:
            assert client.get("/livez").json()["status"] == "ok"
            assert client.get("/docs").status_code == 200
            assert "/v1/campaigns" in client.get("/openapi.json").json()["paths"]
            created = client.post("/v1/campaigns", headers=ADMIN, json={
                "id": "live", "domain_size": d, "set_size": s, "levels": [1, 2],
                "min_users": 20, "dropout_tolerance": 0.0,
                "insecure_parameters": {"m": 0, "lambdas": [1, 1]}})
            assert created.status_code == 201, created.text
            view = created.json()
            round1 = Sealer(view, 1).levels(levels)
            deliver(client, "live", 1, "r1", {"levels": round1}, chunk_size=45)
            view = client.get("/v1/campaigns/live").json()
            assert view["phase"] == "round2"
            sealer = Sealer(view, 2)
            round2 = {"levels": sealer.levels(levels), "data": sealer.slots(items)}
            # Part of round 2 arrives, then the process dies without any cleanup.
            deliver(client, "live", 2, "r2", {"levels": round2["levels"]}, chunk_size=45,
                    complete=False)
        logs.append(server.stop(signal.SIGKILL))

        server = ServerProcess(directory)
        with server.client() as client:
            assert client.get("/v1/campaigns/live").json() == view
            receipts = deliver(client, "live", 2, "r2", round2, chunk_size=45)
            assert all(r["duplicate"] for r in receipts[:2])  # levels chunks were kept
            results = client.get("/v1/campaigns/live/results", headers=ADMIN).json()
    finally:
        logs.append(server.stop())
    truth = np.bincount(items, minlength=d + s) / n
    assert [r["estimate"] for r in results["items"] + results["padding"]] == pytest.approx(truth)
    text = "\n".join(logs)
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    batch = "PUT /v1/campaigns/{campaign_id}/rounds/{round_number}/batches/{batch_id} 202 "
    assert any(line["msg"].startswith(batch) and line.get("request_id") for line in lines)
    assert not re.search(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", text), text
    assert ADMIN_TOKEN not in text and SHUFFLER_TOKEN not in text
    assert not any(c in text for c in round1 + round2["data"])


@pytest.mark.slow
def test_refuses_to_start_without_tokens(directory):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    environment["SEGSHUFFLE_SERVER_DATABASE"] = str(directory / "x.sqlite3")
    result = subprocess.run([sys.executable, "-m", "segshuffle.services.server"],
                            env=environment, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "ADMIN_TOKEN" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_concurrent_chunks_and_retries(directory):
    """Chunks of one batch arriving at once, each sent twice in parallel, count exactly once."""
    from concurrent.futures import ThreadPoolExecutor

    from .test_server_support import SHUFFLER, complete_round, decoded

    server = ServerProcess(directory, SEGSHUFFLE_SERVER_DECRYPT_WORKERS="1")
    try:
        with server.client() as client:
            view = client.post("/v1/campaigns", headers=ADMIN, json={
                "id": "busy", "domain_size": 3, "set_size": 1, "levels": [1, 2, 3],
                "min_users": 10}).json()
            levels = [i % 3 for i in range(240)]
            messages = Sealer(view, 1).levels(levels)
            parts = [messages[i:i + 20] for i in range(0, len(messages), 20)]
            url = "/v1/campaigns/busy/rounds/1/batches/many"

            def put(index: int) -> dict:
                response = client.put(url, headers=SHUFFLER, json={
                    "chunk_index": index, "chunk_count": len(parts), "stream": "levels",
                    "ciphertexts": parts[index]})
                assert response.status_code in (200, 202), response.text
                return response.json()

            with ThreadPoolExecutor(max_workers=8) as pool:
                receipts = list(pool.map(put, [i for i in range(len(parts)) for _ in (0, 1)]))
            assert sum(not r["duplicate"] for r in receipts) == len(parts)
            counted = [decoded(client, "busy", 1, "many", "levels", i) for i in range(len(parts))]
            assert sum(r["accepted"] for r in counted) == 240
            done = complete_round(client, "busy", 1, "many").json()
            assert done["streams"]["levels"]["accepted"] == 240
            parameters = client.get("/v1/campaigns/busy").json()["parameters"]
            assert parameters["users"] == 240
    finally:
        server.stop()
