"""Running the server under uvicorn: :func:`run` (what ``segshuffle serve server`` calls)."""

from __future__ import annotations

import logging
import sys

import uvicorn

from ..listening import listening_socket
from ..timeouts import bounded_protocol
from .app import create_app
from .settings import Settings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """Log lines to stderr.  uvicorn's own loggers stay at WARNING: its startup line names
    the bound address and its access log names clients, neither of which is logged."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr, force=True)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)


def run(settings: Settings) -> int:
    """Serve until interrupted; returns the exit status.

    Logs ``server listening on port N`` (N is the real port, also when
    ``settings.port`` is 0) once the socket is bound.
    """
    configure_logging(settings.log_level)
    app = create_app(settings)
    sock = listening_socket(settings.host, settings.port)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, access_log=False, log_config=None,
                            log_level=settings.log_level.lower(), timeout_graceful_shutdown=10,
                            http=bounded_protocol(settings.header_timeout,
                                                  settings.body_timeout))
    server = uvicorn.Server(config)
    logging.getLogger("segshuffle.server").info("server listening on port %d", port)
    server.run(sockets=[sock])
    return 0
