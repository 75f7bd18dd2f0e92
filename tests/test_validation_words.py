"""Refusals in the project's words: the command line's flags, the services' settings, the
HTTP API's invalid-field problems and the client's verification say which rule a value
broke ("--delta: must be at least 1e-12"), never the validation library's phrasing
("Input should be greater than or equal to 0.000000000001", "List should have at least 2
items after validation, not 1")."""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from pydantic import ValidationError
from pydantic_core.core_schema import ErrorType

from segshuffle.cli import main as cli
from segshuffle.services.http_edge import validation_problem
from segshuffle.services.server import create_app
from segshuffle.services.server.settings import Settings as ServerSettings
from segshuffle.services.shuffler.settings import Settings as ShufflerSettings
from segshuffle.wire.models import CampaignCreate

from .test_server_support import ADMIN, make_settings

PYDANTIC_PHRASES = re.compile(
    r"should be|should have|Input should|after validation|type=|Field required|"
    r"Extra inputs|valid integer|valid number|valid boolean|valid string|Value error|"
    r"Assertion failed|errors\.pydantic\.dev|validation errors? for|input_value",
    re.IGNORECASE)
"""What pydantic's messages say, and the project's never do."""

CREATE = ["admin", "campaign", "create", "--id", "fruit", "--domain-size", "10",
          "--set-size", "2", "--levels", "0.5,1"]
"""A valid ``campaign create`` without its server: every refusal below comes before any
request."""


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    status = cli.main(argv)
    return status, capsys.readouterr().err


def _assert_own_words(text: str) -> None:
    assert not PYDANTIC_PHRASES.search(text), text


# -- the two messages users met ---------------------------------------------------------------

def test_too_few_items_is_said_in_the_command_lines_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = tmp_path / "items.txt"
    items.write_text("apple\n")
    status, error = _run(capsys, ["admin", "campaign", "create", "--id", "fruit", "--items",
                                  str(items), "--set-size", "1", "--levels", "1"])
    assert status == 2
    assert error == "segshuffle: error: invalid campaign: --items: give at least 2 items\n"


def test_a_delta_below_the_floor_names_the_floor_with_g(
        capsys: pytest.CaptureFixture[str]) -> None:
    status, error = _run(capsys, [*CREATE, "--delta", "0"])
    assert status == 2
    assert error == "segshuffle: error: invalid campaign: --delta: must be at least 1e-12\n"


# -- a sweep over the flags -------------------------------------------------------------------

BAD_FLAGS: list[tuple[str, ...]] = [
    ("--domain-size", "1"), ("--domain-size", "0"), ("--domain-size", "-3"),
    ("--domain-size", "1000000000"),
    ("--set-size", "0"), ("--set-size", "1000000000"),
    ("--levels", "0"), ("--levels", "31"), ("--levels", "2,1"), ("--levels", "nan"),
    ("--levels", "1e308,1e309"), ("--levels", ",".join(["1"] * 2000)),
    ("--delta", "0"), ("--delta", "1"), ("--delta", "2"), ("--delta", "nan"),
    ("--delta", "inf"), ("--delta", "1e-13"), ("--delta", "-1"),
    ("--min-users", "1"), ("--min-users", "0"), ("--min-users", "1000000000000"),
    ("--dropout-tolerance", "-0.1"), ("--dropout-tolerance", "1"),
    ("--dropout-tolerance", "nan"),
    ("--fake-tolerance", "1.5"), ("--fake-tolerance", "-1"), ("--fake-tolerance", "inf"),
    ("--level-privacy", "0"), ("--level-privacy", "-1"), ("--level-privacy", "1e6"),
    ("--level-privacy", "inf"),
    ("--blanket-mode", "independent", "--domain-size", "100000"),
]


@pytest.mark.parametrize("flags", BAD_FLAGS, ids=lambda flags: " ".join(flags)[:40])
def test_every_refused_flag_is_one_line_in_the_projects_words(
        flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    status, error = _run(capsys, [*CREATE, *flags])
    assert status == 2, error
    assert error.startswith("segshuffle: error: ") and error.count("\n") == 1, error
    _assert_own_words(error)


OTHER_COMMANDS: list[list[str]] = [
    ["admin", "invitations", "c1", "--count", "0", "--out", "x", "--issuer-key", "k"],
    ["admin", "invitations", "c1", "--count", "5", "--expires-in", "0", "--out", "x",
     "--issuer-key", "k"],
    ["admin", "status", "c1", "--interval", "0"],
    ["admin", "status", "bad id"],
    ["admin", "release", "c1", "--round", "1", "--timeout", "0"],
    ["admin", "release", "c1", "--round", "3"],
    ["admin", "results", "c1", "--format", "csv"],
    ["optimize", "--users", "1", "--domain-size", "10", "--set-size", "1", "--levels", "1",
     "--shares", "1", "--delta", "1e-5"],
    ["optimize", "--users", "100", "--domain-size", "10", "--set-size", "1", "--levels", "1",
     "--shares", "1", "--delta", "0"],
    ["audit", "--users", "100", "--domain-size", "10", "--set-size", "1", "--blanket", "-1",
     "--lam", "0.5", "--delta", "1e-5"],
    ["serve", "shuffler", "--port", "70000"],
    ["serve", "server", "--port", "http"],
]
"""Other commands' refused flags: each is refused before any request or computation."""


@pytest.mark.parametrize("argv", OTHER_COMMANDS, ids=lambda argv: " ".join(argv)[:40])
def test_other_commands_refuse_in_the_projects_words(
        argv: list[str], capsys: pytest.CaptureFixture[str],
        environment: Callable[[Mapping[str, str]], None]) -> None:
    environment({})
    try:
        status = cli.main(argv)
    except SystemExit as stopped:  # argparse's own refusals exit
        status = stopped.code
    error = capsys.readouterr().err
    assert status == 2, error
    assert error.count("\n") == 1, error
    _assert_own_words(error)


@pytest.mark.parametrize("lines", [["apple"], ["apple", "x" * 300], ["apple", "apple"],
                                   [f"item{i}" for i in range(2)] + ["é" * 201]])
def test_every_refused_items_file_is_one_line_in_the_projects_words(
        lines: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = tmp_path / "items.txt"
    items.write_text("\n".join(lines) + "\n", encoding="utf-8")
    status, error = _run(capsys, ["admin", "campaign", "create", "--id", "fruit", "--items",
                                  str(items), "--set-size", "1", "--levels", "1"])
    assert status == 2 and error.count("\n") == 1, error
    _assert_own_words(error)


def test_an_item_name_too_long_names_the_value_and_the_limit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = tmp_path / "items.txt"
    items.write_text("apple\n" + "x" * 300 + "\n")
    status, error = _run(capsys, ["admin", "campaign", "create", "--id", "fruit", "--items",
                                  str(items), "--set-size", "1", "--levels", "1"])
    assert status == 2
    assert error == ("segshuffle: error: invalid campaign: --items (value 2): must be at "
                     "most 200 characters long\n")


def test_a_stray_validation_error_is_one_line_in_the_projects_words(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A handler that lets a ValidationError through (a ValueError, whose text spans
    lines) still prints one line."""
    from segshuffle.cli import admin_campaign

    def refuse(args: Any) -> int:
        CampaignCreate.model_validate({"id": "x", "domain_size": 1, "set_size": 1,
                                       "levels": [1], "min_users": 2})
        return 0

    monkeypatch.setattr(admin_campaign, "campaign_create", refuse)
    status, error = _run(capsys, CREATE)
    assert status == 2
    assert error == "segshuffle: error: CampaignCreate: domain_size: must be at least 2\n"


# -- the services' settings -------------------------------------------------------------------

BAD_SETTINGS = ["nonsense", "-1", "0", "1e12", "99999999999999999999999", "nan", "yes please",
                "OFF", "3.5"]


def _settings_cases() -> list[tuple[type[Any], str, str]]:
    cases = []
    for settings_class in (ServerSettings, ShufflerSettings):
        for name in settings_class.model_fields:
            if name.endswith("_token"):
                continue
            cases.extend((settings_class, name, value) for value in BAD_SETTINGS)
    return cases


REQUIRED = {
    ServerSettings: {"SEGSHUFFLE_SERVER_ADMIN_TOKEN": "a" * 24,
                     "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": "s" * 24},
    ShufflerSettings: {"SEGSHUFFLE_SHUFFLER_SERVER_TOKEN": "s" * 24,
                       "SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN": "o" * 24,
                       "SEGSHUFFLE_SHUFFLER_ENROLLMENT": "open"},
}


def test_every_refused_setting_is_said_in_the_projects_words(
        environment: Callable[[Mapping[str, str]], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every setting of both services, given values of the wrong kind or out of range
    through its environment variable: a refusal names the variable in the project's
    words."""
    refused = 0
    for settings_class, name, value in _settings_cases():
        variable = f"{settings_class.prefix()}{name.upper()}"
        environment({**REQUIRED[settings_class], variable: value})
        try:
            settings_class.from_env()
        except ValueError as exc:
            message = str(exc)
            assert "\n" not in message and variable in message, message
            _assert_own_words(message)
            refused += 1
        monkeypatch.delenv(variable)
    assert refused > 50  # the sweep reaches the validation (it is not all accepted)


# -- the HTTP API ------------------------------------------------------------------------------

GOOD_BODY: dict[str, Any] = {"id": "c1", "domain_size": 10, "set_size": 2,
                             "levels": [0.5, 1], "min_users": 3}
BAD_BODIES: list[dict[str, Any]] = [
    {"domain_size": 1}, {"domain_size": "ten"}, {"domain_size": 10.5}, {"set_size": None},
    {"levels": []}, {"levels": [0]}, {"levels": "1,2"}, {"levels": [2, 1]},
    {"delta": 0}, {"delta": "small"}, {"min_users": 1}, {"fake_tolerance": 1.5},
    {"items": ["apple"]}, {"items": ["apple", 3]}, {"items": ["apple", ""]},
    {"items": "apple"}, {"id": "no spaces"}, {"id": 7}, {"blanket_mode": "best"},
    {"fixed_size": "maybe"}, {"unknown": 1}, {"insecure_parameters": {"m": 1}},
    {"insecure_parameters": []}, {"level_privacy": -1},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with TestClient(create_app(make_settings(tmp_path_factory.mktemp("server")))) as client:
        yield client


@pytest.mark.parametrize("change", BAD_BODIES, ids=lambda change: str(change)[:40])
def test_an_invalid_body_is_a_problem_in_the_projects_words(server: Any,
                                                            change: dict[str, Any]) -> None:
    answer = server.post("/v1/campaigns", json={**GOOD_BODY, **change}, headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    _assert_own_words(problem["detail"])
    for listed in problem.get("errors", []):
        _assert_own_words(listed["msg"])
    assert not any(key in problem for key in ("input", "ctx", "url"))


def test_an_invalid_body_names_the_field_and_the_rule(server: Any) -> None:
    answer = server.post("/v1/campaigns", json={**GOOD_BODY, "delta": 0}, headers=ADMIN)
    problem = answer.json()
    assert problem["detail"] == "delta: must be at least 1e-12"
    assert problem["errors"] == [{"loc": ["body", "delta"], "msg": "must be at least 1e-12"}]


def test_the_frameworks_validation_errors_are_said_in_the_projects_words() -> None:
    """The framework's own request validation (query and path parameters) maps to the
    same words."""
    refused = RequestValidationError([
        {"type": "int_parsing", "loc": ("query", "limit"),
         "msg": "Input should be a valid integer, unable to parse string as an integer"},
        {"type": "missing", "loc": ("body", "id"), "msg": "Field required"}])
    problem = validation_problem(refused)
    assert problem.body()["detail"] == "query.limit: must be an integer"
    assert problem.body()["errors"] == [
        {"loc": ["query", "limit"], "msg": "must be an integer"},
        {"loc": ["body", "id"], "msg": "is required"}]


# -- the translation itself (segshuffle.wire.validation) -------------------------------------

CONTEXT = {"gt": 0, "ge": 1e-12, "lt": 1.0, "le": 65535, "multiple_of": 2, "min_length": 2,
           "max_length": 200, "field_type": "List", "expected": "'slots' or 'independent'",
           "pattern": "^[a-z]+$", "expected_schemes": "'https'", "expected_version": 4,
           "encoding": "base64", "encoding_error": "bad padding", "tz_expected": 0,
           "discriminator": "'kind'", "expected_tags": "'a', 'b'", "tag": "c",
           "max_digits": 3, "decimal_places": 2, "whole_digits": 1, "actual_length": 1,
           "error": "x", "class": "X", "attribute": "a", "function": "f"}


OWN_MESSAGES = {"value_error": "Value error, levels must be strictly increasing",
                "assertion_error": "Assertion failed, levels must be strictly increasing"}
"""The two pydantic types that carry a message of the project's validators."""


@pytest.mark.parametrize("kind", typing.get_args(ErrorType))
def test_every_pydantic_error_type_has_words_of_the_project(kind: str) -> None:
    """pydantic's message (here a stand-in in its phrasing) is never what is said."""
    from segshuffle.wire.validation import reason

    message = OWN_MESSAGES.get(kind, "Input should be anything")
    words = reason({"type": kind, "loc": ("field",), "msg": message, "ctx": CONTEXT})
    assert words and not words[0].isupper(), words
    _assert_own_words(words)


def test_bounds_are_printed_with_g_and_integers_exactly() -> None:
    from segshuffle.wire.validation import number, reason

    assert reason({"type": "greater_than_equal", "msg": "", "ctx": {"ge": 1e-12}}) == \
        "must be at least 1e-12"
    assert reason({"type": "less_than_equal", "msg": "", "ctx": {"le": 1_000_000}}) == \
        "must be at most 1000000"
    assert reason({"type": "too_short", "msg": "", "ctx": {"min_length": 1,
                                                         "field_type": "List"}}) == \
        "give at least 1 item"
    assert [number(x) for x in (0.01, 30.0, 1e-5, 2, math.inf)] == [
        "0.01", "30", "1e-05", "2", "inf"]


def test_the_projects_own_messages_keep_their_words() -> None:
    """A validator's ValueError (pydantic's value_error) and a custom error type already
    speak the project's words: only pydantic's prefix goes."""
    from segshuffle.wire.validation import reason

    assert reason({"type": "value_error", "msg": "Value error, levels must be strictly "
                   "increasing"}) == "levels must be strictly increasing"
    assert reason({"type": "segshuffle_rule", "msg": "the hash does not match"}) == \
        "the hash does not match"


def test_a_whole_validation_error_is_one_line() -> None:
    from segshuffle.wire.validation import summary

    with pytest.raises(ValidationError) as refused:
        CampaignCreate.model_validate({"id": "x", "domain_size": 1, "set_size": 0,
                                       "levels": [1], "min_users": 2})
    assert summary(refused.value) == "CampaignCreate: domain_size: must be at least 2 (and 1 more)"
