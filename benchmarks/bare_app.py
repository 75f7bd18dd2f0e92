"""The bare baseline of the service benchmark: FastAPI under uvicorn, nothing else.

    python benchmarks/bare_app.py --get-bytes 1500

``POST /submit`` reads a JSON body (parses it) and answers ``201 {"accepted": true}``;
``GET /document`` answers a fixed JSON body of ``--get-bytes`` bytes.  It is started as
the services are (:mod:`segshuffle.services.shuffler.main`): a loopback socket from
:func:`segshuffle.services.listening.listening_socket` on a free port, the same bounded
h11 protocol and header/body deadlines, no access log, no proxy headers, no ``Server``
or ``Date`` header, the same event loop (uvicorn's ``auto``: uvloop when installed).
It prints ``bare listening on port N`` on stdout once bound.
"""

from __future__ import annotations

import argparse
import json
import sys

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


def create_app(get_bytes: int) -> FastAPI:
    """The bare application."""
    body = document(get_bytes)
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/submit", status_code=201)
    async def submit(request: Request) -> JSONResponse:
        await request.json()
        return JSONResponse({"accepted": True}, status_code=201)

    @app.get("/document")
    async def get_document() -> Response:
        return Response(body, media_type="application/json")

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--get-bytes", type=int, default=1500)
    args = parser.parse_args(argv)
    if not MIN_GET_BYTES <= args.get_bytes <= MAX_GET_BYTES:
        parser.error(f"--get-bytes must lie in [{MIN_GET_BYTES}, {MAX_GET_BYTES}]")

    import uvicorn

    from segshuffle.services.configuration import ServiceSettings
    from segshuffle.services.listening import listening_socket
    from segshuffle.services.timeouts import bounded_protocol

    fields = ServiceSettings.model_fields
    sock = listening_socket("127.0.0.1", 0)
    config = uvicorn.Config(
        create_app(args.get_bytes), access_log=False, log_config=None, log_level="info",
        proxy_headers=False, server_header=False, date_header=False,
        timeout_graceful_shutdown=10,
        http=bounded_protocol(fields["header_timeout"].default, fields["body_timeout"].default))
    print(f"bare listening on port {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
