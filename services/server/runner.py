"""Running the server under uvicorn: :func:`run` (what ``segshuffle serve server`` calls)."""

from __future__ import annotations

import logging

import uvicorn

from ..database import require_sqlite_directory
from ..listening import listening_socket, uvicorn_config
from ..observability import configure_logging
from .app import create_app
from .settings import Settings


def run(settings: Settings) -> int:
    """Serve until interrupted; returns the exit status.

    Logs ``server listening on port N`` (N is the real port, also when
    ``settings.port`` is 0) once the socket is bound.
    """
    configure_logging(settings.log_level, settings.log_format)
    require_sqlite_directory(settings.database)
    # Bind first: a port in use is refused before anything (a signing key, a database) is
    # created.
    sock = listening_socket(settings.host, settings.port)
    try:
        app = create_app(settings)
    except BaseException:
        sock.close()
        raise
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, header_timeout=settings.header_timeout,
                                           body_timeout=settings.body_timeout))
    logging.getLogger("segshuffle.server").info("server listening on port %d", port)
    server.run(sockets=[sock])
    return 0
