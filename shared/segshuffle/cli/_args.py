"""Argument parsing helpers shared by the subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any


def field_message(error: Mapping[str, Any], flags: Mapping[str, str] | None = None) -> str:
    """One validation error of a request model in the words of the command line: the flag
    of the field it concerns (``--field-name`` unless ``flags`` names another; none for a
    rule across fields), which of its values when it takes several, and the rule in the
    project's words (:func:`segshuffle.wire.validation.reason`), never pydantic's.

    pydantic is imported here, not at the top: building the parser stays light."""
    from segshuffle.wire.validation import reason

    message = reason(error)
    location = list(error.get("loc") or ())
    if not location:
        return message
    field, *inside = location
    flag = (flags or {}).get(str(field), "--" + str(field).replace("_", "-"))
    where = ", ".join(f"value {part + 1}" if isinstance(part, int) else str(part)
                      for part in inside)
    return f"{flag}{f' ({where})' if where else ''}: {message}"


def float_list(text: str) -> list[float]:
    """Parse ``"0.5,1,2"`` into floats; argparse turns the ValueError into one error line."""
    parts = [part.strip() for part in text.split(",")]
    if not parts or any(part == "" for part in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    try:
        return [float(part) for part in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}") from None


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def integer(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(value)
