"""Server settings: ``SEGSHUFFLE_SERVER_<FIELD>`` environment variables, ``segshuffle serve
server --field-name`` flags, and ``..._TOKEN_FILE`` secret files
(:mod:`segshuffle.services.configuration` gives the order of precedence).

Each field's description below is also its flag's help. The two tokens are secrets: they
come from the environment or a file only, never from a flag.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from ..configuration import ServiceSettings, database_field, port_field
from ..state_paths import StateDirectory
from . import signing

PREFIX = "SEGSHUFFLE_SERVER_"
MIN_TOKEN_LENGTH = 16


class Settings(ServiceSettings):
    """Everything the server needs to run."""

    model_config = SettingsConfigDict(env_prefix=PREFIX)

    database: str = database_field("server.sqlite3")
    port: int = port_field(8080)
    key_dir: str = Field("", description="directory of the campaigns' private key files "
                                         "(default: the SQLite path with .keys appended; "
                                         "required with PostgreSQL)")
    signing_key_file: str = Field(
        "", description="the Ed25519 document-signing key (PEM, 0600), created on first start "
                        "when missing (default: <key dir>/signing/document-signing-key.pem)")
    admin_token: str = Field("", repr=False, description="bearer token of the administrator "
                                                         "(required, >= 16 characters)")
    shuffler_token: str = Field(
        "", repr=False, description="bearer token the shuffler presents when it delivers "
                                    "batches (required, >= 16 characters, not the admin's)")
    allow_insecure_parameters: bool = Field(
        False, description="accept campaigns with fixed, unaccounted parameters (e.g. "
                           "lambda = 1, m = 0), for integrity tests only")
    shuffler_min_users: int = Field(
        0, ge=0, description="the shuffler's floor on participants per release (its "
                             "SEGSHUFFLE_SHUFFLER_MIN_USERS), when this server is told it: "
                             "campaigns asking for fewer are refused at creation, as the "
                             "shuffler would hold their rounds anyway (0: unknown, no check)")
    max_body_bytes: int = Field(4 << 20, ge=1024, description="largest accepted request body")
    decrypt_workers: int = Field(
        0, ge=0, description="processes that open large chunks (0: one per CPU; 1: no pool)")
    parallel_threshold: int = Field(2000, ge=1,
                                    description="chunk size from which the pool is used")
    decode_concurrency: int = Field(
        2, ge=1, le=64,
        description="queued chunks this process decodes at once (background decode tasks; "
                    "every replica on one PostgreSQL database decodes from the same queue)")
    decode_lease_seconds: float = Field(
        60.0, gt=0, le=3600, allow_inf_nan=False,
        description="how long a decode task's claim of a chunk holds without renewal (it "
                    "is renewed every third of it; a chunk of a dead process is decoded "
                    "again once it expires)")
    decode_idle_seconds: float = Field(
        1.0, gt=0, le=60, allow_inf_nan=False,
        description="longest wait of an idle decode task between two looks at the queue "
                    "(chunks queued by this process wake it at once)")
    completion_lease_seconds: float = Field(
        60.0, gt=0, le=3600, allow_inf_nan=False,
        description="how long the claim of a round's completion job (the optimizer, the "
                    "decoding) holds without renewal (renewed every third of it; the job of "
                    "a dead process is computed again once it expires)")
    completion_idle_seconds: float = Field(
        1.0, gt=0, le=60, allow_inf_nan=False,
        description="longest wait of the idle completion task between two looks for a "
                    "requested round (a request to this process wakes it at once)")

    @field_validator("admin_token", "shuffler_token")
    @classmethod
    def _usable_token(cls, token: str) -> str:
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"is required (at least {MIN_TOKEN_LENGTH} characters)")
        if any(c.isspace() for c in token) or not token.isprintable():
            raise ValueError("must be printable, without spaces")
        return token

    @model_validator(mode="after")
    def _distinct_tokens(self) -> Settings:
        if self.admin_token == self.shuffler_token:
            raise ValueError("the admin and shuffler tokens must differ")
        return self

    @model_validator(mode="after")
    def _key_directory_known(self) -> Settings:
        self.state_directory(self.key_dir, "key_dir")
        return self

    @property
    def key_directory(self) -> str:
        """``key_dir``, or the SQLite database path with ``.keys`` appended."""
        return self.state_directory(self.key_dir, "key_dir")

    @property
    def signing_key_path(self) -> str:
        """``signing_key_file``, or ``signing/document-signing-key.pem`` in the key directory."""
        if self.signing_key_file:
            return self.signing_key_file
        return str(signing.default_path(self.key_directory))

    def state_directories(self) -> list[StateDirectory]:
        """The database's directory, the key directory (made when missing) and, for a
        signing key file named outside it that does not exist yet, that file's directory
        (the key is created there at first start; an existing one is only read, so its
        directory may be read-only, e.g. a mounted secret)."""
        directories = [*super().state_directories(),
                       StateDirectory(self.label("key_dir"), Path(self.key_directory),
                                      made_when_missing=True)]
        if self.signing_key_file and not Path(self.signing_key_file).exists():
            directories.append(StateDirectory(self.label("signing_key_file"),
                                              Path(self.signing_key_file).parent,
                                              made_when_missing=True))
        return directories
