"""The shuffler service: enrollment, anonymous submissions, uniform permutation, release.

Modules, one job each:

- :mod:`.settings`: :class:`Settings` from ``SEGSHUFFLE_SHUFFLER_*`` variables.
- :mod:`.storage_api` / :mod:`.storage`: the storage Protocol and its SQLite (WAL)
  implementation, without identities.
- :mod:`.vault`: per-round keys that seal stored messages, destroyed after release.
- :mod:`.permutation`: the release order, computed from the round key, never stored.
- :mod:`.enrollment`: the pluggable :class:`EnrollmentPolicy` and its default.
- :mod:`.upstream`: the HTTP link to the server.
- :mod:`.release`: release thresholds, chunked forwarding with retries, resumption.
- :mod:`.service`: :class:`~.service.ShufflerService`, the operations without HTTP.
- :mod:`.app`: the FastAPI application (:func:`create_app`): routers and auth
  dependencies over the service, with the edge shared with the server
  (:mod:`segshuffle.services.http_edge`).
- :mod:`.main`: :func:`run` under uvicorn with the access log off.
"""

from .main import run
from .settings import Settings

__all__ = ["Settings", "create_app", "run"]


def __getattr__(name: str) -> object:
    if name == "create_app":  # imported lazily: it pulls in FastAPI
        from .app import create_app

        return create_app
    raise AttributeError(name)
