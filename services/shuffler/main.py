"""Run the shuffler under uvicorn with a log configuration that records no request origin.

uvicorn's access log (client address, path, status per request) is switched
off, uvicorn's proxy header handling is off (``X-Forwarded-For`` is read only by the rate
limiter, and only from ``TRUSTED_PROXIES``), and the ``Server`` header is not sent; the
remaining log lines (JSON or text, :func:`..observability.configure_logging`) come from
:mod:`segshuffle.shuffler` and carry campaign ids, rounds and counts, and from
:mod:`segshuffle.http`, one per request, method, route template, status, duration and
request id only (never a token, an address or a ciphertext).
"""

from __future__ import annotations

import logging

from ..database import require_sqlite_directory
from ..listening import listening_socket, uvicorn_config
from ..observability import configure_logging
from .settings import Settings


def run(settings: Settings) -> int:
    """Serve the shuffler until interrupted (SIGINT/SIGTERM shut it down cleanly).

    Logs ``shuffler listening on port N`` once the socket is bound (N is the real
    port, also when ``settings.port`` is 0), so a supervisor can find it.
    """
    import uvicorn

    from .app import create_app

    settings.issuer_keys()  # a missing or malformed issuer key: one line, before anything
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
    config = uvicorn_config(app, header_timeout=settings.header_timeout,
                            body_timeout=settings.body_timeout)
    logging.getLogger("segshuffle.shuffler").info(
        "shuffler listening on port %d", sock.getsockname()[1]
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0
