"""``segshuffle admin issuer-key`` and ``segshuffle admin invitations``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from segshuffle.cli.main import main
from segshuffle.crypto.invitations import (
    load_issuer_key,
    parse_public_keys,
    public_key_text,
    verify_invitation,
)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_issuer_key_then_invitations(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    key_file = tmp_path / "issuer.pem"
    status, out, _ = _run(capsys, "admin", "issuer-key", "--out", str(key_file))
    assert status == 0
    public = out.strip()
    assert public == public_key_text(load_issuer_key(key_file))
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    status, out, _ = _run(capsys, "admin", "issuer-key", "--public-of", str(key_file),
                          "--json")
    assert status == 0 and json.loads(out)["public_key"] == public

    out_file = tmp_path / "invitations.txt"
    status, out, _ = _run(capsys, "admin", "invitations", "camp-1", "--count", "25", "--out",
                          str(out_file), "--issuer-key", str(key_file), "--expires-in", "600",
                          "--json")
    assert status == 0
    report = json.loads(out)
    assert report["count"] == 25 and report["campaign_id"] == "camp-1"
    assert abs(report["expires"] - (time.time() + 600)) < 30
    assert stat.S_IMODE(out_file.stat().st_mode) == 0o600
    lines = out_file.read_text().splitlines()
    assert len(lines) == len(set(lines)) == 25
    issuers = parse_public_keys(public)
    for line in lines:
        assert verify_invitation(line, issuers, "camp-1", time.time()).campaign_id == "camp-1"


@pytest.mark.parametrize("argv, message", [
    (["invitations", "bad id", "--count", "3"], "campaign id"),
    (["invitations", "c", "--count", "0"], "--count"),
    (["invitations", "c", "--count", "2000000"], "--count"),
    (["invitations", "c", "--count", "1", "--expires-in", "0"], "--expires-in"),
    (["invitations", "c", "--count", "1", "--expires-in", "99999999"], "--expires-in"),
    (["invitations", "c", "--count", "x"], "expected an integer"),
    (["invitations", "c", "--count", "1", "--issuer-key", "missing"], "cannot read issuer key"),
    (["invitations", "c", "--count", "1", "--issuer-key", "not-a-key"], "not an unencrypted PEM"),
    (["invitations", "c", "--count", "1", "--out", "exists"], "exists"),
    (["issuer-key", "--out", "exists"], "exists"),
    (["issuer-key", "--public-of", "not-a-key"], "not an unencrypted PEM"),
    (["issuer-key"], "one of the arguments"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admin", "issuer-key", "--out", str(tmp_path / "issuer.pem")]) == 0
    (tmp_path / "not-a-key").write_text("hello\n")
    (tmp_path / "exists").write_text("keep me\n")
    capsys.readouterr()
    argv = [str(tmp_path / a) if a in {"missing", "not-a-key", "exists"} else a for a in argv]
    if argv[0] == "invitations":
        for flag, default in (("--issuer-key", "issuer.pem"), ("--out", "out.txt")):
            if flag not in argv:
                argv += [flag, str(tmp_path / default)]
    try:
        status = main(["admin", *argv])
    except SystemExit as exc:  # argparse errors
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and message in err, err
    assert (tmp_path / "exists").read_text() == "keep me\n"
    assert not (tmp_path / "out.txt").exists()


def test_admin_command_runs_as_a_process(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    done = subprocess.run([sys.executable, "-m", "segshuffle.cli.main", "admin", "invitations",
                           "c", "--count", "1", "--out", str(tmp_path / "i"),
                           "--issuer-key", str(tmp_path / "missing")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("segshuffle: error: ")
