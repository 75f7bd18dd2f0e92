"""Slow or unauthenticated clients cannot hold a live service (R9).

Real processes over raw sockets: connections that trickle their headers or their body
are closed at the deadline while ``/livez`` keeps answering, and a submission with a
bad token is refused before its body is read; on both stores, since a plain submission
on PostgreSQL may be authenticated inside its storage statement, which must not wait for
a body the client withholds.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from segshuffle.testing.localstack import LocalStack

from .postgres_support import fresh_database

pytestmark = pytest.mark.slow  # both services as real processes

TIMEOUTS = {"HEADER_TIMEOUT": "1", "BODY_TIMEOUT": "2"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {f"SEGSHUFFLE_SHUFFLER_{k}": v for k, v in TIMEOUTS.items()}
    server_env = {f"SEGSHUFFLE_SERVER_{k}": v for k, v in TIMEOUTS.items()}
    directory = tmp_path_factory.mktemp("slow")
    with ExitStack() as resources:
        if request.param == "postgresql":
            env["SEGSHUFFLE_SHUFFLER_DATABASE"] = resources.enter_context(fresh_database())
            env["SEGSHUFFLE_SHUFFLER_KEY_DIRECTORY"] = str(directory / "round-keys")
        running = resources.enter_context(
            LocalStack(directory / "stack", min_users=2, shuffler_env=env,
                       server_env=server_env))
        running.create_campaign({"id": "c", "domain_size": 4, "set_size": 1,
                                 "levels": [1.0], "min_users": 3})
        yield running


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the peer closes the connection within ``seconds`` (reading what it sends)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


@pytest.mark.parametrize("service", ["shuffler", "server"])
def test_trickled_headers_are_cut_off(stack: LocalStack, service: str) -> None:
    port = stack.ports[service]
    slow = [_connect(port) for _ in range(50)]
    for sock in slow:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")  # never finishes its headers
    started = time.monotonic()
    assert httpx.get(f"http://127.0.0.1:{port}/livez", timeout=5).status_code == 200
    assert all(_closed_within(sock, 5) for sock in slow)
    assert time.monotonic() - started < 8
    for sock in slow:
        sock.close()


def test_a_trickled_body_is_cut_off(stack: LocalStack) -> None:
    token = httpx.post(f"{stack.shuffler_url}/v1/campaigns/c/enrollments",
                       json={"invitation": stack.invitations("c", 1)[0]},
                       timeout=30).json()["token"]
    sock = _connect(stack.ports["shuffler"])
    sock.sendall(b"POST /v1/campaigns/c/rounds/1/submissions HTTP/1.1\r\nHost: x\r\n"
                 b"Authorization: Bearer " + token.encode() + b"\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{")
    started = time.monotonic()
    assert _closed_within(sock, 6)
    assert 1.5 < time.monotonic() - started < 6
    sock.close()
    status = httpx.get(f"{stack.shuffler_url}/v1/campaigns/c/rounds/1", timeout=30).json()
    assert status["participants"] == 0


@pytest.mark.parametrize("sent", [b"", b'{"levels": ['], ids=["withheld", "partly-sent"])
def test_a_bad_token_is_refused_before_the_body_is_read(stack: LocalStack, sent: bytes) -> None:
    sock = _connect(stack.ports["shuffler"])
    sock.sendall(b"POST /v1/campaigns/c/rounds/1/submissions HTTP/1.1\r\nHost: x\r\n"
                 b"Authorization: Bearer not-a-token\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 900000\r\n\r\n" + sent)
    sock.settimeout(1.5)  # well below the body deadline: the answer needs no body
    answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b"application/problem+json" in answer
    sock.close()
