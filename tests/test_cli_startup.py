"""The command line's first impression: ``--version`` and ``--help`` import no
protocol or web code, and a closed output pipe is one line, not a traceback."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from segshuffle.cli import main as cli

from .test_server_support import run_serve_server

PROBE = """
import json, sys, time
started = time.process_time()
from segshuffle.cli.main import main
try:
    main({argv!r})
except SystemExit:
    pass
print(json.dumps({{"cpu": time.process_time() - started,
                  "heavy": sorted(m for m in ("numpy", "scipy", "fastapi", "uvicorn",
                                              "matplotlib") if m in sys.modules)}}),
      file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["demo", "--help"]])
def test_version_and_help_import_nothing_heavy(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)],
                          capture_output=True, text=True, timeout=60)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["heavy"] == [], report
    if argv[0] == "--version":
        assert report["cpu"] < 0.15, report  # it was 1.2-1.7 CPU-s
    if argv == ["--help"]:
        for name in cli.SUBCOMMANDS:
            assert name in done.stdout


def test_the_lazy_summaries_are_the_commands_own_help() -> None:
    for name, module_name in cli.SUBCOMMANDS.items():
        parser = cli.build_parser(name)
        subparsers = next(a for a in parser._actions if a.dest == "command")
        helps = {action.dest: action.help for action in subparsers._choices_actions}
        assert helps[name] == cli.SUMMARIES[name], name
        importlib.import_module(module_name)


@pytest.mark.slow  # a subprocess computing an optimisation
@pytest.mark.parametrize("unbuffered", ["1", None])
def test_a_closed_pipe_is_one_line_and_no_traceback(unbuffered: str | None) -> None:
    # Buffered (the usual case outside a test runner) the output reaches the closed pipe
    # only when it is flushed, which used to be at the interpreter's exit.
    command = [sys.executable, "-m", "segshuffle.cli.main", "optimize", "--users", "1000",
               "--domain-size", "10", "--set-size", "1", "--levels", "1,2",
               "--shares", "0.5,0.5", "--delta", "1e-5"]
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered is not None:
        environment["PYTHONUNBUFFERED"] = unbuffered
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=environment) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()  # the reader went away, like `| head -0`
        error = process.stderr.read()
        process.wait(timeout=120)
    assert "Traceback" not in error, error
    assert error.strip().splitlines() == [
        "segshuffle: error: the output was closed before it was written"]
    assert process.returncode == 2


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = cli.main(argv)
    return status, capsys.readouterr().err


def test_a_negative_level_is_read_as_a_value(capsys: pytest.CaptureFixture[str]) -> None:
    """``--levels -1,2`` used to be "expected one argument" (read as an unknown flag)."""
    status, error = _run(["optimize", "--users", "1000", "--domain-size", "10", "--set-size",
                          "1", "--levels", "-1,2", "--shares", "0.5,0.5", "--delta", "1e-5"],
                         capsys)
    assert status == 2
    assert error.strip().splitlines() == [
        "segshuffle: error: every privacy level must be in [0.01, 30], got -1.0"]


def test_an_invalid_campaign_is_said_in_the_command_lines_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    """It used to read "--campaign: Value error, set_size must not exceed ..."."""
    status, error = _run(["admin", "campaign", "create", "--id", "x", "--domain-size", "4",
                          "--set-size", "9", "--levels", "1,2"], capsys)
    assert status == 2
    assert error.strip() == ("segshuffle: error: invalid campaign: set_size must not exceed "
                             "the domain size")
    status, error = _run(["admin", "campaign", "create", "--id", "x", "--domain-size", "4",
                          "--set-size", "1", "--levels", "1,2", "--fake-tolerance", "1.5"],
                         capsys)
    assert status == 2 and error.startswith("segshuffle: error: invalid campaign: "
                                            "--fake-tolerance: must be less than 1")


def test_signing_key_defaults_its_server_like_every_admin_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEGSHUFFLE_SERVER_URL", raising=False)
    args = cli.build_parser("admin").parse_args(["admin", "signing-key"])
    assert args.server == "http://127.0.0.1:8080"
    monkeypatch.setenv("SEGSHUFFLE_SERVER_URL", "http://127.0.0.1:8120")
    for argv in (["admin", "signing-key"], ["admin", "campaign", "list"]):
        assert cli.build_parser("admin").parse_args(argv).server == "http://127.0.0.1:8120"


def _run_serve(service: str, directory: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``segshuffle serve SERVICE FLAGS`` in a subprocess run from ``directory``, with the
    service's required secrets (and the shuffler in open enrollment, so that it needs no
    issuer key) from the environment and no other SEGSHUFFLE_ setting."""
    if service == "server":
        return run_serve_server(directory, *flags, cwd=directory)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    environment.update(SEGSHUFFLE_SHUFFLER_SERVER_TOKEN="s" * 32,
                       SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN="o" * 32,
                       SEGSHUFFLE_SHUFFLER_ENROLLMENT="open")
    return subprocess.run([sys.executable, "-m", "segshuffle.cli.main", "serve", service,
                           *flags], capture_output=True, text=True, timeout=60,
                          env=environment, cwd=directory)


@pytest.mark.slow  # subprocesses importing the service stack
@pytest.mark.parametrize("service", ["server", "shuffler"])
def test_serve_makes_no_directory_tree_and_nothing_before_it_can_listen(
        service: str, tmp_path: Path) -> None:
    import socket

    missing = tmp_path / "no" / "such" / "dir" / "x.sqlite3"
    done = _run_serve(service, tmp_path, "--database", str(missing), "--port", "0")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"segshuffle: error: the directory of the database {missing} ({missing.parent}) "
        "does not exist: create it first, or give another path"]
    assert not (tmp_path / "no").exists()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = _run_serve(service, tmp_path, "--database", str(tmp_path / "s.sqlite3"),
                          "--port", str(port), "--host", "127.0.0.1")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "cannot listen" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no key, no database


ADMIN_COMMANDS = ["admin issuer-key", "admin invitations", "admin signing-key",
                  "admin campaign create", "admin campaign list", "admin campaign show",
                  "admin campaign abort", "admin status", "admin release", "admin results"]
"""Every ``segshuffle admin`` command that takes flags, each with its own row in the
README's table (checked against the parser below)."""


def _subcommand(path: list[str]) -> argparse.ArgumentParser:
    """The parser of ``segshuffle PATH...`` (``["admin", "campaign", "create"]``)."""
    parser = cli.build_parser(path[0])
    for name in path:
        parser = next(a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


def test_the_admin_command_list_is_the_parsers() -> None:
    def leaves(parser: argparse.ArgumentParser, path: list[str]) -> list[str]:
        below = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not below:
            return [" ".join(path)]
        return [leaf for name, child in below[0].choices.items()
                for leaf in leaves(child, [*path, name])]

    assert sorted(leaves(_subcommand(["admin"]), ["admin"])) == sorted(ADMIN_COMMANDS)


@pytest.mark.parametrize("name", ["optimize", "audit", "demo", "reproduce", *ADMIN_COMMANDS])
def test_the_readme_command_table_lists_every_flag(name: str) -> None:
    """The table was missing `reproduce --quick`, most demo flags and admin flags such as
    `status --interval` and `issuer-key --force`: it is checked against the parser, so a
    new flag cannot be left out.  (`serve` is not: its row says `[--SETTING VALUE ...]`,
    and its dozens of settings are listed by `segshuffle serve server --help`.)"""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    row = " ".join(line for line in readme.splitlines()
                   if line.startswith(f"| `segshuffle {name} "))
    command = _subcommand(name.split())
    flags = [option for action in command._actions for option in action.option_strings
             if option.startswith("--") and option != "--help"]
    assert row and [flag for flag in flags if flag not in row] == []
    # and the other way: no flag the command no longer has
    written = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", row))
    assert sorted(written - set(flags)) == []
