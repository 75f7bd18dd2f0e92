"""The bare baselines of the service benchmark: the services' server with nothing else.

    python benchmarks/bare_app.py --get-bytes 1500
    python benchmarks/bare_app.py --store sqlite:///tmp/bare.sqlite3
    python benchmarks/bare_app.py --store postgresql://user:pass@host/db

Two kinds of endpoint, on one server:

- **FastAPI** (the framework's floor): ``POST /submit`` reads a JSON body (parses it) and
  answers ``201 {"accepted": true}``; ``GET /document`` answers a fixed JSON body of
  ``--get-bytes`` bytes.
- **Raw ASGI** (the server's floor): ``POST /raw/submit`` does the same as ``/submit``
  in a plain ASGI callable that uvicorn calls before FastAPI (no router, no middleware,
  no dependency solving), which is how the shuffler serves its user routes
  (``UserRoutes`` in :mod:`segshuffle.services.shuffler.app`); a FastAPI route's
  floor would leave the router's cost, which those routes never pay, on the baseline's
  side of the ratio.

With ``--store``, ``POST /submit-stored`` and ``POST /raw/submit-stored`` also do what
any durable endpoint must: they append the body to a table, one row per request in
arrival order, each insert its own transaction, before answering. On SQLite
(``sqlite:///path``): WAL, ``synchronous=NORMAL`` (the shuffler's settings), the insert
run on the event loop. On PostgreSQL: one ``INSERT`` per request on an asynchronous
psycopg connection pool, no thread involved. They are the floor of a request that
stores its body, as the bare POSTs are the floor of one that parses it.

It is started as the services are (:func:`segshuffle.services.listening.serve`): a
loopback socket from :func:`~segshuffle.services.listening.listening_socket` on a free
port, the services' uvicorn configuration
(:func:`~segshuffle.services.listening.uvicorn_config`: the bounded HTTP protocol and
its header/body deadlines, no access log, no proxy headers, no ``Server`` or ``Date``
header, uvloop when installed) and start-up's heap frozen
(:func:`~segshuffle.services.heap.freeze_start_up_heap`). It prints ``bare listening on
port N`` on stdout once bound.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

MIN_GET_BYTES = 16
MAX_GET_BYTES = 1 << 20
MAX_BODY_BYTES = 1 << 20
"""The largest body a raw route reads (the services refuse larger ones at their edge)."""
RAW_SUBMIT = "/raw/submit"
RAW_SUBMIT_STORED = "/raw/submit-stored"
ACCEPTED = json.dumps({"accepted": True}, separators=(",", ":")).encode()


def document(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes (``size`` >= :data:`MIN_GET_BYTES`)."""
    empty = json.dumps({"padding": ""}, separators=(",", ":")).encode()
    body = json.dumps({"padding": "x" * (size - len(empty))}, separators=(",", ":")).encode()
    assert len(body) == size
    return body


class SQLiteSink:
    """Bodies appended to a SQLite table (WAL, synchronous NORMAL), on the calling thread."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS bodies (id INTEGER PRIMARY KEY, body BLOB)")

    async def open(self) -> None:
        return None

    async def store(self, body: bytes) -> None:
        self.db.execute("INSERT INTO bodies (body) VALUES (?)", (body,))

    async def close(self) -> None:
        self.db.close()


class PostgresSink:
    """Bodies appended to a PostgreSQL table through an asynchronous connection pool."""

    def __init__(self, url: str) -> None:
        from psycopg_pool import AsyncConnectionPool

        self.pool = AsyncConnectionPool(url, min_size=4, max_size=8, open=False,
                                        kwargs={"autocommit": True})

    async def open(self) -> None:
        await self.pool.open(wait=True, timeout=30)
        async with self.pool.connection() as db:
            await db.execute("CREATE TABLE IF NOT EXISTS bodies"
                             " (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body BYTEA)")

    async def store(self, body: bytes) -> None:
        async with self.pool.connection() as db:
            await db.execute("INSERT INTO bodies (body) VALUES (%s)", (body,))

    async def close(self) -> None:
        await self.pool.close()


def open_sink(url: str) -> SQLiteSink | PostgresSink:
    """The store a ``--store`` URL names."""
    if url.startswith("sqlite:///"):
        return SQLiteSink(url.removeprefix("sqlite:///"))
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresSink(url)
    raise ValueError(f"--store takes sqlite:///path or postgresql://..., got {url!r}")


async def read_body(receive: Receive, limit: int = MAX_BODY_BYTES) -> bytes | None:
    """The request's whole body, or ``None`` if the client left or it exceeds ``limit``
    bytes (the loop ends at the body's last part; the protocol's body deadline bounds
    how long a client may take to send it)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            return None
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


async def answer(send: Send, status: int, body: bytes) -> None:
    """A complete JSON response of ``status`` and ``body``."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class RawRoutes:
    """``POST /raw/submit`` (and ``/raw/submit-stored`` with a sink) as plain ASGI,
    ahead of ``app``; every other request, and the lifespan, goes to ``app``.

    The body is read, parsed with :func:`json.loads` (as FastAPI's ``request.json()``
    does), stored when asked, and ``201 {"accepted": true}`` sent: what a request that
    parses (and keeps) its body costs on this server with no framework at all. A body
    that is too large or not JSON is answered 413 or 400."""

    def __init__(self, app: ASGIApp, sink: SQLiteSink | PostgresSink | None) -> None:
        self.app = app
        self.sink = sink
        self.paths = {RAW_SUBMIT: False}
        if sink is not None:
            self.paths[RAW_SUBMIT_STORED] = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        store = self.paths.get(scope["path"]) if scope["type"] == "http" else None
        if store is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            await answer(send, 413, b'{"title":"body too large or incomplete"}')
            return
        try:
            json.loads(body)
        except ValueError:
            await answer(send, 400, b'{"title":"not JSON"}')
            return
        if store and self.sink is not None:
            await self.sink.store(body)
        await answer(send, 201, ACCEPTED)


def create_app(get_bytes: int, sink: SQLiteSink | PostgresSink | None = None) -> FastAPI:
    """The bare FastAPI application (with ``POST /submit-stored`` when given a ``sink``)."""
    body = document(get_bytes)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if sink is not None:
            await sink.open()
        try:
            yield
        finally:
            if sink is not None:
                await sink.close()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    @app.post("/submit", status_code=201)
    async def submit(request: Request) -> JSONResponse:
        await request.json()
        return JSONResponse({"accepted": True}, status_code=201)

    if sink is not None:
        @app.post("/submit-stored", status_code=201)
        async def submit_stored(request: Request) -> JSONResponse:
            await request.json()
            await sink.store(await request.body())
            return JSONResponse({"accepted": True}, status_code=201)

    @app.get("/document")
    async def get_document() -> Response:
        return Response(body, media_type="application/json")

    return app


def create_server_app(get_bytes: int, sink: SQLiteSink | PostgresSink | None = None
                      ) -> RawRoutes:
    """What the server runs: the raw routes ahead of the FastAPI application (which
    opens and closes ``sink`` in its lifespan)."""
    return RawRoutes(create_app(get_bytes, sink), sink)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--get-bytes", type=int, default=1500)
    parser.add_argument("--store", default=None, metavar="URL",
                        help="sqlite:///path or postgresql://...: serve POST /submit-stored")
    args = parser.parse_args(argv)
    if not MIN_GET_BYTES <= args.get_bytes <= MAX_GET_BYTES:
        parser.error(f"--get-bytes must lie in [{MIN_GET_BYTES}, {MAX_GET_BYTES}]")
    try:
        sink = None if args.store is None else open_sink(args.store)
    except ValueError as exc:
        parser.error(str(exc))

    import uvicorn

    from segshuffle.services.configuration import ServiceSettings
    from segshuffle.services.heap import freeze_start_up_heap
    from segshuffle.services.listening import listening_socket, uvicorn_config

    fields = ServiceSettings.model_fields
    sock = listening_socket("127.0.0.1", 0)
    config = uvicorn_config(create_server_app(args.get_bytes, sink),
                            header_timeout=fields["header_timeout"].default,
                            body_timeout=fields["body_timeout"].default)
    print(f"bare listening on port {sock.getsockname()[1]}", flush=True)
    freeze_start_up_heap()
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
