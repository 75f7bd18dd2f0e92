"""HTTPS with a private CA: the proxy of deploy/tls/ in front of real services.

The slow test makes a CA and certificates with ``deploy/tls/make-certs.sh``, starts both
services on loopback (:class:`~segshuffle.testing.localstack.LocalStack`) with the
shuffler's server URL pointing at the proxy over https, renders the proxy configuration
of deploy/tls/ (the compose profile's files) with loopback upstreams, its own ports and
its own scratch directory, runs a real ``nginx`` on it, and runs one whole campaign
through the TLS ports only: ``segshuffle admin`` with ``--ca-file``, SDK users with
``ca_file=``, the shuffler's deliveries to the server.  A client without the CA is
refused with a certificate error, plain HTTP to a TLS port is refused.

nginx comes from Debian's ``nginx-light`` (``.ci/run`` installs it); without it the test
skips, except under ``CI=true``, where it fails.  It never touches a system nginx: own
configuration, pid file, temporary paths and free ports.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from segshuffle.cli.main import main
from segshuffle.client import AsyncClient, Client, ServiceError
from segshuffle.client.policy import ClientPolicy
from segshuffle.client.tls import ssl_context, trust
from segshuffle.core.rules import default_delta
from segshuffle.services.shuffler.upstream import ServerLink
from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.operator import OperatorClient

from .nginx_support import free_ports, nginx_binary, render_proxy, running_nginx

REPO = Path(__file__).resolve().parents[1]
TLS = REPO / "deploy" / "tls"
MAKE_CERTS = TLS / "make-certs.sh"
USERS = 6
#: What the SDK users accept: the campaign is for USERS users, below the SDK's default
#: floor, with the default delta rule's 0.01 / USERS.
POLICY = ClientPolicy(min_users=USERS, delta_ceiling=default_delta(USERS))
ITEMS = 5


# --- fast: the CA file is checked when a client is built ----------------------------------


def _certs(directory: Path) -> Path:
    """A CA and both certificates from deploy/tls/make-certs.sh in ``directory``."""
    result = subprocess.run([str(MAKE_CERTS), "--out", str(directory)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return directory


def test_make_certs_is_private_and_idempotent(tmp_path: Path) -> None:
    certs = _certs(tmp_path / "certs")
    for name in ("ca-key.pem", "server-key.pem", "shuffler-key.pem"):
        assert (certs / name).stat().st_mode & 0o777 == 0o600, name
    assert certs.stat().st_mode & 0o777 == 0o700
    before = {p.name: p.read_bytes() for p in certs.iterdir()}
    _certs(certs)
    assert {p.name: p.read_bytes() for p in certs.iterdir()} == before
    text = subprocess.run(["openssl", "x509", "-in", str(certs / "server.pem"), "-noout",
                           "-ext", "subjectAltName"], capture_output=True, text=True,
                          check=True).stdout
    assert "DNS:segshuffle-server" in text and "IP Address:127.0.0.1" in text
    context = ssl_context(certs / "ca.pem")
    assert context.verify_mode.name == "CERT_REQUIRED" and context.check_hostname


def test_an_unusable_ca_file_is_one_clear_error(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "missing.pem"
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    assert trust(None) is True and trust("") is True
    with pytest.raises(ValueError, match=f"cannot read the CA file {missing}"):
        ServerLink("https://server.example", "token", ca_file=str(missing))
    with pytest.raises(ValueError, match="holds no PEM certificate"):
        Client("https://shuffler.example", "c1", ca_file=garbage)
    with pytest.raises(ValueError, match="cannot read the CA file"):
        OperatorClient(server="https://server.example", ca_file=missing)
    monkeypatch.setenv("SEGSHUFFLE_ADMIN_TOKEN", "a" * 43)
    status = main(["admin", "campaign", "list", "--server", "https://127.0.0.1:9",
                   "--ca-file", str(missing)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "cannot read the CA file" in err
    monkeypatch.setenv("SEGSHUFFLE_CA_FILE", str(garbage))
    status = main(["admin", "signing-key", "--server", "https://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "holds no PEM certificate" in err


@pytest.mark.slow
def test_shuffler_refuses_to_start_with_a_missing_server_ca_file(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    env.update({"SEGSHUFFLE_SHUFFLER_SERVER_URL": "https://127.0.0.1:9",
                "SEGSHUFFLE_SHUFFLER_SERVER_TOKEN": "t" * 32,
                "SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN": "o" * 32,
                "SEGSHUFFLE_SHUFFLER_ENROLLMENT": "open",
                "SEGSHUFFLE_SHUFFLER_PORT": "0",
                "SEGSHUFFLE_SHUFFLER_DATABASE": str(tmp_path / "s.sqlite3"),
                "SEGSHUFFLE_SHUFFLER_SERVER_CA_FILE": str(tmp_path / "nope.pem")})
    result = subprocess.run([sys.executable, "-m", "segshuffle.cli.main", "serve", "shuffler"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("segshuffle: error: ") and "nope.pem" in last, result.stderr


# --- slow: a campaign through a real nginx ------------------------------------------------


@dataclass(frozen=True)
class Proxy:
    """Where the rendered proxy listens, and the CA that signed its certificates."""

    server_port: int
    shuffler_port: int
    ca_file: Path

    @property
    def server_url(self) -> str:
        return f"https://localhost:{self.server_port}"

    @property
    def shuffler_url(self) -> str:
        return f"https://localhost:{self.shuffler_port}"


@pytest.fixture
def tls_stack(tmp_path: Path) -> Iterator[tuple[LocalStack, Proxy]]:
    """Both services behind a real nginx; the shuffler reaches the server only through it."""
    nginx_binary()
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    certs = _certs(tmp_path / "certs")
    server_tls, shuffler_tls, shuffler_port = free_ports(3)
    stack = LocalStack(tmp_path / "stack", min_users=2, shuffler_env={
        "SEGSHUFFLE_SHUFFLER_SERVER_CA_FILE": str(certs / "ca.pem")})
    stack.upstream_url = f"https://localhost:{server_tls}"
    try:
        # The shuffler is ready only once it reaches the server, through the proxy, which
        # needs both upstream ports: the server first, the proxy, then the shuffler on a
        # port chosen here (LocalStack starts a service on the port it has on record).
        stack.start_service("server")
        stack.ports["shuffler"] = shuffler_port
        state = tmp_path / "nginx"
        conf = render_proxy(state, certs, server=stack.ports["server"],
                            shuffler=shuffler_port, server_tls=server_tls,
                            shuffler_tls=shuffler_tls)
        with running_nginx(conf, state, (server_tls, shuffler_tls)):
            stack.start_service("shuffler")
            yield stack, Proxy(server_tls, shuffler_tls, certs / "ca.pem")
    finally:
        stack.close()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


def run_campaign_over_https(capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path, proxy: Proxy, *,
                            admin_token: str, operator_token: str,
                            invitations: list[str]) -> dict[str, object]:
    """Campaign ``tls`` from creation to results through the proxy's HTTPS ports only
    (admin CLI with ``--ca-file``, sync and async SDK users with ``ca_file=``); returns
    the results document.  Also used by tests/test_deploy_tls_docker.py."""
    monkeypatch.setenv("SEGSHUFFLE_ADMIN_TOKEN", admin_token)
    monkeypatch.delenv("SEGSHUFFLE_CA_FILE", raising=False)
    operator_file = tmp_path / "operator.token"
    operator_file.write_text(operator_token)
    ca = ("--ca-file", str(proxy.ca_file))
    server = ("--server", proxy.server_url, *ca)
    shuffler = ("--shuffler", proxy.shuffler_url, *ca)
    server_key: str = json.loads(_cli(capsys, "admin", "signing-key", "--json",
                                      *server))["public_key"]
    created = json.loads(_cli(capsys, "admin", "campaign", "create", "--id", "tls",
                              "--domain-size", str(ITEMS), "--set-size", "2", "--levels",
                              "1,2", "--min-users", "6", "--dropout-tolerance", "0",
                              "--json", *server))
    assert created["phase"] == "round1"
    rng = np.random.default_rng(3)
    levels = rng.integers(2, size=USERS).tolist()
    sets = [rng.choice(ITEMS, size=2, replace=False).tolist() for _ in range(USERS)]
    release = ("--wait", "--timeout", "60", "--token-file", str(operator_file), "--json",
               *shuffler)

    async def campaign() -> None:
        """Half the users on the sync client, half on the async one; the operator's CLI
        calls run in a thread."""
        half = USERS // 2
        synced = [Client(proxy.shuffler_url, "tls", rng=np.random.default_rng(i),
                         server_key=server_key, ca_file=proxy.ca_file,
                         policy=POLICY)
                  for i in range(half)]
        awaited = [AsyncClient(proxy.shuffler_url, "tls", rng=np.random.default_rng(i),
                               server_key=server_key, ca_file=proxy.ca_file,
                               policy=POLICY)
                   for i in range(half, USERS)]
        try:
            for i, client in enumerate(synced):
                client.enroll(invitations[i])
                client.submit_level(levels[i])
            for i, user in enumerate(awaited, start=half):
                await user.enroll(invitations[i])
                await user.submit_level(levels[i])
            answer = json.loads(await asyncio.to_thread(
                _cli, capsys, "admin", "release", "tls", "--round", "1", *release))
            assert answer["acknowledged"] is True  # delivered to the server over https
            for i, client in enumerate(synced):
                client.wait_for_phase("round2", timeout=30)
                client.submit_data(sets[i])
            for i, user in enumerate(awaited, start=half):
                await user.wait_for_phase("round2", timeout=30)
                await user.submit_data(sets[i])
            await asyncio.to_thread(_cli, capsys, "admin", "release", "tls", "--round", "2",
                                    *release)
        finally:
            for client in synced:
                client.close()
            for user in awaited:
                await user.aclose()

    asyncio.run(campaign())

    status = json.loads(_cli(capsys, "admin", "status", "tls", "--json", *shuffler))
    assert status["phase"] == "done"
    assert [r["participants"] for r in status["rounds"]] == [USERS, USERS]
    results: dict[str, object] = json.loads(_cli(capsys, "admin", "results", "tls",
                                                 "--format", "json", *server))
    items = results["items"]
    assert isinstance(items, list) and len(items) == ITEMS
    assert all(item["estimate"] is not None for item in items)
    return results


@pytest.mark.slow
def test_a_campaign_over_https_only(tls_stack: tuple[LocalStack, Proxy],
                                    tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    stack, proxy = tls_stack
    assert stack.upstream_url == proxy.server_url  # the shuffler's only way to the server
    results = run_campaign_over_https(
        capsys, monkeypatch, tmp_path, proxy, admin_token=stack.admin_token,
        operator_token=stack.operator_token,
        invitations=stack.invitations("tls", USERS))
    # The same answer straight from the server on its own loopback port.
    assert results == stack.results("tls").model_dump(mode="json")

    # Without the CA: a certificate error, at once (no retries), from the SDK and the CLI.
    started = time.monotonic()
    with Client(proxy.shuffler_url, "tls") as stranger, \
            pytest.raises(ServiceError, match="certificate is not trusted") as refused:
        stranger.campaign()
    assert refused.value.certificate and not refused.value.transient
    assert time.monotonic() - started < 5
    status_code = main(["admin", "campaign", "list", "--server", proxy.server_url])
    _, err = capsys.readouterr()
    assert status_code == 2 and err.count("\n") == 1
    assert "certificate" in err and "--ca-file" in err
    # The CA file through the environment works as --ca-file does.
    monkeypatch.setenv("SEGSHUFFLE_CA_FILE", str(proxy.ca_file))
    assert "tls\tdone" in _cli(capsys, "admin", "campaign", "list", "--server",
                               proxy.server_url)

    # Plain HTTP to the TLS ports reaches no service.
    for port in (proxy.server_port, proxy.shuffler_port):
        answer = httpx.get(f"http://127.0.0.1:{port}/v1/campaigns/tls", timeout=5)
        assert answer.status_code == 400 and "plain HTTP" in answer.text
    # Metrics are not published through the proxy.
    with httpx.Client(verify=ssl_context(proxy.ca_file), timeout=5) as http:
        assert http.get(proxy.shuffler_url + "/metrics").status_code == 404
        assert http.get(proxy.shuffler_url + "/livez").status_code == 200
