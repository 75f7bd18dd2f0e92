"""The README's timings are measured, not written: the table is the rendering of
docs/timings.json by benchmarks/readme_timings.py, every entry has figures, every command
in it parses, and no duration is written into the README's prose by hand (the walkthrough
once said "about half a minute" where it took 7.7 s, the demo "about 14 s")."""

from __future__ import annotations

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


def _prose(markdown: str, timings: ModuleType) -> list[tuple[int, str]]:
    """README lines outside the generated table and outside code blocks."""
    start, end = markdown.index(timings.BEGIN), markdown.index(timings.END)
    markdown = markdown[:start] + "\n" * markdown[start:end].count("\n") + markdown[end:]
    lines, fenced = [], False
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("    "):
            lines.append((number, line))
    return lines


def test_no_hand_written_duration_in_the_readme(timings: ModuleType) -> None:
    markdown = README.read_text(encoding="utf-8")
    found = [f"README.md:{number}: {line.strip()}" for number, line in _prose(markdown, timings)
             if HAND_WRITTEN_DURATION.search(line)]
    assert found == [], ("durations belong in the timings table "
                         "(benchmarks/readme_timings.py):\n" + "\n".join(found))


@pytest.mark.parametrize("text", [
    "it takes about half a minute", "takes about 14 s end to end", "about 2 minutes",
    "the build took roughly", "Run the fast tests (a few minutes on two cores)"])
def test_the_check_catches_the_old_phrases(text: str) -> None:
    assert HAND_WRITTEN_DURATION.search(text)
