"""The server (analyzer) service: campaigns, keys, aggregation, optimization, decoding.

Entry points::

    from segshuffle.services.server import Settings, create_app, run

    settings = Settings.from_env(port=8080)   # SEGSHUFFLE_SERVER_* variables, overrides win
    app = create_app(settings)                # the FastAPI app (tests, embedding)
    run(settings)                             # serve under uvicorn until interrupted

or ``python -m segshuffle.services.server`` (settings from the environment only).

Settings (:class:`~.settings.Settings`, variable ``SEGSHUFFLE_SERVER_<FIELD>``):
``database`` (SQLite file), ``key_dir`` (private key files, default ``<database>.keys``),
``signing_key_file`` (the Ed25519 document-signing key, created if missing, default
``<key_dir>/signing/document-signing-key.pem``),
``admin_token`` and ``shuffler_token`` (required, >= 16 characters, distinct),
``host``/``port`` (default 127.0.0.1:8080; port 0 picks a free port, logged as
``server listening on port N``), ``allow_insecure_parameters`` (default false),
``max_body_bytes``, ``decrypt_workers``, ``parallel_threshold``, ``decode_concurrency``,
``decode_lease_seconds``, ``decode_idle_seconds``, ``synchronous``,
``log_level``, ``log_format`` (``json`` lines, the default, or ``text``).

Modules: :mod:`.settings`, :mod:`.storage` (SQLite repository), :mod:`.keys`
(private key files), :mod:`.signing` (the document-signing key file), :mod:`.decrypt`
(HPKE opening, process pool), :mod:`.decoding` (the decode workers of the chunk
queue), :mod:`.aggregation` (round-1 parameters, round-2
decoding), :mod:`.service` (operations), :mod:`.app` (HTTP), :mod:`.runner` (uvicorn).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .runner import run
    from .settings import Settings

__all__ = ["Settings", "create_app", "run"]

_EXPORTS = {"Settings": ".settings", "create_app": ".app", "run": ".runner"}


def __getattr__(name: str) -> Any:
    """Import the web stack only when it is used: decryption workers import
    :mod:`.decrypt` alone and start fast."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
