"""Run the shuffler under uvicorn with a log configuration that records no request origin.

uvicorn's access log (client address, path, status per request) is switched
off, proxy headers are ignored, and the ``Server`` header is not sent; the
remaining log lines come from :mod:`segshuffle.shuffler` and carry campaign ids,
rounds and counts only (never a token, an address or a ciphertext).
"""

from __future__ import annotations

import logging
import logging.config
from typing import Any

from .settings import Settings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_config(level: str = "INFO") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` dictionary: stderr, no access log."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": LOG_FORMAT}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "plain",
                       "stream": "ext://sys.stderr"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": [], "level": "CRITICAL", "propagate": False},
            "segshuffle": {"handlers": ["stderr"], "level": level, "propagate": False},
        },
    }


def run(settings: Settings, *, log_level: str = "INFO") -> None:
    """Serve the shuffler until interrupted (SIGINT/SIGTERM shut it down cleanly)."""
    import uvicorn

    from .app import create_app

    logging.config.dictConfig(log_config(log_level))
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_config=log_config(log_level),
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=10,
    )
