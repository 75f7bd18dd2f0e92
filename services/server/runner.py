"""Running the server under uvicorn: :func:`run` (what ``segshuffle serve server`` calls)."""

from __future__ import annotations

from ..listening import serve
from .app import create_app
from .settings import Settings


def run(settings: Settings) -> int:
    """Serve until interrupted; returns the exit status (:func:`..listening.serve`:
    ``server listening on port N`` once the socket is bound)."""
    return serve("server", settings, create_app)
