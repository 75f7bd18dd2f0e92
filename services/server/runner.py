"""Running the server under uvicorn: :func:`run` (what ``segshuffle serve server`` calls)."""

from __future__ import annotations

import logging

import uvicorn

from ..database import require_sqlite_directory
from ..listening import listening_socket
from ..observability import configure_logging
from ..timeouts import bounded_protocol, event_loop
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
    config = uvicorn.Config(app, access_log=False, log_config=None,
                            log_level=settings.log_level.lower(), timeout_graceful_shutdown=10,
                            loop=event_loop(),
                            http=bounded_protocol(settings.header_timeout,
                                                  settings.body_timeout))
    server = uvicorn.Server(config)
    logging.getLogger("segshuffle.server").info("server listening on port %d", port)
    server.run(sockets=[sock])
    return 0
