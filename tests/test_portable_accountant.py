"""The numpy-free accountant (segshuffle.core.portable) against the numpy one and the vectors.

The same checks as the JavaScript accountant's (clients/web/test/accountant.test.js): every
delta_user and verdict of docs/test-vectors.json, user_delta at other sizes with the branch
that applies (the fixture clients/web/test/fixtures/accountant-reference.json), the rates a
server publishes for large campaigns; then agreement with segshuffle.core.accounting at
random small parameters, the refusal of bad input, and the absence of numpy and scipy.

Groups of calls that take more than a few seconds of CPU in CPython carry ``slow``.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from segshuffle.core import accounting as numpy_accounting
from segshuffle.core import arrays, portable
from segshuffle.core.portable import AccountantError, BlanketMode, user_delta
from segshuffle.core.portable import accounting as portable_accounting
from segshuffle.core.privacy_loss import DEFAULT_STEP

ROOT = Path(__file__).resolve().parents[1]
VECTORS = json.loads((ROOT / "docs" / "test-vectors.json").read_text(encoding="utf-8"))
REFERENCE = json.loads((ROOT / "clients" / "web" / "test" / "fixtures"
                        / "accountant-reference.json").read_text(encoding="utf-8"))

#: Agreement with the numpy accountant beyond rounding.
RELATIVE = 1e-9

#: The absolute allowance for the FFT's rounding: upper bounds that go through an FFT
#: composition include a charge for its rounding, measured from the computed transform,
#: which depends on the transform's length and algorithm (the vectors file compares
#: recomputed delta_user values with the same 1e-13).
FFT_ROUNDING = 1e-13


def _close(actual: float, expected: float) -> bool:
    return abs(actual - expected) <= RELATIVE * abs(expected) + FFT_ROUNDING


# --- the vectors file ---------------------------------------------------------------------

Call = tuple[tuple[Any, ...], dict[str, Any], float, bool, float]


def _vector_groups() -> dict[str, list[Call]]:
    """The (args, options, expected, holds, delta) calls of every row of the vectors file."""
    groups: dict[str, list[Call]] = {}
    for index, row in enumerate(VECTORS["accountant"]):
        groups[f"accountant-{index}"] = [
            ((verdict["level"], row["lambda"], row["set_size"], row["users"], row["m"],
              row["domain_size"]), {"mode": row["mode"], "delta": row["delta"]},
             verdict["delta_user"], verdict["holds"], row["delta"])
            for verdict in row["verdicts"]]
    for index, document in enumerate(VECTORS["parameters"]):
        p = document["parameters"]
        groups[f"parameters-{index}"] = [
            ((verdict["level"], verdict["lambda"], p["set_size"], p["honest_users"], p["m"],
              p["privacy_domain_size"]),
             {"mode": p.get("blanket_mode", "slots"), "delta": p["delta"]},
             verdict["delta_user"], verdict["holds"], p["delta"])
            for verdict in document["level_verdicts"]]
    return groups


VECTOR_GROUPS = _vector_groups()

#: Rows whose three calls take more than about 0.4 s of CPU (cold caches); the fast tier
#: keeps the rest, which still cover both blanket modes, s = 1, 2, 4 and every verdict kind.
SLOW_VECTOR_ROWS = frozenset({
    "parameters-0", "parameters-1", "parameters-2", "parameters-3", "parameters-10",
    "parameters-11", "parameters-12", "parameters-16", "parameters-17", "parameters-18",
    "parameters-19", "parameters-21", "parameters-25", "parameters-28", "parameters-29",
    "parameters-30", "accountant-5", "accountant-8", "accountant-10", "accountant-11",
    "accountant-12", "accountant-14", "accountant-16", "accountant-23",
})


def test_the_vectors_file_has_every_case() -> None:
    assert len(VECTORS["accountant"]) == 24
    assert len(VECTORS["parameters"]) == 33
    assert sum(len(calls) for calls in VECTOR_GROUPS.values()) == 24 * 3 + 33 * 3


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow) if name in SLOW_VECTOR_ROWS else name
    for name in VECTOR_GROUPS])
def test_every_delta_user_and_verdict_of_the_vectors(name: str) -> None:
    for args, options, expected, holds, delta in VECTOR_GROUPS[name]:
        value = user_delta(*args, **options)
        label = f"user_delta{args} {options}"
        assert _close(value, expected), f"{label} = {value!r}, numpy {expected!r}"
        assert abs(value - expected) < FFT_ROUNDING, f"{label} = {value!r}, numpy {expected!r}"
        assert (value <= delta) is holds, f"{label}: verdict"


# --- the fixture: other sizes, every branch, published rates --------------------------------

def _fixture_groups() -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in REFERENCE["user_delta"]:
        name = (f"{row['mode']}-s{row['set_size']}-d{row['domain_size']}-h{row['users']}"
                f"-m{row['m']}")
        groups.setdefault(name, []).append(row)
    return groups


FIXTURE_GROUPS = _fixture_groups()

#: Fixture settings whose six calls take more than about three seconds of CPU.
SLOW_FIXTURE_SETTINGS = frozenset({
    "slots-s4-d400-h10000-m1.5", "slots-s2-d10-h80-m0.5", "slots-s3-d8-h15-m0.6",
    "slots-s4-d20000-h1000000-m2.0", "slots-s2-d20000-h1000000-m1.5",
    "slots-s2-d2000-h100000-m2.5", "independent-s4-d20000-h1000000-m2.0",
    "slots-s3-d10-h40-m0.5", "independent-s2-d500-h10000-m1.3",
})


def _branch(row: dict[str, Any]) -> str:
    """The branch of the portable slot accountant (as the fixture's generator names them)."""
    if row["mode"] != "slots":
        return "independent"
    with arrays.use(arrays.PYTHON):
        bound = portable_accounting.slot_bound(
            row["users"], float(row["m"]), row["domain_size"], row["set_size"],
            portable_accounting.POISSON_SLACK_SHARE * row["delta"], DEFAULT_STEP)
    if bound.single is not None:
        return "single"
    if bound.joint:
        return "joint"
    if bound.groups is not None:
        exact = bound.groups.exact_pair_delta(1.0, 0.5) is not None
        return "groups+exact-pair" if exact else "groups"
    return "revealed"


def test_the_fixture_covers_every_branch() -> None:
    branches = {row["branch"] for row in REFERENCE["user_delta"]}
    assert branches == {"groups", "groups+exact-pair", "independent", "joint", "revealed",
                        "single"}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow) if name in SLOW_FIXTURE_SETTINGS else name
    for name in FIXTURE_GROUPS])
def test_user_delta_beyond_the_vectors_sizes(name: str) -> None:
    rows = FIXTURE_GROUPS[name]
    for row in rows:
        value = user_delta(row["level"], row["lambda"], row["set_size"], row["users"],
                           row["m"], row["domain_size"], mode=row["mode"], delta=row["delta"])
        assert _close(value, row["delta_user"]), f"{row}: got {value!r}"
    assert _branch(rows[0]) == rows[0]["branch"]


@pytest.mark.parametrize("index", [
    pytest.param(index, marks=pytest.mark.slow) if index != 3 else index
    for index in range(len(REFERENCE["published"]))])
def test_the_rates_a_server_publishes_are_accepted(index: int) -> None:
    assert len(REFERENCE["published"]) >= 6
    row = REFERENCE["published"][index]
    value = user_delta(row["level"], row["lambda"], row["set_size"], row["users"], row["m"],
                       row["domain_size"], mode=row["mode"], delta=row["delta"])
    assert value <= row["delta"], f"{row}: got {value!r}, refused"
    assert abs(value - row["delta_user"]) <= 1e-5 * row["delta"], f"{row}: got {value!r}"
    assert _close(value, row["delta_user"]), f"{row}: got {value!r}"


# --- agreement with the numpy accountant ----------------------------------------------------

def _random_settings(count: int, seed: int) -> list[tuple[tuple[Any, ...], str]]:
    """Small random campaigns (h <= 5000, d <= 48, s <= 4, m <= 3), both blanket modes."""
    rng = random.Random(seed)
    settings = []
    for _ in range(count):
        mode = rng.choice(["slots", "slots", "independent"])
        users = rng.randint(20, 5000)
        d = rng.randint(2, 48)
        s = rng.randint(1, min(d, 4))
        m = round(rng.uniform(0.0, min(3.0, d)), 3)
        lam = rng.choice([1.0, round(rng.uniform(0.05, 1.0), 4)])
        level = round(rng.uniform(0.1, 3.0), 3)
        settings.append(((level, lam, s, users, m, d), mode))
    return settings


@pytest.mark.parametrize(("args", "mode"), [
    pytest.param(*setting, marks=pytest.mark.slow) if index in (0, 3, 4, 6) else setting
    for index, setting in enumerate(_random_settings(8, seed=1))])
def test_agrees_with_the_numpy_accountant(args: tuple[Any, ...], mode: str) -> None:
    expected = numpy_accounting.user_delta(*args, mode=mode, delta=1e-6)
    value = user_delta(*args, mode=mode, delta=1e-6)
    assert _close(value, expected), f"user_delta{args} {mode}: {value!r}, numpy {expected!r}"


def test_takes_the_numpy_accountants_arguments() -> None:
    # Keywords and enum modes as segshuffle.core.accounting.user_delta takes them; integral
    # floats are integers, and delta may be left out.
    args = (1.0, 0.5, 2, 1000, 1.0, 20)
    expected = numpy_accounting.user_delta(*args, mode=BlanketMode.INDEPENDENT, delta=1e-6)
    assert _close(user_delta(*args, mode=BlanketMode.INDEPENDENT, delta=1e-6), expected)
    assert _close(user_delta(1.0, 0.5, 2.0, 1000.0, 1, 20.0, mode="independent",
                             delta=1e-6), expected)
    bare = numpy_accounting.user_delta(*args)
    assert _close(user_delta(*args), bare)
    assert _close(user_delta(*args, mode="slots", delta=None), bare)
    assert portable.BlanketMode is numpy_accounting.BlanketMode


# --- bad input ------------------------------------------------------------------------------

VALID = (1.0, 0.5, 2, 1000, 1.0, 20)

REFUSED = [
    ((31, 0.5, 2, 1000, 1.0, 20), r"privacy level must be in \[0, 30\]"),
    ((-0.1, 0.5, 2, 1000, 1.0, 20), r"privacy level must be in \[0, 30\]"),
    ((math.nan, 0.5, 2, 1000, 1.0, 20), "privacy level must be finite"),
    ((1, 1.5, 2, 1000, 1.0, 20), r"lambda must be in \[0, 1\]"),
    ((1, math.inf, 2, 1000, 1.0, 20), "lambda must be finite"),
    ((1, 0.5, 2, 0, 1.0, 20), "users must be >= 1"),
    ((1, 0.5, 2, 10.5, 1.0, 20), "users must be an integer"),
    ((1, 0.5, 2, None, 1.0, 20), "users must be an integer"),
    ((1, 0.5, 2, 2e12, 1.0, 20), r"users must be at most 1e\+12"),
    ((1, 0.5, 2, 2 * 10**12, 1.0, 20), r"users must be at most 1e\+12"),
    ((1, 0.5, 2, 1000, 1.0, 1), "domain size must be >= 2"),
    ((1, 0.5, 2, 1000, 1.0, 20.5), "domain size must be an integer"),
    ((1, 0.5, 2, 1000, 1.0, 2_000_000), "domain size must be at most 1000000"),
    ((1, 0.5, 0, 1000, 1.0, 20), "set size must be >= 1"),
    ((1, 0.5, True, 1000, 1.0, 20), "set size must be an integer"),
    ((1, 0.5, 65, 1000, 1.0, 100), "set size must be at most 64"),
    ((1, 0.5, 21, 1000, 1.0, 20), "must not exceed the domain size"),
    ((1, 0.5, 2, 1000, -1, 20), "blanket rate m must be >= 0"),
    ((1, 0.5, 2, 1000, math.inf, 20), "blanket rate m must be finite"),
    ((1, 0.5, 2, 1000, 2000, 20), "blanket rate m must be at most 1024"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_arguments_out_of_range_are_refused_like_the_numpy_accountant(
        args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(AccountantError, match=message):
        user_delta(*args)
    with pytest.raises(ValueError, match=message):
        numpy_accounting.user_delta(*args)


@pytest.mark.parametrize(("options", "message"), [
    ({"mode": "other"}, "blanket mode must be one of slots, independent, got 'other'"),
    ({"mode": None}, "blanket mode must be one of slots, independent"),
    ({"delta": -1.0}, "delta must be"),
    ({"delta": 0.0}, "delta must be"),
    ({"delta": math.nan}, "delta must be finite"),
])
def test_bad_options_are_refused_like_the_numpy_accountant(options: dict[str, Any],
                                                           message: str) -> None:
    with pytest.raises(AccountantError, match=message):
        user_delta(*VALID, **options)
    with pytest.raises(ValueError, match=message):
        numpy_accounting.user_delta(*VALID, **options)


def test_independent_rate_above_the_domain_is_refused() -> None:
    message = "at most the privacy domain size 20 in the independent mode"
    with pytest.raises(AccountantError, match=message):
        user_delta(*VALID[:4], 30, 20, mode="independent")
    with pytest.raises(ValueError, match=message):
        numpy_accounting.user_delta(*VALID[:4], 30, 20, mode="independent")


@pytest.mark.parametrize("level", ["1", True, None, [1.0]])
def test_a_level_that_is_not_a_number_is_refused(level: object) -> None:
    # As the JavaScript accountant: strings and bools are not numbers.
    with pytest.raises(AccountantError, match="privacy level must be a number"):
        user_delta(level, *VALID[1:])  # type: ignore[arg-type]


def test_the_error_is_a_value_error() -> None:
    assert issubclass(AccountantError, ValueError)
    assert portable.AccountantError is AccountantError


# --- trivial cases, caches, and no numpy ----------------------------------------------------

def test_trivial_cases_no_rate_no_blanket() -> None:
    assert user_delta(1, 0, 2, 1000, 1.0, 20) == 0.0
    assert user_delta(1, 0, 2, 1000, 1.0, 20, mode="independent") == 0.0
    # m = 0: the victim's message is seen as it is, the bound is 1 at lambda = 1.
    assert user_delta(1, 1, 1, 1000, 0, 20) == 1.0
    assert user_delta(1, 1, 1, 1000, 0, 20, mode="independent") == 1.0


def test_cleared_caches_give_the_same_values() -> None:
    for mode in ("slots", "independent"):
        first = user_delta(*VALID, mode=mode, delta=1e-6)
        portable.clear_accountant_caches()
        assert user_delta(*VALID, mode=mode, delta=1e-6) == first


def test_the_package_never_imports_numpy_or_scipy() -> None:
    # numpy and scipy made unimportable: the package must still load and compute.
    script = (
        "import sys\n"
        "for name in ('numpy', 'scipy'):\n"
        "    sys.modules[name] = None\n"
        "import segshuffle.core.portable as p\n"
        "import segshuffle.core.portable.accounting, segshuffle.core.arrays.python_fft\n"
        "print(p.user_delta(1.0, 0.5, 2, 1000, 1.0, 20, delta=1e-6),\n"
        "      p.user_delta(1.0, 0.5, 2, 1000, 1.0, 20, mode='independent', delta=1e-6))\n"
        "loaded = sorted(n for n in sys.modules if n.split('.')[0] in ('numpy', 'scipy')\n"
        "                and sys.modules[n] is not None)\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    slots, independent = (float(x) for x in result.stdout.split())
    assert _close(slots, numpy_accounting.user_delta(*VALID, delta=1e-6))
    assert _close(independent, numpy_accounting.user_delta(*VALID, mode="independent",
                                                            delta=1e-6))
