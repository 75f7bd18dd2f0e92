"""CPU cost per request of the observability middleware; prints CPU-ms per request.

    python benchmarks/bench_middleware.py --requests 20000 --repeats 5

Three apps answer ``GET /v1/campaigns/{campaign_id}`` with a small JSON body: a bare
FastAPI app (the baseline), the same app with :class:`RequestObserver` (request id,
metrics, one JSON log line written to an in-memory stream), and the same app with a
``BaseHTTPMiddleware`` request logger (what the server used before), for comparison.
Requests are ASGI calls in one event loop (no sockets, no HTTP parsing), so the figures
are the framework's and the middleware's CPU time only; ``time.process_time`` is read
around each batch and the median over repeats is printed, with the middleware's extra
cost over the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response

from segshuffle.services.observability import Metrics, RequestObserver, log_handler


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/v1/campaigns/{campaign_id}")
    async def view(campaign_id: str) -> dict[str, Any]:
        return {"id": campaign_id, "phase": "round1"}

    return app


def bare() -> FastAPI:
    return _app()


def observed() -> FastAPI:
    app = _app()
    app.add_middleware(RequestObserver, metrics=Metrics("bench"))
    return app


def base_http_logger() -> FastAPI:
    app = _app()
    log = logging.getLogger("segshuffle.bench")

    @app.middleware("http")
    async def log_requests(request: Request,
                           call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        log.info("%s %s %d %.1fms", request.method, request.url.path, response.status_code,
                 (time.perf_counter() - started) * 1e3)
        return response

    return app


async def _drive(app: FastAPI, requests: int) -> float:
    """CPU seconds for ``requests`` ASGI GETs of ``app``."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": "/v1/campaigns/c1", "raw_path":
             b"/v1/campaigns/c1", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"bench")], "server": ("bench", 80), "client": None}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200

    for _ in range(200):  # warm-up (route compilation, caches)
        await app(dict(scope), receive, send)
    started = time.process_time()
    for _ in range(requests):
        await app(dict(scope), receive, send)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logger = logging.getLogger("segshuffle")
    logger.handlers[:] = [log_handler("json", io.StringIO())]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    apps = {"bare FastAPI": bare(), "RequestObserver": observed(),
            "BaseHTTPMiddleware logger": base_http_logger()}
    results: dict[str, list[float]] = {name: [] for name in apps}
    for _ in range(args.repeats):  # interleaved, so drift hits every app alike
        for name, app in apps.items():
            results[name].append(asyncio.run(_drive(app, args.requests)) / args.requests)
    baseline = statistics.median(results["bare FastAPI"]) * 1e3
    print(f"{args.requests} requests x {args.repeats} repeats, median CPU-ms per request")
    for name, runs in results.items():
        ms = statistics.median(runs) * 1e3
        print(f"  {name:28s} {ms:.4f} ms  (+{ms - baseline:.4f} ms over bare)")


if __name__ == "__main__":
    main()
