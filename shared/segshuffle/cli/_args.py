"""Argument parsing helpers shared by the subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any


def field_message(error: Mapping[str, Any], flags: Mapping[str, str] | None = None) -> str:
    """One validation error of a request model in the words of the command line: the flag
    of the field it concerns (``--field-name`` unless ``flags`` names another; none for a
    rule across fields) and the rule, without the validation library's prefixes."""
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    field = str(error["loc"][0]) if error["loc"] else ""
    if not field:
        return message
    flag = (flags or {}).get(field, "--" + field.replace("_", "-"))
    return f"{flag}: {message}"


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
