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

from ..listening import serve
from .settings import Settings


def run(settings: Settings) -> int:
    """Serve the shuffler until interrupted (SIGINT/SIGTERM shut it down cleanly).

    Logs ``shuffler listening on port N`` once the socket is bound (N is the real
    port, also when ``settings.port`` is 0), so a supervisor can find it
    (:func:`..listening.serve`).
    """
    from .app import create_app

    settings.issuer_keys()  # a missing or malformed issuer key: one line, before anything
    return serve("shuffler", settings, create_app)
