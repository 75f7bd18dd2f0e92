"""Opt-in: the compose deployment with the ``tls`` profile, one campaign over HTTPS.

Enabled by ``SEGSHUFFLE_DOCKER_TESTS=1`` like tests/test_deploy_docker.py, whose image
build and :class:`Deployment` it reuses: a separate compose project on free ports, with
the proxy (image ``segshuffle-proxy:bookworm``) in front of both services and the shuffler
reaching the server through it over https (``SEGSHUFFLE_SHUFFLER_UPSTREAM_URL``).  The
campaign is the one tests/test_tls.py runs against a local nginx, here against the
containers' published HTTPS ports with the CA that deploy/init-secrets.sh made.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from segshuffle.crypto.invitations import issuer_key_from_text, new_invitation, sign_invitation

from .test_deploy_docker import REPO, Deployment, _free_port, _wait_ready
from .test_tls import USERS, Proxy, run_campaign_over_https

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("SEGSHUFFLE_DOCKER_TESTS") != "1",
                       reason="set SEGSHUFFLE_DOCKER_TESTS=1 to build and run the containers"),
]


def _env_values(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines()
                if line and not line.startswith("#"))


def _wait_tls(ports: list[int], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    for port in ports:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, f"port {port} not open after {timeout}s"
                time.sleep(1.0)


@pytest.fixture(scope="module")
def tls_deployment(tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[tuple[Deployment, Proxy]]:
    build = subprocess.run([str(REPO / "deploy" / "build-images.sh")], text=True,
                           capture_output=True)
    assert build.returncode == 0, build.stderr[-3000:]
    deployment = Deployment(tmp_path_factory.mktemp("deploy-tls"))
    server_tls, shuffler_tls = _free_port(), _free_port()
    deployment.env.update({
        "SEGSHUFFLE_SERVER_TLS_PORT": str(server_tls),
        "SEGSHUFFLE_SHUFFLER_TLS_PORT": str(shuffler_tls),
        "SEGSHUFFLE_SHUFFLER_UPSTREAM_URL": "https://segshuffle-server:8443",
        "SEGSHUFFLE_SHUFFLER_UPSTREAM_CA_FILE": "/etc/segshuffle/tls/ca.pem",
        "SEGSHUFFLE_SHUFFLER_MIN_USERS": "2",  # the campaign has a handful of users
    })
    ca = Path(_env_values(deployment.env_file)["SEGSHUFFLE_TLS_DIR"]) / "ca.pem"
    try:
        deployment.compose("--profile", "tls", "up", "-d")
        _wait_ready([deployment.server_url, deployment.shuffler_url], timeout=180)
        _wait_tls([server_tls, shuffler_tls])
        yield deployment, Proxy(server_tls, shuffler_tls, ca)
    finally:
        logs = deployment.compose("--profile", "tls", "logs", "--no-color", check=False).stdout
        sys.stderr.write(logs[-4000:])
        deployment.compose("--profile", "tls", "down", "-v", "--remove-orphans", check=False)


def test_tls_profile_runs_a_campaign_over_https(
        tls_deployment: tuple[Deployment, Proxy], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    deployment, proxy = tls_deployment
    values = _env_values(deployment.env_file)
    issuer = issuer_key_from_text(values["SEGSHUFFLE_ISSUER_PRIVATE_KEY"])
    expires = int(time.time()) + 3600
    invitations = [sign_invitation(new_invitation("tls", expires), issuer)
                   for _ in range(USERS)]
    results = run_campaign_over_https(
        capsys, monkeypatch, tmp_path, proxy, admin_token=values["SEGSHUFFLE_ADMIN_TOKEN"],
        operator_token=values["SEGSHUFFLE_OPERATOR_TOKEN"], invitations=invitations)
    # The server's own loopback port gives the same results: they went through the proxy.
    direct = httpx.get(f"{deployment.server_url}/v1/campaigns/tls/results", timeout=10,
                       headers={"Authorization": f"Bearer {values['SEGSHUFFLE_ADMIN_TOKEN']}"})
    assert direct.status_code == 200 and direct.json() == results
    # Without the CA the shuffler's port refuses the client; plain HTTP is refused.
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(proxy.shuffler_url + "/livez", timeout=10)
    plain = httpx.get(f"http://127.0.0.1:{proxy.server_port}/livez", timeout=10)
    assert plain.status_code == 400
