"""README "Walkthrough" runs as written.

The section is a sequence of fenced blocks tagged ``sh`` and ``python`` that a new operator
copies in order into one shell.  :func:`extract_blocks` reads exactly that section of
README.md; :func:`write_script` turns the blocks into one bash script that behaves like
that reader's terminal:

- an ``sh`` block is sourced into the one shell, so its ``cd``, variables and background
  jobs carry over to the next block, as they do in a terminal;
- a ``python`` block whose first line is a comment naming a file (``# users.py: ...``) is
  one the README asks the reader to save under that name: it is written to the shell's
  current directory, and a later ``sh`` block runs it;
- any other ``python`` block runs in place, as a file, with the test's interpreter (the
  virtualenv's).

Every ``sh`` block starts with ``set -euo pipefail`` itself, so that a reader's shell stops
at the first failing command instead of piling errors on it, and every wait in the blocks
is bounded by ``$WAIT`` (the README's default is generous) rather than a fixed number of
seconds that a busy machine overruns; the fast tests check both.  The slow test runs the
blocks on two free loopback ports (``SERVER_PORT`` / ``SHUFFLER_PORT``, which the
README's blocks read), under a bounded timeout, in its own process group, which is killed
at the end whatever happened, so no service outlives the test.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .nginx_support import free_ports

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "Walkthrough"
LANGUAGES = ("sh", "python")
RUN_TIMEOUT = float(os.environ.get("SEGSHUFFLE_TEST_WALKTHROUGH_TIMEOUT", "1800"))
"""Seconds the whole walkthrough may take here (it takes well under a minute when idle;
the blocks' own waits are bounded by ``$WAIT``, which the README defaults)."""
STRICT_MODE = "set -euo pipefail"
"""The first command of every ``sh`` block."""
WAIT_VARIABLE = "WAIT"
"""The one variable that bounds every wait of the blocks."""
_FIXED_WAIT = re.compile(
    r"(?:--timeout|--retry-max-time|--retry|--max-time|--connect-timeout)[ =]+[\d.]"
    r"|\bsleep\s+[\d.]|\btimeout\s+[\d.]|wait_for_\w+\([^)]*timeout\s*=\s*[\d.]")
"""A wait of a fixed number of seconds: a flag or an argument given a literal number."""
STOP_GRACE = 5.0
"""Seconds the services get to exit on SIGTERM before the process group is killed."""

_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")
_SAVED_AS = re.compile(r"^#\s*([A-Za-z0-9_.-]+\.py)\b")


@dataclass(frozen=True)
class Block:
    """One fenced code block of the section."""

    language: str
    """``sh`` or ``python``."""
    text: str
    """The block's lines, without the fences."""
    line: int
    """The README line (1-based) of the opening fence, for error messages."""

    @property
    def saved_as(self) -> str | None:
        """For a python block that starts with ``# NAME.py``: the file the reader saves it
        as (a later sh block runs it); None for a block that runs where it stands."""
        if self.language != "python":
            return None
        match = _SAVED_AS.match(self.text)
        return match.group(1) if match else None


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a block opened with ``fence`` (the same character, at least
    as many times, nothing after it: CommonMark's rule)."""
    stripped = line.strip()
    return (len(stripped) >= len(fence) and set(stripped) == {fence[0]})


def section_lines(markdown: str, title: str) -> list[tuple[int, str]]:
    """The numbered lines of the level-2 section ``## title``, up to the next level-1 or
    level-2 heading outside a code block (``ValueError`` if the section is missing)."""
    lines = markdown.splitlines()
    heading = f"## {title}"
    starts = [i for i, line in enumerate(lines) if line.rstrip() == heading]
    if len(starts) != 1:
        raise ValueError(f"README.md must have exactly one {heading!r} heading, "
                         f"found {len(starts)}")
    found: list[tuple[int, str]] = []
    fence: str | None = None
    for index in range(starts[0] + 1, len(lines)):
        line = lines[index]
        if fence is None:
            if re.match(r"^#{1,2} ", line):
                break
            match = _FENCE.match(line)
            if match:
                fence = match.group(1)
        elif _closes(line, fence):
            fence = None
        found.append((index + 1, line))
    return found


def extract_blocks(markdown: str, title: str = SECTION) -> list[Block]:
    """The ``sh`` and ``python`` blocks of the section, in order (other languages, e.g.
    sample output tagged ``text``, are skipped; an untagged or unclosed block is an error,
    since a reader could not tell what to do with it)."""
    blocks: list[Block] = []
    opened: tuple[int, str, str] | None = None  # (line, fence, language)
    body: list[str] = []
    for number, line in section_lines(markdown, title):
        match = _FENCE.match(line)
        if opened is None:
            if match:
                if not match.group(2):
                    raise ValueError(f"README.md line {number}: a code block without a "
                                     f"language tag")
                opened, body = (number, match.group(1), match.group(2)), []
        elif _closes(line, opened[1]):
            if opened[2] in LANGUAGES:
                blocks.append(Block(opened[2], "\n".join(body) + "\n", opened[0]))
            opened = None
        else:
            body.append(line)
    if opened is not None:
        raise ValueError(f"README.md line {opened[0]}: the code block is never closed")
    return blocks


def write_script(blocks: list[Block], directory: Path) -> Path:
    """Write each block to ``directory`` and a bash script that runs them in order in one
    shell (see the module docstring); returns the script's path."""
    lines = ["set -euo pipefail"]
    for number, block in enumerate(blocks, 1):
        source = directory / f"block{number:02d}.{'py' if block.language == 'python' else 'sh'}"
        source.write_text(block.text, encoding="utf-8")
        where = f"block {number} ({block.language}, README.md line {block.line})"
        lines.append(f"echo {shlex.quote('=== ' + where)} >&2")
        if block.language == "sh":
            lines.append(f"source {shlex.quote(str(source))}")
        elif block.saved_as is not None:
            lines.append(f"cp {shlex.quote(str(source))} {shlex.quote(block.saved_as)}")
        else:
            lines.append(f"{shlex.quote(sys.executable)} {shlex.quote(str(source))}")
    lines.append("echo '=== walkthrough complete' >&2")
    script = directory / "walkthrough.sh"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return script


def _group_alive(process: subprocess.Popen[bytes]) -> bool:
    """Whether any process of the script's group is left (the shell reaped if it exited)."""
    process.poll()
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """End the script's process group (the shell and every service it started): SIGTERM,
    then SIGKILL for whatever is left after :data:`STOP_GRACE` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_alive(process):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + STOP_GRACE
        while _group_alive(process) and time.monotonic() < deadline:
            time.sleep(0.1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_GRACE)


# -- fast: the section has every step ---------------------------------------------------------

def test_walkthrough_section_has_every_step() -> None:
    """The extractor finds the walkthrough's steps in order; deleting one fails here."""
    blocks = extract_blocks(README.read_text(encoding="utf-8"))
    steps = [
        ("sh", "mktemp -d"),
        ("sh", "segshuffle serve server"),
        ("sh", "segshuffle admin issuer-key --out"),
        ("sh", "segshuffle serve shuffler"),
        ("sh", "/readyz"),
        ("sh", "segshuffle admin campaign create"),
        ("sh", "segshuffle admin invitations"),
        ("sh", "segshuffle admin signing-key"),
        ("python", "from segshuffle.client import Client"),
        ("python", ".enroll("),
        ("python", ".submit_level("),
        ("python", ".wait_for_phase("),
        ("python", ".submit_data("),
        ("sh", "python users.py"),
        ("sh", "segshuffle admin status"),
        ("sh", "segshuffle admin release fruit --round 1 --wait"),
        ("sh", "--when-ready"),
        ("sh", "segshuffle admin release fruit --round 2 --wait"),
        ("sh", "segshuffle admin results fruit"),
        ("sh", "--format table"),
        ("sh", "--format csv --out results.csv"),
        ("sh", "--format png --out results.png"),
        ("sh", "kill "),
    ]
    position = 0  # (block index, offset in it): each step comes after the previous one
    offset = 0
    for language, needle in steps:
        while position < len(blocks):
            block = blocks[position]
            found = block.text.find(needle, offset) if block.language == language else -1
            if found >= 0:
                offset = found + len(needle)
                break
            position, offset = position + 1, 0
        else:
            pytest.fail(f"README Walkthrough: no {language} step {needle!r} after the "
                        f"previous steps")
    saved = [block.saved_as for block in blocks if block.saved_as]
    assert saved == ["users.py"]


def test_extractor_reads_only_the_section(tmp_path: Path) -> None:
    """Blocks before and after the section, untagged languages and ``text`` samples stay
    out; a python block naming a file is saved, any other runs in place."""
    markdown = "\n".join([
        "## Before", "```sh", "echo before", "```",
        "## Walkthrough", "Text.", "```sh", "echo one", "## not a heading in a block", "```",
        "```text", "sample output", "```",
        "````python", "# users.py: saved", "print('saved')", "````",
        "```python", "print('in place')", "```",
        "### A subsection stays inside", "```sh", "echo two", "```",
        "## After", "```sh", "echo after", "```", ""])
    blocks = extract_blocks(markdown)
    assert [(b.language, b.text) for b in blocks] == [
        ("sh", "echo one\n## not a heading in a block\n"),
        ("python", "# users.py: saved\nprint('saved')\n"),
        ("python", "print('in place')\n"),
        ("sh", "echo two\n"),
    ]
    assert [b.saved_as for b in blocks] == [None, "users.py", None, None]
    assert blocks[0].line == 7
    script = write_script(blocks, tmp_path).read_text(encoding="utf-8")
    assert "cp " in script and "users.py" in script
    assert f"{sys.executable} " in script
    with pytest.raises(ValueError, match="never closed"):
        extract_blocks("## Walkthrough\n```sh\necho\n")
    with pytest.raises(ValueError, match="without a language tag"):
        extract_blocks("## Walkthrough\n```\necho\n```\n")
    with pytest.raises(ValueError, match="exactly one"):
        extract_blocks("## Elsewhere\n")


def _first_command(text: str) -> str:
    """The first line of a shell block that is neither blank nor a comment."""
    return next((line.strip() for line in text.splitlines()
                 if line.strip() and not line.lstrip().startswith("#")), "")


def test_every_shell_block_stops_at_its_first_failure() -> None:
    """A reader copies the blocks into a shell, which does not stop at a failure unless
    told: each ``sh`` block begins with ``set -euo pipefail``."""
    blocks = extract_blocks(README.read_text(encoding="utf-8"))
    shell = [block for block in blocks if block.language == "sh"]
    assert shell
    for block in shell:
        assert _first_command(block.text) == STRICT_MODE, (
            f"README.md line {block.line}: the block does not begin with {STRICT_MODE!r}")


def test_no_wait_is_a_fixed_number_of_seconds() -> None:
    """Every wait of the blocks is bounded by ``$WAIT``, which the first block sets with a
    default; a literal timeout (``--timeout 120``, ``timeout=120``, ``--retry 30``) would
    fail the walkthrough on a busy machine."""
    blocks = extract_blocks(README.read_text(encoding="utf-8"))
    for block in blocks:
        found = _FIXED_WAIT.search(block.text)
        assert found is None, (f"README.md block at line {block.line}: a fixed wait "
                               f"{found.group(0)!r}; use ${WAIT_VARIABLE}")
    first = next(block for block in blocks if block.language == "sh")
    assert re.search(rf"^export {WAIT_VARIABLE}=\$\{{{WAIT_VARIABLE}:-(\d+)\}}",
                     first.text, re.MULTILINE), "the first block must default WAIT"
    waits = [line for block in blocks if block.language == "sh"
             for line in _joined_lines(block.text)
             if re.search(r"--when-ready|--wait\b|--retry\b", line)]
    assert len(waits) >= 3
    for line in waits:
        assert f"${WAIT_VARIABLE}" in line, f"a wait not bounded by ${WAIT_VARIABLE}: {line}"
    users = next(block for block in blocks if block.saved_as == "users.py")
    assert "wait_for_phase(" in users.text and f'os.environ["{WAIT_VARIABLE}"]' in users.text


def test_the_fixed_wait_pattern_finds_what_it_should() -> None:
    for fixed in ("release x --timeout 120", "curl --retry 30 url", "sleep 5",
                  "user.wait_for_phase('round2', timeout=120)", "--retry-max-time=60"):
        assert _FIXED_WAIT.search(fixed), fixed
    for bounded in ('release x --timeout "$WAIT"', 'curl --retry "$WAIT" url',
                    "user.wait_for_phase('round2', timeout=wait)",
                    "http = httpx.Client(timeout=30.0)"):
        assert not _FIXED_WAIT.search(bounded), bounded


def _joined_lines(text: str) -> list[str]:
    """A shell block's commands, continuation lines (ending in a backslash) joined."""
    return text.replace("\\\n", " ").splitlines()


# -- slow: run it --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """How a run of blocks ended."""

    status: int | None
    """The script's exit status; None if it was stopped at the timeout."""
    transcript: str
    """The end of its output and of every log in the working directories, for messages."""
    workdirs: list[Path]
    """The directories the blocks made with ``mktemp -d``."""
    ports: tuple[int, int]
    """The server's and the shuffler's port."""
    seconds: float


def run_blocks(blocks: list[Block], tmp_path: Path, timeout: float = RUN_TIMEOUT) -> Run:
    """Run the blocks as one bash script (:func:`write_script`) in its own process group
    with the virtualenv's bin first on PATH, free ports in SERVER_PORT / SHUFFLER_PORT and
    TMPDIR under ``tmp_path``; the group is killed at the end whatever happened."""
    scripts = tmp_path / "blocks"
    scripts.mkdir()
    script = write_script(blocks, scripts)
    temporary = tmp_path / "tmp"  # the walkthrough's `mktemp -d` lands here
    temporary.mkdir()
    ports = free_ports(2)
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("SEGSHUFFLE_")
           and name not in ("SERVER_URL", "SHUFFLER_URL", "SERVER_KEY")}
    env.update({"PATH": str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
                "TMPDIR": str(temporary), "SERVER_PORT": str(ports[0]),
                "SHUFFLER_PORT": str(ports[1])})
    output = tmp_path / "walkthrough.out"
    started = time.monotonic()
    with output.open("wb") as sink:
        process = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env,
                                   stdin=subprocess.DEVNULL, stdout=sink,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            stop_group(process)
    seconds = time.monotonic() - started
    workdirs = sorted(path for path in temporary.iterdir() if path.is_dir())
    logs = "".join(f"\n--- {log}\n{log.read_text(errors='replace')[-3000:]}"
                   for workdir in workdirs for log in sorted(workdir.glob("*.log")))
    transcript = output.read_text(errors="replace")[-6000:] + logs
    return Run(status, transcript, workdirs, (ports[0], ports[1]), seconds)


def listening(port: int) -> bool:
    """Whether something accepts connections on the loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """Run every block in order against real services on free loopback ports; the CSV has
    one row per item of the campaign, every estimate finite."""
    blocks = extract_blocks(README.read_text(encoding="utf-8"))
    run = run_blocks(blocks, tmp_path)
    assert run.status is not None, f"not done after {RUN_TIMEOUT:g}s:\n{run.transcript}"
    assert run.status == 0, f"exit status {run.status}:\n{run.transcript}"
    assert run.transcript.count("=== block") == len(blocks)
    assert len(run.workdirs) == 1, f"expected one working directory, got {run.workdirs}"
    workdir = run.workdirs[0]
    assert not any(listening(port) for port in run.ports), "a service is still running"

    items = (workdir / "items.txt").read_text(encoding="utf-8").split()
    with (workdir / "results.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["name"] for row in rows] == items
    assert [int(row["id"]) for row in rows] == list(range(len(items)))
    for row in rows:
        for column in ("estimate", "standard_error"):
            assert math.isfinite(float(row[column])), row
        assert float(row["standard_error"]) > 0, row
    assert (workdir / "results.privacy.json").is_file()
    assert "round 2: 200 item sets sent" in (workdir / "users.log").read_text()
    picture = (workdir / "results.png").read_bytes()
    assert picture[:8] == b"\x89PNG\r\n\x1a\n" and len(picture) > 10_000
    keep = os.environ.get("SEGSHUFFLE_KEEP_WALKTHROUGH_PNG")
    if keep:  # how docs/images/walkthrough-results.png is made
        Path(keep).write_bytes(picture)
    print(f"walkthrough ran in {run.seconds:.1f}s")


@pytest.mark.slow
def test_services_stopped_when_a_step_fails(tmp_path: Path) -> None:
    """The walkthrough's first steps start both services; a step failing after them ends
    the script, and the services do not outlive it (the test kills the process group)."""
    blocks = extract_blocks(README.read_text(encoding="utf-8"))
    starting = next(index for index, block in enumerate(blocks)
                    if "segshuffle serve shuffler" in block.text)
    failing = Block("sh", "curl -fs \"$SHUFFLER_URL/readyz\"\nfalse\necho unreachable\n", 0)
    run = run_blocks([*blocks[: starting + 1], failing], tmp_path)
    assert run.status not in (None, 0), run.transcript
    assert '"status":"ready"' in run.transcript, run.transcript
    assert "unreachable" not in run.transcript
    assert not any(listening(port) for port in run.ports), "a service outlived the test"
