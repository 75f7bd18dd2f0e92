"""What both services' settings share, on pydantic-settings.

A service's settings are one frozen :class:`ServiceSettings` subclass. Every field is read,
in this order of precedence, from

1. keyword arguments (``segshuffle serve`` passes its flags this way: :func:`add_flags`
   makes one ``--field-name`` flag per field that is not a secret);
2. the environment variable ``PREFIX + FIELD_NAME`` (empty values are ignored);
3. for a secret (a field whose name ends in ``_token``), the file named by
   ``PREFIX + FIELD_NAME + "_FILE"`` (Docker and Kubernetes secrets), so that the secret
   shows in no process environment and no process listing; setting both the variable and
   the file is refused;
4. the field's default.

pydantic converts and checks every value (types, bounds, choices); a refusal is turned
into one line naming the environment variable by :func:`describe` and raised as
:class:`SettingsError`, which the command line prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import os
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Self, get_args, get_origin

from pydantic import Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from segshuffle.wire.validation import reason

from .database import DatabaseTarget, parse_database
from .state_paths import StateDirectory

MAX_SECRET_FILE_BYTES = 4096
SECRET_SUFFIX = "_token"

LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["json", "text"]
Synchronous = Literal["NORMAL", "FULL", "EXTRA"]
#: Seconds in (0, 3600]: every timeout and cache lifetime of both services.
Duration = Annotated[float, Field(gt=0, le=3600)]


class SettingsError(ValueError):
    """Settings that cannot be used; the message is one line naming the variable."""


def is_secret(field_name: str) -> bool:
    """Secrets are the fields named ``..._token``: never flags, never in a repr or an error."""
    return field_name.endswith(SECRET_SUFFIX)


def read_secret_file(variable: str, path: str) -> str:
    """The content of the secret file ``path`` named by ``variable + "_FILE"``: UTF-8 text
    of at most :data:`MAX_SECRET_FILE_BYTES` bytes, without its trailing newline."""
    try:
        with open(path, "rb") as handle:
            content = handle.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise SettingsError(f"cannot read {variable}_FILE {path}: {exc.strerror}") from None
    if len(content) > MAX_SECRET_FILE_BYTES:
        raise SettingsError(f"{variable}_FILE {path} is larger than {MAX_SECRET_FILE_BYTES} "
                            f"bytes")
    try:
        return content.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise SettingsError(f"{variable}_FILE {path} is not UTF-8 text") from None


class SecretFilesSource(PydanticBaseSettingsSource):
    """Secrets from the files that ``PREFIX + NAME + "_FILE"`` variables name."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Required by the interface; __call__ reads every secret at once instead.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        prefix = self.config.get("env_prefix", "")
        values: dict[str, Any] = {}
        for name in self.settings_cls.model_fields:
            if not is_secret(name):
                continue
            variable = prefix + name.upper()
            path = os.environ.get(variable + "_FILE")
            if not path:
                continue
            if os.environ.get(variable):
                raise SettingsError(f"set {variable} or {variable}_FILE, not both")
            values[name] = read_secret_file(variable, path)
        return values


def port_field(default: int) -> Any:
    """The ``port`` field with a service's default port."""
    return Field(default, ge=0, le=65535,
                 description="listen port (0 picks a free port, logged at start)")


def database_field(default: str) -> Any:
    """The ``database`` field with a service's default SQLite file."""
    return Field(default, min_length=1,
                 description="a SQLite file (path or sqlite:///path) or a PostgreSQL URL "
                             "(postgresql://user@host/db; password from PGPASSFILE or "
                             "PGPASSWORD)")


def synchronous_field(default: str) -> Any:
    """The ``synchronous`` field (SQLite only) with a service's default mode."""
    return Field(default, description="SQLite synchronous mode: NORMAL survives process "
                                      "crashes, FULL and EXTRA also power loss")


class ServiceSettings(BaseSettings):
    """The settings every service has; subclasses set ``env_prefix`` and the defaults."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", env_ignore_empty=True,
                                      validate_default=True, case_sensitive=False)

    host: str = Field("127.0.0.1", description="listen address")
    port: int = port_field(0)
    database: str = database_field("service.sqlite3")
    database_pool_size: int = Field(8, ge=1, le=256,
                                    description="PostgreSQL connections per process")
    synchronous: Synchronous = synchronous_field("FULL")
    log_level: LogLevel = Field("info", description="least severity logged")
    log_format: LogFormat = Field("json", description="log lines as JSON objects or plain text")
    header_timeout: Duration = Field(
        10.0, description="seconds a client may take to send a request's headers")
    body_timeout: Duration = Field(
        30.0, description="seconds a client may take to send a request's body")
    lifeline_fd: int | None = Field(
        None, ge=0, description="a pipe's read end inherited from the process that started "
                                "this one: the service stops when it reads end of file (that "
                                "process is gone; services.lifeline)")

    @field_validator("database")
    @classmethod
    def _database_url(cls, value: str) -> str:
        parse_database(value)
        return value

    @property
    def database_target(self) -> DatabaseTarget:
        """The parsed ``database`` setting (SQLite file or PostgreSQL URL)."""
        return parse_database(self.database)

    def state_directory(self, configured: str, setting: str) -> str:
        """A directory of key files: ``configured``, else next to a SQLite database
        (``<path>.keys``); with PostgreSQL it must be configured (replicas share it)."""
        if configured:
            return configured
        target = self.database_target
        if target.kind != "sqlite":
            raise SettingsError(f"{self.prefix()}{setting.upper()} is required with a "
                                "PostgreSQL database (a directory every replica shares)")
        return f"{target.location}.keys"

    @classmethod
    def label(cls, setting: str) -> str:
        """A setting as an operator gives it: ``SEGSHUFFLE_SERVER_KEY_DIR (--key-dir)``."""
        return f"{cls.prefix()}{setting.upper()} (--{setting.replace('_', '-')})"

    def state_directories(self) -> list[StateDirectory]:
        """The directories this service creates files in, checked before it starts
        (:func:`..state_paths.require_writable`). Here a SQLite database's directory,
        which must exist (the database, its -wal and -shm files go there); each service
        adds its own."""
        target = self.database_target
        if target.kind != "sqlite" or target.location == ":memory:":
            return []
        return [StateDirectory(self.label("database"), Path(target.location).parent,
                               made_when_missing=False)]

    @field_validator("synchronous", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, SecretFilesSource(settings_cls)

    @classmethod
    def prefix(cls) -> str:
        """The environment variables' prefix, e.g. ``SEGSHUFFLE_SERVER_``."""
        return str(cls.model_config.get("env_prefix", ""))

    @classmethod
    def from_env(cls, **overrides: Any) -> Self:
        """Settings from the environment and secret files; ``overrides`` that are not
        ``None`` win. Unusable settings raise :class:`SettingsError` (one line)."""
        try:
            return cls(**{k: v for k, v in overrides.items() if v is not None})
        except ValidationError as exc:
            raise SettingsError(describe(exc, cls.prefix())) from None


def describe(error: ValidationError, prefix: str) -> str:
    """One line for a settings refusal: the variable, the rule it broke in the project's
    words (:func:`segshuffle.wire.validation.reason`) and, unless the field is a secret,
    the value that was refused."""
    parts = []
    for item in error.errors(include_url=False):
        message = reason(item)
        location = [str(part) for part in item.get("loc", ())]
        if not location:
            parts.append(message)
            continue
        name = location[0]
        if is_secret(name):
            parts.append(f"{prefix}{name.upper()}: {message}")
        else:
            flag = "--" + name.replace("_", "-")
            parts.append(f"{prefix}{name.upper()} ({flag}): {message} "
                         f"(got {item.get('input')!r})")
    return "; ".join(parts) or str(error)


def add_flags(parser: argparse.ArgumentParser, settings_class: type[ServiceSettings]) -> None:
    """One ``--field-name`` flag per setting that is not a secret, with the field's
    description, choices and default as help. Every flag defaults to ``None`` (not given),
    so the environment and the field's default apply unless the flag is used."""
    prefix = settings_class.prefix()
    for name, field in settings_class.model_fields.items():
        if is_secret(name):
            continue
        flag = "--" + name.replace("_", "-")
        help_text = (field.description or name.replace("_", " ")) + \
            f" (default {field.default!r}; env {prefix}{name.upper()})"
        kind, choices = _flag_type(field.annotation)
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
        else:
            parser.add_argument(flag, type=kind, choices=choices, default=None,
                                metavar=None if choices else name.split("_")[-1].upper(),
                                help=help_text)


def settings_from_flags(args: argparse.Namespace, settings_class: type[ServiceSettings]
                        ) -> dict[str, Any]:
    """The values of the flags :func:`add_flags` made that were given on the command line."""
    return {name: getattr(args, name) for name in settings_class.model_fields
            if not is_secret(name) and getattr(args, name, None) is not None}


def _flag_type(annotation: Any) -> tuple[Any, tuple[str, ...] | None]:
    """The argparse type and choices of a field's annotation."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal:
        return str, tuple(str(choice) for choice in get_args(annotation))
    if get_origin(annotation) in (types.UnionType, typing.Union):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if annotation in (bool, int, float):
        return annotation, None
    return str, None
