"""Shuffler settings, from ``SEGSHUFFLE_SHUFFLER_<FIELD>`` environment variables or arguments.

Each field of :class:`Settings` is read from the variable named after it in upper case:

- ``DATABASE``: the SQLite file (default ``shuffler.sqlite3``).
- ``SERVER_URL``: base URL of the server (analyzer), default ``http://127.0.0.1:8080``.
- ``SERVER_TOKEN``: the shuffler's credential presented to the server (required).
- ``SERVER_CA_FILE``: PEM file of the certificate authorities trusted for an ``https://``
  server URL (default: the system's trust store).
- ``OPERATOR_TOKEN``: bearer token of the operator, who triggers releases (required).
- ``KEY_DIRECTORY``: where the per-round keys that seal stored messages live (default
  ``<DATABASE>.keys``); point it at memory-backed storage (tmpfs) so that a key never
  reaches a disk (docs/architecture.md, "What the shuffler keeps").
- ``ENROLLMENT``: ``invitations`` (default): a user enrolls once per invitation signed by
  the app operator's issuer key; ``open``: anyone enrolls any number of times, which lets
  fake users isolate a real one (the n-1 attack): for tests and closed networks only,
  logged as a warning at startup and shown in every round status.
- ``INVITATION_KEYS``: the issuer's Ed25519 public key(s), unpadded base64url, comma
  separated (``segshuffle admin issuer-key`` prints one); and/or ``INVITATION_KEYS_FILE``:
  a file of such keys, one per line.  Invitations mode refuses to start without one.
- ``INVITATION_SKEW``: seconds an expired invitation is still accepted, for clock
  differences (default 60).
- ``ENROLL_RATE`` / ``ENROLL_BURST``: per source address, enrollments per second and the
  burst allowed (default 0.1 and 10); ``SUBMIT_RATE`` / ``SUBMIT_BURST``: the same for
  submissions (default 1 and 30); ``READ_RATE`` / ``READ_BURST``: the same for the public
  GETs (campaign view, key config, round status; default 50 and 500).  A rate of 0
  switches that limit off.  Refusals are 429
  ``rate-limited`` with ``Retry-After``.
- ``RATE_LIMIT_SOURCES``: sources tracked at once, least recently seen evicted first
  (default 65536).
- ``TRUSTED_PROXIES``: addresses or networks of reverse proxies whose ``X-Forwarded-For``
  names the source (default none: the peer address is the source).
- ``MIN_USERS``: the shuffler's own floor on participants per release, applied on top of
  the campaign's ``min_users`` (default 10).
- ``AUTO_RELEASE``: release automatically once a round has this many participants and the
  campaign's threshold is met (default 0: only on the operator's request).
- ``CHUNK_SIZE``: ciphertexts per forwarded chunk (default 5000).
- ``MAX_BODY_BYTES``: largest accepted request body (default 1 MiB).
- ``RELEASE_RETRY_SECONDS``: how long forwarding retries network errors, 5xx and 429
  before it stops (default 6 hours); other refusals stop it at once. A stopped release
  resumes on the operator's next release request.
- ``RELEASE_WAIT``: how long a release request with ``wait=true`` waits for the server's
  acknowledgement before answering 202 (default 60 seconds; forwarding goes on).
- ``SYNCHRONOUS``: SQLite ``synchronous``; ``NORMAL`` survives process crashes, ``FULL``
  also power loss (default ``NORMAL``).
- ``CAMPAIGN_CACHE_SECONDS``: how long a campaign view that can still change is cached
  and may be cached by clients (default 1; immutable documents are kept until evicted).
- ``DOCUMENT_CACHE_ENTRIES``: most documents cached from the server (default 1024, LRU).
- ``UPSTREAM_CONNECTIONS``: most connections to the server at once (default 16).
- ``UPSTREAM_POOL_TIMEOUT``: how long a request to the server may wait for a free
  connection before it fails with ``unavailable`` (default 2 seconds).
- ``FORWARD_TIMEOUT``: per-request timeout of batch delivery (default 120 seconds).
- ``HOST`` / ``PORT``: listen address (default ``127.0.0.1:8081``; port 0 picks a free
  port, logged as ``shuffler listening on port N``).
- ``LOG_LEVEL``: ``debug``, ``info``, ``warning`` or ``error`` (default ``info``).
- ``LOG_FORMAT``: ``json`` (one JSON object per line, the default) or ``text``.
- ``HEADER_TIMEOUT`` / ``BODY_TIMEOUT``: the most seconds a client may take to send a
  request's headers, and then its body, before the connection is closed (default 10
  and 30; :mod:`segshuffle.services.timeouts`).

Every token may instead be read from a file: ``..._TOKEN_FILE`` names it (Docker and
Kubernetes secrets), so the token shows in no process environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from segshuffle.crypto.invitations import parse_public_keys

from ..configuration import EnvironmentSettings, check_common
from ..rate_limit import parse_networks

PREFIX = "SEGSHUFFLE_SHUFFLER_"
ENROLLMENT_MODES = ("invitations", "open")


@dataclass(frozen=True)
class Settings(EnvironmentSettings):
    """Everything the shuffler needs to run; see the module docstring for the variables."""

    prefix: ClassVar[str] = PREFIX

    database: str = "shuffler.sqlite3"
    key_directory: str = ""
    server_url: str = "http://127.0.0.1:8080"
    server_token: str = ""
    server_ca_file: str = ""
    operator_token: str = ""
    enrollment: str = "invitations"
    invitation_keys: str = ""
    invitation_keys_file: str = ""
    invitation_skew: float = 60.0
    enroll_rate: float = 0.1
    enroll_burst: int = 10
    submit_rate: float = 1.0
    submit_burst: int = 30
    read_rate: float = 50.0
    read_burst: int = 500
    rate_limit_sources: int = 65536
    trusted_proxies: str = ""
    min_users: int = 10
    auto_release: int = 0
    chunk_size: int = 5000
    max_body_bytes: int = 1 << 20
    synchronous: str = "NORMAL"
    host: str = "127.0.0.1"
    port: int = 8081
    campaign_cache_seconds: float = 1.0
    document_cache_entries: int = 1024
    upstream_connections: int = 16
    upstream_pool_timeout: float = 2.0
    forward_timeout: float = 120.0
    release_wait: float = 60.0
    release_retry_seconds: float = 6 * 3600.0
    log_level: str = "info"
    log_format: str = "json"
    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.server_token:
            raise ValueError(f"{PREFIX}SERVER_TOKEN (the shuffler's credential) is required")
        if not self.operator_token:
            raise ValueError(f"{PREFIX}OPERATOR_TOKEN is required")
        if not self.server_url.startswith(("http://", "https://")):
            raise ValueError(f"server URL must start with http:// or https://, got "
                             f"{self.server_url!r}")
        check_common(self, (("min_users", 1), ("auto_release", 0), ("chunk_size", 1),
                            ("max_body_bytes", 1024), ("document_cache_entries", 1),
                            ("upstream_connections", 1), ("enroll_burst", 1), ("read_burst", 1),
                            ("submit_burst", 1), ("rate_limit_sources", 1)),
                     durations=("campaign_cache_seconds", "upstream_pool_timeout",
                                "forward_timeout"))
        if self.enrollment not in ENROLLMENT_MODES:
            raise ValueError(f"{PREFIX}ENROLLMENT must be one of {', '.join(ENROLLMENT_MODES)}, "
                             f"got {self.enrollment!r}")
        for name in ("invitation_skew", "enroll_rate", "submit_rate", "read_rate"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ValueError(f"{name.replace('_', ' ')} must be a number >= 0, "
                                 f"got {value!r}")
        parse_networks(self.trusted_proxies)
        if self.enrollment == "invitations" and not (self.invitation_keys.strip()
                                                     or self.invitation_keys_file):
            raise ValueError(
                f"invitation enrollment needs the issuer public key: set {PREFIX}INVITATION_KEYS "
                f"or {PREFIX}INVITATION_KEYS_FILE (segshuffle admin issuer-key prints it), "
                f"or {PREFIX}ENROLLMENT=open to accept anyone (unsafe against fake users)")

    def issuer_keys(self) -> list[Ed25519PublicKey]:
        """The issuer public keys of ``INVITATION_KEYS`` and ``INVITATION_KEYS_FILE``."""
        text = self.invitation_keys
        if self.invitation_keys_file:
            try:
                text += "\n" + Path(self.invitation_keys_file).read_text("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"cannot read {PREFIX}INVITATION_KEYS_FILE "
                                 f"{self.invitation_keys_file}: {exc}") from None
        keys = parse_public_keys(text)
        if self.enrollment == "invitations" and not keys:
            raise ValueError("invitation enrollment needs at least one issuer public key")
        return keys
