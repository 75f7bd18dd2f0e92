"""Shuffler settings: ``SEGSHUFFLE_SHUFFLER_<FIELD>`` environment variables, ``segshuffle serve
shuffler --field-name`` flags, and ``..._TOKEN_FILE`` secret files
(:mod:`segshuffle.services.configuration` gives the order of precedence).

Each field's description below is also its flag's help. The server and operator tokens
are secrets: they come from the environment or a file only, never from a flag.

Enrollment: ``invitations`` (the default) enrolls a user once per invitation signed by the
app operator's issuer key; ``open`` lets anyone enroll any number of times, which lets
fake users isolate a real one (the n-1 attack): for tests and closed networks only, logged
as a warning at startup and shown in every round status.

Rate limits apply per source address; a rate of 0 switches that limit off, and refusals
are 429 ``rate-limited`` with ``Retry-After``. Behind a reverse proxy, ``TRUSTED_PROXIES``
names the proxies whose ``X-Forwarded-For`` names the source. Lookups at the server of
campaigns the shuffler holds nothing for have one cap for all routes and sources together,
``UNKNOWN_LOOKUPS_PER_MINUTE`` in any 60 seconds per process (so the server sees at most
that times the replicas); refusals are 503 ``unavailable`` with ``Retry-After``.

``KEY_DIRECTORY`` holds the per-round keys that seal stored messages; point it at
memory-backed storage (tmpfs) so that a key never reaches a disk (docs/architecture.md,
"What the shuffler keeps").
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from segshuffle.core.rules import SHUFFLER_MIN_USERS
from segshuffle.crypto.invitations import parse_public_keys

from ..configuration import (
    Duration,
    ServiceSettings,
    Synchronous,
    database_field,
    port_field,
    synchronous_field,
)
from ..cors import parse_origins
from ..rate_limit import parse_networks
from ..state_paths import StateDirectory
from .upstream import UNKNOWN_LOOKUPS_PER_MINUTE

PREFIX = "SEGSHUFFLE_SHUFFLER_"
ENROLLMENT_MODES = ("invitations", "open")

#: A rate in events per second, 0 for no limit.
_RATE = {"ge": 0, "allow_inf_nan": False}


class Settings(ServiceSettings):
    """Everything the shuffler needs to run."""

    model_config = SettingsConfigDict(env_prefix=PREFIX)

    database: str = database_field("shuffler.sqlite3")
    port: int = port_field(8081)
    synchronous: Synchronous = synchronous_field("NORMAL")
    key_directory: str = Field(
        "", description="directory of the per-round sealing keys (default: the SQLite "
                        "path with .keys appended; required with PostgreSQL, shared by "
                        "every replica; tmpfs keeps them off disk)")
    server_url: str = Field("http://127.0.0.1:8080",
                            description="base URL of the server (analyzer)")
    server_token: str = Field("", repr=False,
                              description="the shuffler's credential presented to the server")
    server_ca_file: str = Field(
        "", description="PEM file of the certificate authorities trusted for an https:// "
                        "server URL (default: the system's trust store)")
    operator_token: str = Field("", repr=False,
                                description="bearer token of the operator, who releases rounds")
    enrollment: Literal["invitations", "open"] = Field(
        "invitations", description="invitations: one enrollment per signed invitation; open: "
                                   "anyone, any number of times (unsafe against fake users)")
    invitation_keys: str = Field(
        "", description="the issuer's Ed25519 public key(s), unpadded base64url, comma "
                        "separated ('segshuffle admin issuer-key' prints one)")
    invitation_keys_file: str = Field("", description="a file of issuer public keys, one a line")
    invitation_skew: float = Field(60.0, ge=0, allow_inf_nan=False,
                                   description="seconds an expired invitation is still accepted")
    enroll_rate: float = Field(0.1, **_RATE, description="enrollments per second per source")
    enroll_burst: int = Field(10, ge=1, description="enrollments a source may burst")
    submit_rate: float = Field(1.0, **_RATE, description="submissions per second per source")
    submit_burst: int = Field(30, ge=1, description="submissions a source may burst")
    read_rate: float = Field(50.0, **_RATE,
                             description="public GETs (campaign view, key config, round "
                                         "status) per second per source")
    read_burst: int = Field(500, ge=1, description="public GETs a source may burst")
    rate_limit_sources: int = Field(
        65536, ge=1, description="sources tracked at once, least recently seen evicted first")
    trusted_proxies: str = Field(
        "", description="addresses or networks of reverse proxies whose X-Forwarded-For "
                        "names the source, comma separated")
    unknown_lookups_per_minute: int = Field(
        UNKNOWN_LOOKUPS_PER_MINUTE, ge=1, le=100_000,
        description="requests to the server, in any 60 seconds, that look up campaigns this "
                    "process holds nothing for (all routes and sources together; each "
                    "replica has its own); beyond it 503 with Retry-After")
    min_users: int = Field(SHUFFLER_MIN_USERS, ge=1,
                           description="the shuffler's own floor on participants per "
                                       "release, on top of the campaign's")
    auto_release: int = Field(0, ge=0, description="release a round automatically at this many "
                                                   "participants (0: only on request)")
    chunk_size: int = Field(5000, ge=1, description="ciphertexts per chunk forwarded")
    spill_directory: str = Field(
        "", description="where a release keeps its unnamed, sealed spill file while it puts "
                        "a round in its secret order, about the round's size (default: the "
                        "system's temporary directory)")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="largest accepted request body")
    campaign_cache_seconds: Duration = Field(
        1.0, description="how long a campaign view that can still change is cached")
    document_cache_entries: int = Field(1024, ge=1,
                                        description="most documents cached from the server")
    upstream_connections: int = Field(16, ge=1,
                                      description="most connections to the server at once")
    upstream_pool_timeout: Duration = Field(
        2.0, description="seconds a request to the server may wait for a free connection")
    forward_timeout: Duration = Field(120.0,
                                      description="per-request timeout of batch delivery")
    forward_window: int = Field(
        4, ge=1, le=64,
        description="chunk deliveries of a round in flight at once (the server's replicas "
                    "queue and decode them in parallel); keep it below upstream_connections")
    release_wait: float = Field(
        60.0, gt=0, allow_inf_nan=False,
        description="seconds a release request with wait=true waits for the server's "
                    "acknowledgement before answering 202")
    release_retry_seconds: float = Field(
        6 * 3600.0, gt=0, allow_inf_nan=False,
        description="how long forwarding retries network errors, 5xx and 429 before it stops")
    release_lease_seconds: float = Field(
        10.0, gt=0, le=3600, allow_inf_nan=False,
        description="how long a replica's lease on forwarding a round lasts unless renewed; "
                    "another replica takes over a dead one's forwarding within about 1.5 "
                    "times this")

    cors_origins: str = Field(
        "", description="web origins (scheme://host[:port], comma-separated) whose pages may "
                        "call the client routes (campaign view, key config, round status, "
                        "enrollments, submissions); none by default (services/cors.py)")

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, text: str) -> str:
        parse_origins(text)
        return text

    @field_validator("server_token", "operator_token")
    @classmethod
    def _required_token(cls, token: str) -> str:
        if not token:
            raise ValueError("is required")
        return token

    @field_validator("server_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return url

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, text: str) -> str:
        parse_networks(text)
        return text

    @model_validator(mode="after")
    def _issuer_key_for_invitations(self) -> Settings:
        if self.enrollment == "invitations" and not (self.invitation_keys.strip()
                                                     or self.invitation_keys_file):
            raise ValueError(
                f"invitation enrollment needs the issuer public key: set {PREFIX}INVITATION_KEYS "
                f"or {PREFIX}INVITATION_KEYS_FILE (segshuffle admin issuer-key prints it), "
                f"or {PREFIX}ENROLLMENT=open to accept anyone (unsafe against fake users)")
        return self

    @model_validator(mode="after")
    def _round_key_directory_known(self) -> Settings:
        self.state_directory(self.key_directory, "key_directory")
        return self

    @property
    def round_key_directory(self) -> str:
        """``key_directory``, or the SQLite database path with ``.keys`` appended."""
        return self.state_directory(self.key_directory, "key_directory")

    def state_directories(self) -> list[StateDirectory]:
        """The database's directory, the round key directory (made when missing) and the
        spill directory if one is set (it must exist: a release makes its unnamed spill
        files there)."""
        directories = [*super().state_directories(),
                       StateDirectory(self.label("key_directory"),
                                      Path(self.round_key_directory), made_when_missing=True)]
        if self.spill_directory:
            directories.append(StateDirectory(self.label("spill_directory"),
                                              Path(self.spill_directory),
                                              made_when_missing=False))
        return directories

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
