"""The deployed nginx configurations keep their upstream connections alive.

nginx passes a ``proxy_set_header`` of the ``http`` block on only to blocks that set none
of their own.  A ``location`` that sets ``X-Forwarded-For`` therefore loses the
``Connection ""`` of nginx.conf: every request reaches the service with nginx's default
``Connection: close``, the service closes the connection after answering, and nginx opens
a new one for the next request.  In the 10,000-user replica run that left some 14,000
sockets in TIME_WAIT on the balancer, whose search for a free local port then took 59%
of its CPU (``__inet_hash_connect``): 2.7 CPU-ms per user in round 2 alone.

Each site of deploy/tls/ and deploy/scale/ is rendered in front of a small upstream that
records every request it receives, with the connection it came on: sequential requests
through one client connection must reuse one upstream connection, and none may ask the
upstream to close it.  The services' own headers pass as before (the shuffler gets the
user's address in ``X-Forwarded-For``, the server none).
"""

from __future__ import annotations

import http.server
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from segshuffle.client.tls import ssl_context

from .nginx_support import (
    TLS,
    free_ports,
    nginx_binary,
    render_balancer,
    render_proxy,
    running_nginx,
)

REQUESTS = 12


class _Recorded:
    """What the upstream saw: (connection number, request headers) per request."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, dict[str, str]]] = []
        self.connections = 0
        self.lock = threading.Lock()


@contextmanager
def recording_upstream() -> Iterator[tuple[int, _Recorded]]:
    """An HTTP/1.1 server on a free loopback port that answers every request with a small
    JSON body, keeps connections open unless asked to close them, and records what it
    received."""
    recorded = _Recorded()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # the head and the body go out in two writes: without TCP_NODELAY the body waits
        # for the peer's delayed acknowledgement of the head (about 40 ms a request)
        disable_nagle_algorithm = True

        def setup(self) -> None:
            super().setup()
            with recorded.lock:
                recorded.connections += 1
                self.number = recorded.connections

        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            with recorded.lock:
                recorded.requests.append(
                    (self.number, {k.lower(): v for k, v in self.headers.items()}))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = _answer  # noqa: N815  (the names http.server dispatches to)
        do_POST = _answer  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], recorded
    finally:
        server.shutdown()
        server.server_close()


def _through(client: httpx.Client, url: str, recorded: _Recorded) -> list[tuple[int, dict]]:
    """``REQUESTS`` requests, GETs and POSTs in turn, one after the other through one
    client connection; what the upstream received of them."""
    before = len(recorded.requests)
    for index in range(REQUESTS):
        answer = (client.get(f"{url}/v1/campaigns/c/view") if index % 2 else
                  client.post(f"{url}/v1/campaigns/c/rounds/1/submissions",
                              content=b'{"level":"x"}',
                              headers={"content-type": "application/json"}))
        assert answer.status_code == 200, answer.text
    return recorded.requests[before:]


def _assert_kept_alive(seen: list[tuple[int, dict]], site: str) -> None:
    assert len(seen) == REQUESTS, site
    asked_to_close = [h.get("connection") for _, h in seen
                      if (h.get("connection") or "").lower() == "close"]
    assert asked_to_close == [], f"{site}: nginx asked the upstream to close its connection"
    connections = {number for number, _ in seen}
    assert len(connections) == 1, (
        f"{site}: {REQUESTS} sequential requests took {len(connections)} upstream "
        "connections")


def test_the_balancer_keeps_its_upstream_connections(tmp_path: Path) -> None:
    nginx_binary()
    server_port, shuffler_port = free_ports(2)
    with recording_upstream() as (upstream, recorded):
        state = tmp_path / "nginx"
        conf = render_balancer(state, servers=[upstream, upstream],
                               shufflers=[upstream, upstream], server_port=server_port,
                               shuffler_port=shuffler_port)
        with running_nginx(conf, state, (server_port, shuffler_port)):
            for site, port in (("scale/server.conf", server_port),
                               ("scale/shuffler.conf", shuffler_port)):
                with httpx.Client(timeout=10) as client:
                    seen = _through(client, f"http://127.0.0.1:{port}", recorded)
                _assert_kept_alive(seen, site)
                assert {h.get("host") for _, h in seen} == {"127.0.0.1"}, site
                if site == "scale/shuffler.conf":
                    assert {h.get("x-forwarded-for") for _, h in seen} == {"127.0.0.1"}


@pytest.mark.slow
def test_the_tls_proxy_keeps_its_upstream_connections(tmp_path: Path) -> None:
    nginx_binary()
    certs = tmp_path / "certs"
    made = subprocess.run([str(TLS / "make-certs.sh"), "--out", str(certs)],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    server_tls, shuffler_tls = free_ports(2)
    with recording_upstream() as (upstream, recorded):
        state = tmp_path / "nginx"
        conf = render_proxy(state, certs, server=upstream, shuffler=upstream,
                            server_tls=server_tls, shuffler_tls=shuffler_tls)
        with running_nginx(conf, state, (server_tls, shuffler_tls)):
            for site, port, name in (("tls/server.conf", server_tls, "server"),
                                     ("tls/shuffler.conf", shuffler_tls, "shuffler")):
                with httpx.Client(timeout=10, verify=ssl_context(certs / "ca.pem")) as client:
                    seen = _through(client, f"https://localhost:{port}", recorded)
                _assert_kept_alive(seen, site)
                forwarded = {h.get("x-forwarded-for") for _, h in seen}
                assert forwarded == ({None} if name == "server" else {"127.0.0.1"}), site
