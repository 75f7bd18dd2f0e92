"""What both services' settings share: reading ``PREFIX_FIELD`` environment variables
into a settings dataclass, and the checks every service applies to its settings."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from typing import Any, ClassVar, Self

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
LOG_LEVELS = ("debug", "info", "warning", "error")
SYNCHRONOUS_MODES = ("NORMAL", "FULL", "EXTRA")


class EnvironmentSettings:
    """Mixin for a frozen settings dataclass read from ``prefix + FIELD`` variables."""

    prefix: ClassVar[str] = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Self:
        """Settings from the environment; keyword ``overrides`` that are not ``None`` win."""
        values = values_from_environment(cls, cls.prefix, os.environ if environ is None
                                         else environ)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_changes(self, **changes: Any) -> Self:
        return replace(self, **changes)  # type: ignore[type-var]


MAX_SECRET_FILE_BYTES = 4096


def _secret(variable: str, value: str | None, path: str | None) -> str | None:
    """The secret from ``variable`` or from the file ``variable_FILE`` names (not both)."""
    if not path:
        return value
    if value:
        raise ValueError(f"set {variable} or {variable}_FILE, not both")
    try:
        with open(path, "rb") as handle:
            content = handle.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {variable}_FILE {path}: {exc.strerror}") from None
    if len(content) > MAX_SECRET_FILE_BYTES:
        raise ValueError(f"{variable}_FILE {path} is larger than {MAX_SECRET_FILE_BYTES} bytes")
    try:
        return content.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ValueError(f"{variable}_FILE {path} is not UTF-8 text") from None


def values_from_environment(settings_class: type, prefix: str, environ: Mapping[str, str]
                            ) -> dict[str, Any]:
    """Field values found in ``environ`` as ``prefix + FIELD_NAME``, converted by the type
    of each field's default (bool, int, float, else string); empty values are ignored.

    A secret (a field whose name ends in ``_token``) may instead come from a file named by
    ``prefix + FIELD_NAME + "_FILE"`` (Docker and Kubernetes secrets), so that it shows in
    no process environment; its content, stripped of the trailing newline, is the value.
    Setting both is refused.
    """
    values: dict[str, Any] = {}
    for field in fields(settings_class):
        variable = prefix + field.name.upper()
        raw = environ.get(variable)
        if field.name.endswith("_token"):
            raw = _secret(variable, raw, environ.get(variable + "_FILE"))
        if raw is None or raw == "":
            continue
        default = field.default
        if isinstance(default, bool):
            if raw.lower() not in _TRUE | _FALSE:
                raise ValueError(f"{variable} must be true or false, got {raw!r}")
            values[field.name] = raw.lower() in _TRUE
        elif isinstance(default, int):
            try:
                values[field.name] = int(raw)
            except ValueError:
                raise ValueError(f"{variable} must be an integer, got {raw!r}") from None
        elif isinstance(default, float):
            try:
                values[field.name] = float(raw)
            except ValueError:
                raise ValueError(f"{variable} must be a number, got {raw!r}") from None
        else:
            values[field.name] = raw
    return values


def check_common(settings: Any, integer_minimums: Iterable[tuple[str, int]],
                 durations: Iterable[str] = ()) -> None:
    """Checks every service applies: integer fields with their minimums, the port range,
    the log level, the SQLite synchronous mode, a non-empty database path, and durations
    (the header and body timeouts plus ``durations``) in (0, 3600] seconds."""
    for name, minimum in (("port", 0), *integer_minimums):
        value = getattr(settings, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{name.replace('_', ' ')} must be an integer >= {minimum}, "
                             f"got {value!r}")
    if settings.port > 65535:
        raise ValueError(f"port must be <= 65535, got {settings.port}")
    if settings.log_level.lower() not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got "
                         f"{settings.log_level!r}")
    if getattr(settings, "log_format", "json") not in ("json", "text"):
        raise ValueError(f"log format must be json or text, got {settings.log_format!r}")
    if settings.synchronous.upper() not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be NORMAL, FULL or EXTRA, got "
                         f"{settings.synchronous!r}")
    if not settings.database:
        raise ValueError("database path must not be empty")
    for name in ("header_timeout", "body_timeout", *durations):
        value = getattr(settings, name)
        if not (isinstance(value, int | float) and 0 < value <= 3600):
            raise ValueError(f"{name.replace('_', ' ')} must be in (0, 3600] seconds, "
                             f"got {value!r}")
