"""The README's timings are measured, not written: the table is the rendering of
docs/timings.json by benchmarks/readme_timings.py, every entry has figures, every command
in it parses, and no duration is written into the README's prose by hand (the walkthrough
once said "about half a minute" where it took 7.7 s, the demo "about 14 s").

deploy/README.md follows the same rule, except inside a *recorded measurement*: the
one-off figures of a heavy run (Docker images, replicas killed mid-campaign, thousands of
users) that no script here regenerates, between a ``<!-- recorded measurement (DATE):
`COMMAND` ... -->`` marker naming the date and the command that measured them and a
``<!-- recorded measurement: end -->`` marker."""

from __future__ import annotations

import datetime
import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEPLOY_README = ROOT / "deploy" / "README.md"
RECORDED_BEGIN = re.compile(r"<!-- recorded measurement \((\d{4}-\d{2}-\d{2})\): (`[^`]+`)"
                            r"[^\n]*-->")
RECORDED_END = "<!-- recorded measurement: end -->"

HAND_WRITTEN_DURATION = re.compile(
    r"half a minute|a few (?:seconds|minutes)|\b(?:takes?|took|taking|runs? in|lasts?)\s+"
    r"(?:about|roughly|around|under|well under|less than|at most|some)\b|\babout\s+\d[\d.,]*"
    r"\s*(?:s|ms|sec|secs|seconds?|min|mins|minutes?|h|hours?)\b", re.IGNORECASE)
"""A duration a person would type into prose; figures belong in the generated table."""


def _timings() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_timings",
                                                  ROOT / "benchmarks" / "readme_timings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("readme_timings", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def timings() -> ModuleType:
    return _timings()


def test_readme_table_is_the_rendering_of_the_record(timings: ModuleType) -> None:
    record = json.loads(timings.RECORD.read_text(encoding="utf-8"))
    markdown = README.read_text(encoding="utf-8")
    start, end = markdown.index(timings.BEGIN), markdown.index(timings.END)
    assert markdown[start:end + len(timings.END)] == timings.render(record), (
        "README timings table differs from docs/timings.json: run "
        "`python benchmarks/readme_timings.py --write`")


def test_every_entry_has_figures(timings: ModuleType) -> None:
    """Every entry a plain run measures is recorded (the long ones, run only when named,
    may be missing), in table order, with positive figures."""
    record = json.loads(timings.RECORD.read_text(encoding="utf-8"))
    order = [entry.name for entry in timings.ENTRIES]
    assert list(record["entries"]) == [name for name in order if name in record["entries"]]
    assert {entry.name for entry in timings.ENTRIES if entry.default} <= set(record["entries"])
    for name, figures in record["entries"].items():
        assert figures["wall_s"] > 0 and figures["cpu_s"] > 0 and figures["runs"] >= 1, name


def test_every_segshuffle_command_in_the_table_parses(timings: ModuleType) -> None:
    from segshuffle.cli.main import build_parser

    for entry in timings.ENTRIES:
        if entry.argv[:1] == ["segshuffle"] and entry.argv[1:] != ["--version"]:
            build_parser(entry.argv[1]).parse_args(entry.argv[1:])
            shown = shlex.split(entry.shown)
            assert shown[:2] == entry.argv[:2], entry.name


def _blank(markdown: str, start: int, end: int) -> str:
    """``markdown`` with ``[start, end)`` emptied, its line breaks (so line numbers) kept."""
    return markdown[:start] + "\n" * markdown[start:end].count("\n") + markdown[end:]


def _prose(markdown: str, timings: ModuleType | None = None) -> list[tuple[int, str]]:
    """Lines outside code blocks, outside the generated table (with ``timings``) and
    outside recorded measurements."""
    if timings is not None:
        markdown = _blank(markdown, markdown.index(timings.BEGIN), markdown.index(timings.END))
    for start, end, _, _ in reversed(_recorded(markdown)):
        markdown = _blank(markdown, start, end)
    lines, fenced = [], False
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("    "):
            lines.append((number, line))
    return lines


def _recorded(markdown: str) -> list[tuple[int, int, str, str]]:
    """The recorded measurements: (start, end, date, first command) each, in order."""
    found, position = [], 0
    while (begin := RECORDED_BEGIN.search(markdown, position)) is not None:
        end = markdown.find(RECORDED_END, begin.end())
        assert end >= 0, f"a recorded measurement at offset {begin.start()} has no end marker"
        assert RECORDED_BEGIN.search(markdown, begin.end(), end) is None, "nested"
        found.append((begin.start(), end + len(RECORDED_END), begin[1], begin[2].strip("`")))
        position = end + len(RECORDED_END)
    assert markdown.count("<!-- recorded measurement") == 2 * len(found), \
        "a recorded-measurement marker is malformed (begin: (YYYY-MM-DD): `command`)"
    return found


def _hand_written(name: str, lines: list[tuple[int, str]]) -> list[str]:
    """The prose lines with a hand-written duration, also one wrapped onto the next line
    ("instead of about" / "0.7 s without the kill")."""
    found = []
    for index, (number, line) in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else (0, "")
        text = line.strip()
        wrapped = f"{text} {following[1].strip()}" if following[0] == number + 1 else text
        if any(match.start() < len(text) for match in HAND_WRITTEN_DURATION.finditer(wrapped)):
            found.append(f"{name}:{number}: {text}")
    return found


def test_no_hand_written_duration_in_the_readme(timings: ModuleType) -> None:
    found = _hand_written("README.md", _prose(README.read_text(encoding="utf-8"), timings))
    assert found == [], ("durations belong in the timings table "
                         "(benchmarks/readme_timings.py):\n" + "\n".join(found))


def test_no_hand_written_duration_in_the_deploy_readme() -> None:
    """deploy/README.md once said "About 40 s" of an image and "the test as a whole 3 min
    25 s" with nothing to say where either came from."""
    found = _hand_written("deploy/README.md",
                          _prose(DEPLOY_README.read_text(encoding="utf-8")))
    assert found == [], ("a duration in deploy/README.md is either a recorded measurement "
                         "(between the markers, with its date and command) or left out:\n"
                         + "\n".join(found))


def test_every_recorded_measurement_names_a_command_that_exists() -> None:
    recorded = _recorded(DEPLOY_README.read_text(encoding="utf-8"))
    assert recorded, "deploy/README.md's measured figures are marked as recorded"
    for _, _, date, command in recorded:
        datetime.date.fromisoformat(date)
        words = [word for word in shlex.split(command) if "=" not in word]
        script = next(word for word in words if word.endswith((".py", ".sh")))
        assert (ROOT / script).is_file(), command


@pytest.mark.parametrize("text", [
    "it takes about half a minute", "takes about 14 s end to end", "about 2 minutes",
    "the build took roughly", "Run the fast tests (a few minutes on two cores)"])
def test_the_check_catches_the_old_phrases(text: str) -> None:
    assert HAND_WRITTEN_DURATION.search(text)
