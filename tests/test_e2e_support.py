"""Helpers of the end-to-end tests (no tests here): a recording proxy, population runs,
and the inversion of the server's estimates back to decoded counts."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population
from segshuffle.wire.models import PublishedParameters, Results

_HOP_BY_HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class RecordingProxy:
    """An HTTP proxy on loopback that forwards to ``target`` and records every request.

    ``deliver(request, response)``, if given, is asked before each answer is passed on:
    ``False`` loses it (the connection is closed unanswered), as a crash between storing
    and answering would."""

    def __init__(self, target: str,
                 deliver: Callable[[Recorded, httpx.Response], bool] | None = None) -> None:
        self.target = target.rstrip("/")
        self.deliver = deliver
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        proxy = self
        client = httpx.Client(timeout=300.0)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                return

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in _HOP_BY_HOP}
                recorded = Recorded(self.command, self.path, dict(headers), body)
                with proxy._lock:
                    proxy.requests.append(recorded)
                try:
                    response = client.request(self.command, proxy.target + self.path,
                                              headers=headers, content=body)
                except httpx.HTTPError:
                    self.send_response(502)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if proxy.deliver is not None and not proxy.deliver(recorded, response):
                    self.close_connection = True
                    return
                self.send_response(response.status_code)
                for key, value in response.headers.items():
                    if key.lower() not in _HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

            do_GET = do_PUT = do_POST = _forward  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def proxied_stack(directory: Path, *, min_users: int) -> Iterator[tuple[LocalStack,
                                                                     RecordingProxy]]:
    """Both services, with a :class:`RecordingProxy` between the shuffler and the server."""
    stack = LocalStack(directory, min_users=min_users)
    proxy: RecordingProxy | None = None
    try:
        stack.start_service("server")
        proxy = RecordingProxy(stack.server_url)
        stack.upstream_url = proxy.url
        stack.start_service("shuffler")
        yield stack, proxy
    finally:
        stack.close()
        if proxy is not None:
            proxy.close()


def run_rounds(population: Population, *rounds: int,
               indices: Sequence[int] | None = None) -> None:
    """Run the given phases of a population (for ``indices`` only if given)."""

    async def main() -> None:
        async with population:
            for r in rounds:
                timing = await (population.round1(indices) if r == 1
                                else population.round2(indices))
                assert timing.failures == 0, population.errors()[:3]

    asyncio.run(main())


def decoded_counts(results: Results, parameters: PublishedParameters) -> np.ndarray:
    """C_j recovered from W^_j = (C_j - n2 m / d) / sum_k n2_k lambda_k (rounded)."""
    entries = sorted(list(results.items) + list(results.padding), key=lambda e: e.id)
    level_counts = [lv.users_round2 for lv in results.privacy.levels]
    weight = sum(n * lam for n, lam in zip(level_counts, parameters.lambdas, strict=True))
    n2 = sum(level_counts)
    d = parameters.privacy_domain_size
    values = np.array([e.estimate for e in entries], dtype=float)
    counts = values * weight + n2 * parameters.m / d
    rounded = np.rint(counts)
    assert np.allclose(counts, rounded, atol=1e-6), "decoded counts are not integers"
    return rounded.astype(np.int64)
