"""The README's ``segshuffle optimize`` example is what the command prints.

The example (section "Command line") is an indented block: ``$ segshuffle optimize ...``
with its continuation lines, then the output.  The slow test runs that command and compares
its output with the block line by line: the words and the layout exactly, every number to
a relative :data:`TOLERANCE`.  The README prints six significant digits, so the tolerance
lets the last digit differ (float sums in another order, another BLAS) but not a real
change of the optimizer's results (the independent blanket's m once drifted from 0.530204
to 0.530818, 1.2e-3 apart, unnoticed).  The run's closing line, ``(delta ..., N s)``,
holds a duration and is not in the README.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .test_readme_walkthrough import section_lines

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "Command line"
PROMPT = "    $ segshuffle optimize "
TOLERANCE = 1e-4
"""Relative difference allowed between a figure of the README and the run's."""
RUN_TIMEOUT = 900.0
"""Seconds the optimisation may take (under half a minute here when idle)."""
CLOSING_LINE = re.compile(r"^\(delta [^,]+, [\d.]+ s\)$")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def example(markdown: str) -> tuple[list[str], list[str]]:
    """The example's argv (after ``segshuffle``) and its output lines (indentation off)."""
    lines = [text for _, text in section_lines(markdown, SECTION)]
    starts = [index for index, text in enumerate(lines) if text.startswith(PROMPT)]
    if len(starts) != 1:
        raise ValueError(f"README.md {SECTION!r}: expected one {PROMPT.strip()!r} example, "
                         f"found {len(starts)}")
    index = starts[0]
    command = lines[index].removeprefix("    $ ")
    while command.endswith("\\"):
        index += 1
        command = command[:-1] + lines[index].strip()
    output = []
    for text in lines[index + 1:]:
        if not text.startswith("    "):
            break
        output.append(text[4:])
    return shlex.split(command)[1:], output


def differences(shown: list[str], printed: list[str], tolerance: float = TOLERANCE
                ) -> list[str]:
    """Where ``printed`` differs from ``shown``: the text between the numbers must be equal,
    each number within ``tolerance`` (relative) of the one shown."""
    found = []
    if len(shown) != len(printed):
        found.append(f"{len(shown)} lines shown, {len(printed)} printed")
    for number, (want, got) in enumerate(zip(shown, printed, strict=False), 1):
        if NUMBER.sub("#", want).split() != NUMBER.sub("#", got).split():
            found.append(f"line {number}: shown {want!r}, printed {got!r}")
            continue
        for a, b in zip(NUMBER.findall(want), NUMBER.findall(got), strict=True):
            x, y = float(a), float(b)
            if abs(x - y) > tolerance * max(abs(x), abs(y), 1e-300):
                found.append(f"line {number}: {a} shown, {b} printed")
    return found


def test_the_example_is_found_and_parses() -> None:
    from segshuffle.cli.main import build_parser

    argv, output = example(README.read_text(encoding="utf-8"))
    assert argv[0] == "optimize" and "--delta" in argv
    build_parser("optimize").parse_args(argv)
    assert output[0].startswith("blanket mode") and len(output) >= 10
    assert not any(CLOSING_LINE.match(line) for line in output)


def test_the_comparison_sees_a_drift_and_forgives_the_last_digit() -> None:
    shown = ["other mode          independent: m 0.530204, variance 0.000195765, 21 messages"]
    drifted = ["other mode          independent: m 0.530818, variance 0.000195765, 21 messages"]
    rounded = ["other mode          independent: m 0.530205, variance 0.000195766, 21 messages"]
    assert differences(shown, drifted) == ["line 1: 0.530204 shown, 0.530818 printed"]
    assert differences(shown, rounded) == []
    assert differences(shown, ["other mode          slots: m 0.530204, variance 0.000195765, "
                               "21 messages"])
    assert differences(shown, [*shown, "note: more"]) == ["1 lines shown, 2 printed"]


def test_the_timings_table_measures_the_readmes_example() -> None:
    """benchmarks/readme_timings.py times the same command the example shows."""
    from .test_readme_timings import _timings

    entry = next(e for e in _timings().ENTRIES if e.name == "optimize-example")
    argv, _ = example(README.read_text(encoding="utf-8"))
    assert entry.argv == ["segshuffle", *argv]


@pytest.mark.slow  # the optimisation itself
def test_the_example_prints_what_the_readme_shows() -> None:
    argv, shown = example(README.read_text(encoding="utf-8"))
    done = subprocess.run([sys.executable, "-m", "segshuffle.cli.main", *argv],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.rstrip("\n").splitlines()
    assert printed and CLOSING_LINE.match(printed[-1]), printed[-1:]
    found = differences(shown, printed[:-1])
    assert not found, ("the README's optimize example differs from the command's output "
                       "(paste a fresh run into README.md):\n" + "\n".join(found))
