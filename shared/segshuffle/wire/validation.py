"""The project's words for what a validation refused.

pydantic reports a refused value in its own phrasing ("Input should be greater than or
equal to 0.000000000001", "List should have at least 2 items after validation, not 1").
Every place that shows such a refusal to a person (the command line's flags, the
services' settings, the problem documents of the HTTP API, the client's verification)
says it with :func:`reason` instead: the rule that was broken, as a predicate of the
thing it concerns ("must be at least 1e-12", "give at least 2 items"), numbers printed
with ``%g`` (integers exactly).

The translation is by pydantic's error ``type`` and its context (``ctx``), never by
parsing its message: the message changes between pydantic versions, the type does not.
Errors the project raises itself (a ``ValueError`` in a validator, pydantic's
``value_error``) already speak its words; only the prefix pydantic adds is dropped.  A
pydantic type without a translation here reads "is not valid": never pydantic's text.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic_core import ValidationError
from pydantic_core.core_schema import ErrorType

__all__ = ["at", "number", "reason", "summary"]

Context = Mapping[str, Any]

PYDANTIC_TYPES = frozenset(typing.get_args(ErrorType))
"""Every error type pydantic itself raises; any other type is the project's own
(a ``PydanticCustomError``), whose message is already in its words."""

OWN_MESSAGE_PREFIXES = ("Value error, ", "Assertion failed, ")
"""What pydantic puts before the message of a ``ValueError`` or ``AssertionError`` raised
in one of the project's validators."""


def number(value: Any) -> str:
    """A bound as the messages print it: integers exactly, other numbers with ``%g``
    (``1e-12``, ``0.01``), anything else as it is."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    try:
        return format(float(value), "g")
    except (TypeError, ValueError):
        return str(value)


def _count(amount: Any, noun: str) -> str:
    """``"2 items"``, ``"1 item"``: a count and its noun, plural unless it is one."""
    return f"{number(amount)} {noun}{'' if amount == 1 else 's'}"


def _elements(ctx: Context) -> str:
    """What a collection holds, for "give at least N ...": items of a list, entries of a
    mapping."""
    return "entry" if str(ctx.get("field_type", "")).lower() == "dictionary" else "item"


def _entries(amount: Any, ctx: Context) -> str:
    noun = _elements(ctx)
    if noun == "entry":
        return f"{number(amount)} {'entry' if amount == 1 else 'entries'}"
    return _count(amount, noun)


def _fixed(text: str) -> Callable[[Context], str]:
    return lambda ctx: text


#: The rule each pydantic error type states, from its context.
WORDS: dict[str, Callable[[Context], str]] = {
    # presence and shape
    "missing": _fixed("is required"),
    "missing_argument": _fixed("is required"),
    "missing_keyword_only_argument": _fixed("is required"),
    "missing_positional_only_argument": _fixed("is required"),
    "extra_forbidden": _fixed("is not a known field"),
    "unexpected_keyword_argument": _fixed("is not a known field"),
    "unexpected_positional_argument": _fixed("is not expected"),
    "multiple_argument_values": _fixed("is given more than once"),
    "frozen_field": _fixed("cannot be changed"),
    "frozen_instance": _fixed("cannot be changed"),
    "none_required": _fixed("must be null"),
    "json_invalid": _fixed("is not valid JSON"),
    "json_type": _fixed("must be JSON text"),
    "recursion_loop": _fixed("refers to itself"),
    "recursion_depth_exceeded": _fixed("is nested too deeply"),
    # kinds of value
    "model_type": _fixed("must be an object"),
    "model_attributes_type": _fixed("must be an object"),
    "dataclass_type": _fixed("must be an object"),
    "dataclass_exact_type": _fixed("must be an object"),
    "dict_type": _fixed("must be an object"),
    "frozen_dict_type": _fixed("must be an object"),
    "ordered_dict_type": _fixed("must be an object"),
    "counter_type": _fixed("must be an object"),
    "mapping_type": _fixed("must be an object"),
    "arguments_type": _fixed("must be an object"),
    "named_tuple_type": _fixed("must be a list"),
    "list_type": _fixed("must be a list"),
    "deque_type": _fixed("must be a list"),
    "tuple_type": _fixed("must be a list"),
    "set_type": _fixed("must be a list"),
    "frozen_set_type": _fixed("must be a list"),
    "iterable_type": _fixed("must be a list"),
    "set_item_not_hashable": _fixed("must hold only numbers and strings"),
    "string_type": _fixed("must be a string"),
    "string_unicode": _fixed("must be valid Unicode text"),
    "string_not_ascii": _fixed("must be ASCII text"),
    "bool_type": _fixed("must be true or false"),
    "bool_parsing": _fixed("must be true or false"),
    "int_type": _fixed("must be an integer"),
    "int_parsing": _fixed("must be an integer"),
    "int_from_float": _fixed("must be a whole number"),
    "int_parsing_size": _fixed("is too large an integer"),
    "float_type": _fixed("must be a number"),
    "float_parsing": _fixed("must be a number"),
    "finite_number": _fixed("must be a finite number"),
    "decimal_type": _fixed("must be a number"),
    "decimal_parsing": _fixed("must be a number"),
    "fraction_type": _fixed("must be a number"),
    "fraction_parsing": _fixed("must be a number"),
    "complex_type": _fixed("must be a number"),
    "complex_str_parsing": _fixed("must be a number"),
    "bytes_type": _fixed("must be bytes"),
    "url_type": _fixed("must be a URL"),
    "url_parsing": _fixed("must be a URL"),
    "url_syntax_violation": _fixed("must be a URL"),
    "uuid_type": _fixed("must be a UUID"),
    "uuid_parsing": _fixed("must be a UUID"),
    "date_type": _fixed("must be a date"),
    "date_parsing": _fixed("must be a date"),
    "date_from_datetime_parsing": _fixed("must be a date"),
    "date_from_datetime_inexact": _fixed("must be a date without a time of day"),
    "date_past": _fixed("must be in the past"),
    "date_future": _fixed("must be in the future"),
    "datetime_past": _fixed("must be in the past"),
    "datetime_future": _fixed("must be in the future"),
    "time_type": _fixed("must be a time of day"),
    "time_parsing": _fixed("must be a time of day"),
    "datetime_type": _fixed("must be a date and time"),
    "datetime_parsing": _fixed("must be a date and time"),
    "datetime_object_invalid": _fixed("must be a date and time"),
    "datetime_from_date_parsing": _fixed("must be a date and time"),
    "timezone_naive": _fixed("must not name a time zone"),
    "timezone_aware": _fixed("must name a time zone"),
    "time_delta_type": _fixed("must be a duration"),
    "time_delta_parsing": _fixed("must be a duration"),
    # bounds
    "greater_than": lambda ctx: f"must be greater than {number(ctx.get('gt'))}",
    "greater_than_equal": lambda ctx: f"must be at least {number(ctx.get('ge'))}",
    "less_than": lambda ctx: f"must be less than {number(ctx.get('lt'))}",
    "less_than_equal": lambda ctx: f"must be at most {number(ctx.get('le'))}",
    "multiple_of": lambda ctx: f"must be a multiple of {number(ctx.get('multiple_of'))}",
    "too_short": lambda ctx: f"give at least {_entries(ctx.get('min_length'), ctx)}",
    "too_long": lambda ctx: f"give at most {_entries(ctx.get('max_length'), ctx)}",
    "string_too_short": lambda ctx: (
        f"must be at least {_count(ctx.get('min_length'), 'character')} long"),
    "string_too_long": lambda ctx: (
        f"must be at most {_count(ctx.get('max_length'), 'character')} long"),
    "bytes_too_short": lambda ctx: f"must be at least {_count(ctx.get('min_length'), 'byte')}",
    "bytes_too_long": lambda ctx: f"must be at most {_count(ctx.get('max_length'), 'byte')}",
    "url_too_long": lambda ctx: (
        f"must be at most {_count(ctx.get('max_length'), 'character')} long"),
    "decimal_max_digits": lambda ctx: (
        f"must have at most {_count(ctx.get('max_digits'), 'digit')}"),
    "decimal_max_places": lambda ctx: (
        f"must have at most {_count(ctx.get('decimal_places'), 'decimal place')}"),
    "decimal_whole_digits": lambda ctx: (
        f"must have at most {_count(ctx.get('whole_digits'), 'digit')} before the point"),
    # choices and forms
    "literal_error": lambda ctx: f"must be {ctx.get('expected')}",
    "enum": lambda ctx: f"must be {ctx.get('expected')}",
    "string_pattern_mismatch": lambda ctx: f"must match the pattern {ctx.get('pattern')}",
    "url_scheme": lambda ctx: f"must be a URL with the scheme {ctx.get('expected_schemes')}",
    "uuid_version": lambda ctx: f"must be a version {ctx.get('expected_version')} UUID",
    "bytes_invalid_encoding": lambda ctx: f"must be valid {ctx.get('encoding')}",
    "timezone_offset": lambda ctx: (
        f"must have the time zone offset {number(ctx.get('tz_expected'))} s"),
    "union_tag_invalid": lambda ctx: (
        f"must have {ctx.get('discriminator')} {ctx.get('expected_tags')}"),
    "union_tag_not_found": lambda ctx: f"needs the field {ctx.get('discriminator')}",
}


def reason(error: Mapping[str, Any]) -> str:
    """The rule one validation error (an item of ``ValidationError.errors()``) says the
    value broke, in the project's words (module docstring); never pydantic's phrasing."""
    kind = str(error.get("type", ""))
    message = str(error.get("msg", ""))
    if kind in ("value_error", "assertion_error") or kind not in PYDANTIC_TYPES:
        for prefix in OWN_MESSAGE_PREFIXES:
            message = message.removeprefix(prefix)
        return message or "is not valid"
    words = WORDS.get(kind)
    return words(error.get("ctx") or {}) if words is not None else "is not valid"


def at(location: Sequence[Any], *, skip: Sequence[str] = ()) -> str:
    """A location (an error's ``loc``) as a dotted path, ``levels.0``, without the parts in
    ``skip`` (the HTTP edge's ``"body"``)."""
    return ".".join(str(part) for part in location if str(part) not in skip)


def summary(error: ValidationError, *, more: bool = True) -> str:
    """One line for a whole ``ValidationError``: the model, where and why its first error
    (``CampaignCreate: items: give at least 2 items``), and how many more there are."""
    found = error.errors(include_url=False, include_input=False)
    if not found:
        return f"{error.title}: is not valid"
    first = found[0]
    where = at(first.get("loc") or ())
    line = f"{error.title}: {where + ': ' if where else ''}{reason(first)}"
    if more and len(found) > 1:
        line += f" (and {len(found) - 1} more)"
    return line
