"""The bare baseline of the service benchmark: FastAPI under uvicorn, nothing else.

    python benchmarks/bare_app.py --get-bytes 1500
    python benchmarks/bare_app.py --store sqlite:///tmp/bare.sqlite3
    python benchmarks/bare_app.py --store postgresql://user:pass@host/db

``POST /submit`` reads a JSON body (parses it) and answers ``201 {"accepted": true}``;
``GET /document`` answers a fixed JSON body of ``--get-bytes`` bytes.  With ``--store``,
``POST /submit-stored`` also does what any durable endpoint must: it appends the body to
a table, one row per request in arrival order, each insert its own transaction, before
answering. On SQLite (``sqlite:///path``): WAL, ``synchronous=NORMAL`` (the shuffler's
settings), the insert run on the event loop. On PostgreSQL: one ``INSERT`` per request
on an asynchronous psycopg connection pool, no thread involved. It is the floor of a
request that stores its body, as the bare POST is the floor of one that parses it.  It is started as
the services are (:mod:`segshuffle.services.shuffler.main`): a loopback socket from
:func:`segshuffle.services.listening.listening_socket` on a free port, the same bounded
h11 protocol and header/body deadlines, no access log, no proxy headers, no ``Server``
or ``Date`` header, the same event loop (uvicorn's ``auto``: uvloop when installed).
It prints ``bare listening on port N`` on stdout once bound.
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

MIN_GET_BYTES = 16
MAX_GET_BYTES = 1 << 20


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


def create_app(get_bytes: int, sink: SQLiteSink | PostgresSink | None = None) -> FastAPI:
    """The bare application (with ``POST /submit-stored`` when given a ``sink``)."""
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
    from segshuffle.services.listening import listening_socket
    from segshuffle.services.timeouts import bounded_protocol

    fields = ServiceSettings.model_fields
    sock = listening_socket("127.0.0.1", 0)
    config = uvicorn.Config(
        create_app(args.get_bytes, sink), access_log=False, log_config=None, log_level="info",
        proxy_headers=False, server_header=False, date_header=False,
        timeout_graceful_shutdown=10,
        http=bounded_protocol(fields["header_timeout"].default, fields["body_timeout"].default))
    print(f"bare listening on port {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
