"""Server settings, from ``SEGSHUFFLE_SERVER_<FIELD>`` environment variables or arguments.

Each field of :class:`Settings` is read from the variable named after it in upper case:

- ``DATABASE``: the SQLite file (default ``server.sqlite3``).
- ``KEY_DIR``: directory of the campaigns' private key files (default: the database
  path with ``.keys`` appended).
- ``SIGNING_KEY_FILE``: the Ed25519 document-signing key (PEM, 0600), created on first
  start when missing (default ``<key dir>/signing/document-signing-key.pem``).
- ``ADMIN_TOKEN``: bearer token of the administrator (required, >= 16 characters).
- ``SHUFFLER_TOKEN``: bearer token the shuffler presents when it delivers batches
  (required, >= 16 characters, different from the admin token).
- ``HOST`` / ``PORT``: listen address (default ``127.0.0.1:8080``).
- ``ALLOW_INSECURE_PARAMETERS``: accept campaigns with fixed, unaccounted parameters
  (e.g. lambda = 1, m = 0) for integrity tests (default false).
- ``MAX_BODY_BYTES``: largest accepted request body (default 4 MiB).
- ``DECRYPT_WORKERS``: processes that open large chunks (default 0: one per CPU;
  1: no pool).
- ``PARALLEL_THRESHOLD``: chunk size from which the pool is used (default 2000).
- ``SYNCHRONOUS``: SQLite ``synchronous``; ``NORMAL`` survives process crashes,
  ``FULL`` also power loss (default ``FULL``).
- ``LOG_LEVEL``: ``debug``, ``info``, ``warning`` or ``error`` (default ``info``).
- ``HEADER_TIMEOUT`` / ``BODY_TIMEOUT``: the most seconds a client may take to send a
  request's headers, and then its body, before the connection is closed (default 10
  and 30; :mod:`segshuffle.services.timeouts`).

Every token may instead be read from a file: ``..._TOKEN_FILE`` names it (Docker and
Kubernetes secrets), so the token shows in no process environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..configuration import EnvironmentSettings, check_common
from . import signing

PREFIX = "SEGSHUFFLE_SERVER_"
MIN_TOKEN_LENGTH = 16


@dataclass(frozen=True)
class Settings(EnvironmentSettings):
    """Everything the server needs to run; see the module docstring for the variables."""

    prefix: ClassVar[str] = PREFIX

    database: str = "server.sqlite3"
    key_dir: str = ""
    signing_key_file: str = ""
    admin_token: str = ""
    shuffler_token: str = ""
    host: str = "127.0.0.1"
    port: int = 8080
    allow_insecure_parameters: bool = False
    max_body_bytes: int = 4 << 20
    decrypt_workers: int = 0
    parallel_threshold: int = 2000
    synchronous: str = "FULL"
    log_level: str = "info"
    log_format: str = "json"
    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def __post_init__(self) -> None:
        for name in ("admin_token", "shuffler_token"):
            token = getattr(self, name)
            if len(token) < MIN_TOKEN_LENGTH:
                raise ValueError(f"{PREFIX}{name.upper()} is required "
                                 f"(at least {MIN_TOKEN_LENGTH} characters)")
            if any(c.isspace() for c in token) or not token.isprintable():
                raise ValueError(f"{PREFIX}{name.upper()} must be printable, without spaces")
        if self.admin_token == self.shuffler_token:
            raise ValueError("the admin and shuffler tokens must differ")
        check_common(self, (("max_body_bytes", 1024), ("decrypt_workers", 0),
                            ("parallel_threshold", 1)))

    @property
    def key_directory(self) -> str:
        """``key_dir``, or the database path with ``.keys`` appended."""
        return self.key_dir or f"{self.database}.keys"

    @property
    def signing_key_path(self) -> str:
        """``signing_key_file``, or ``signing/document-signing-key.pem`` in the key directory."""
        if self.signing_key_file:
            return self.signing_key_file
        return str(signing.default_path(self.key_directory))
