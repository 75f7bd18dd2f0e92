"""Opt-in: build the images, bring the compose deployment up, drive it, restart it.

Enabled by ``SEGSHUFFLE_DOCKER_TESTS=1`` (needs the Docker engine, docker compose and the
prerequisites of deploy/build-images.sh, which ``deploy/build-images.sh --check`` checks).
With the base images cached it takes about two minutes: the wheelhouse, a cached
``docker build``, ``up``, a 300-user load test through both rounds, then ``down`` and
``up`` again to check that campaigns survive on the named volumes.  It uses a
project name and host ports of its own, so a running deployment is left alone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .compose_support import compose_command

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("SEGSHUFFLE_DOCKER_TESTS") != "1",
                       reason="set SEGSHUFFLE_DOCKER_TESTS=1 to build and run the containers"),
]

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "deploy" / "compose.yaml"




def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _wait_ready(urls: list[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(_ready(url) for url in urls):
        if time.monotonic() > deadline:
            raise AssertionError(f"not ready after {timeout} s: {urls}")
        time.sleep(1.0)


class Deployment:
    """One compose project of the deployment, on free loopback ports."""

    def __init__(self, tmp: Path) -> None:
        self.command = compose_command()
        self.project = f"segshuffle-test-{os.getpid()}"
        self.env_file = tmp / "deploy.env"
        subprocess.run([str(REPO / "deploy" / "init-secrets.sh")], check=True,
                       env={**os.environ, "SEGSHUFFLE_ENV_FILE": str(self.env_file)})
        self.server_port, self.shuffler_port = _free_port(), _free_port()
        # the load test's users share one source address: per-source rate limits off
        self.env = {**os.environ,
                    "SEGSHUFFLE_SERVER_PUBLISH_PORT": str(self.server_port),
                    "SEGSHUFFLE_SHUFFLER_PUBLISH_PORT": str(self.shuffler_port),
                    "SEGSHUFFLE_SHUFFLER_ENROLL_RATE": "0",
                    "SEGSHUFFLE_SHUFFLER_SUBMIT_RATE": "0",
                    "SEGSHUFFLE_SHUFFLER_READ_RATE": "0"}
        self.server_url = f"http://127.0.0.1:{self.server_port}"
        self.shuffler_url = f"http://127.0.0.1:{self.shuffler_port}"

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.command, "--env-file", str(self.env_file),
                               "-p", self.project, "-f", str(COMPOSE_FILE), *args],
                              env=self.env, text=True, capture_output=True, check=check)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    build = subprocess.run([str(REPO / "deploy" / "build-images.sh")], text=True,
                           capture_output=True)
    assert build.returncode == 0, build.stderr[-3000:]
    deployment = Deployment(tmp_path_factory.mktemp("deploy"))
    try:
        deployment.compose("up", "-d")
        _wait_ready([deployment.server_url, deployment.shuffler_url])
        yield deployment
    finally:
        logs = deployment.compose("logs", "--no-color", check=False).stdout
        sys.stderr.write(logs[-4000:])
        deployment.compose("down", "-v", "--remove-orphans", check=False)


def test_compose_deployment_runs_both_rounds_and_keeps_state(deployment: Deployment) -> None:
    # Both containers report healthy (the healthcheck probes /readyz inside them).
    deadline = time.monotonic() + 60
    while True:
        listing = deployment.compose("ps").stdout
        if listing.count("healthy") >= 2 and "unhealthy" not in listing:
            break
        assert time.monotonic() < deadline, listing
        time.sleep(2)

    result = subprocess.run(
        [sys.executable, str(REPO / "loadtest" / "loadtest.py"), "--users", "300",
         "--repeats", "1", "--json", "--seed", "7", "--max-seconds", "600",
         "--server-url", deployment.server_url, "--shuffler-url", deployment.shuffler_url,
         "--env-file", str(deployment.env_file)],
        text=True, capture_output=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    (run,) = report["runs"]
    assert run["round1_submissions_per_s"] > 0 and run["round2_submissions_per_s"] > 0
    assert run["mse"] < 0.05  # 300 users, d = 64: a sanity bound, not a precision claim

    # Tokens are enforced: the admin API refuses a wrong token with a problem document.
    request = urllib.request.Request(
        deployment.server_url + "/v1/campaigns", data=b"{}", method="POST",
        headers={"Authorization": "Bearer wrong-token-wrong-token",
                 "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code in (401, 403)
    assert refused.value.headers["Content-Type"].startswith("application/problem+json")

    # Enrollment needs an invitation (the default deployment admits no self-enrolled users).
    admin = dict(line.split("=", 1) for line in deployment.env_file.read_text().splitlines()
                 if line and not line.startswith("#"))["SEGSHUFFLE_ADMIN_TOKEN"]
    body = json.dumps({"id": "sybil", "domain_size": 4, "set_size": 1, "levels": [1.0],
                       "min_users": 10}).encode()
    urllib.request.urlopen(urllib.request.Request(
        deployment.server_url + "/v1/campaigns", data=body, method="POST",
        headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"}),
        timeout=10)
    request = urllib.request.Request(
        f"{deployment.shuffler_url}/v1/campaigns/sybil/enrollments", data=b"{}",
        method="POST", headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
    assert json.loads(refused.value.read())["type"].endswith(":invitation-required")
    (campaign,) = report["campaigns"]

    # The campaign survives down + up (named volumes): the server still serves its view.
    deployment.compose("down")
    deployment.compose("up", "-d")
    _wait_ready([deployment.server_url, deployment.shuffler_url])
    with urllib.request.urlopen(f"{deployment.server_url}/v1/campaigns/{campaign}",
                                timeout=10) as response:
        view = json.loads(response.read())
    assert view["phase"] == "done"
