"""One error path for the command line: every subcommand given bad input answers
with one line on stderr and exit status 2, never a traceback (an exception escaping here
fails the test), and the demo refuses bad flags before it starts any service."""

from __future__ import annotations

from pathlib import Path

import pytest

from segshuffle.cli.main import main

NOWHERE = "http://127.0.0.1:1"  # nothing listens there
MISSING = "/nonexistent/segshuffle"

CASES = [
    ["nope"], ["--nope"], ["optimize"], ["optimize", "--users", "x"],
    ["optimize", "--users", "10", "--domain-size", "4", "--set-size", "1", "--levels", "1",
     "--shares", "1", "--delta", "2"],
    ["optimize", "--users", "10", "--domain-size", "4", "--set-size", "9", "--levels", "1",
     "--shares", "1", "--delta", "1e-3"],
    ["optimize", "--users", "10", "--domain-size", "4", "--set-size", "1", "--levels", "1,2",
     "--shares", "1", "--delta", "1e-3"],
    ["optimize", "--users", "10", "--domain-size", "4", "--set-size", "1", "--levels", "nan",
     "--shares", "1", "--delta", "1e-3"],
    ["audit", "--users", "10"],
    ["audit", "--users", "10", "--domain-size", "4", "--set-size", "1", "--blanket", "-1",
     "--lam", "0.5", "--delta", "1e-3"],
    ["audit", "--users", "10", "--domain-size", "4", "--set-size", "1", "--blanket", "1",
     "--lam", "2", "--delta", "1e-3"],
    ["demo", "--users", "1"], ["demo", "--dataset", "x"], ["demo", "--levels", "3,1"],
    ["demo", "--delta", "2"], ["demo", "--level-privacy", "-1"],
    ["reproduce"], ["reproduce", "--figure", "nope"],
    ["reproduce", "--figure", "msnbc-s1", "--data", MISSING],
    ["serve"], ["serve", "nope"],
    ["admin"], ["admin", "campaign", "show", "bad id!"],
    ["admin", "status", "x", "--shuffler", "notaurl"],
    ["admin", "release", "x", "--round", "3"], ["admin", "results", "x", "--format", "bmp"],
    ["admin", "invitations", "c", "--count", "1", "--out", "inv.txt", "--issuer-key", MISSING],
    ["admin", "issuer-key", "--out", f"{MISSING}/k.pem"],
    ["admin", "signing-key", "--server", NOWHERE],
    ["admin", "campaign", "create", "--id", "x", "--domain-size", "4", "--set-size", "1",
     "--levels", "1", "--server", NOWHERE],
]


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(c)[:60] for c in CASES])
def test_bad_input_is_one_line_and_status_2(argv: list[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEGSHUFFLE_ADMIN_TOKEN", "a" * 32)
    monkeypatch.setenv("SEGSHUFFLE_OPERATOR_TOKEN", "o" * 32)
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 2, (status, captured.err)
    assert len(lines) == 1 and lines[0].startswith(("segshuffle", "usage")), captured.err
    assert "Traceback" not in captured.err
