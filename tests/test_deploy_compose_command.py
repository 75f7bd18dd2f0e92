"""deploy/build-images.sh ends by printing the command that starts the deployment, with the
Docker Compose this machine has: ``docker compose`` (the plugin) or ``docker-compose``
(it used to print ``docker compose`` on a machine that only had ``docker-compose``).

The detection is deploy/compose-command.sh, which the script sources; here it runs with a
PATH that holds only fake ``docker`` / ``docker-compose`` programs (and ``timeout``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
DETECTION = DEPLOY / "compose-command.sh"
BASH = shutil.which("bash") or "/bin/bash"

PLUGIN = ("#!/bin/sh\n[ \"$1 $2\" = 'compose version' ] && echo 'Docker Compose v2' && exit 0\n"
          "exit 1\n")
NO_PLUGIN = "#!/bin/sh\necho \"docker: unknown command: docker $1\" >&2\nexit 1\n"
STANDALONE = "#!/bin/sh\necho 'docker-compose version 1.29.2'\n"


def _fake_path(directory: Path, programs: dict[str, str]) -> Path:
    """A directory holding only ``programs`` (name: shell script) and ``timeout``."""
    directory.mkdir()
    for name, script in programs.items():
        program = directory / name
        program.write_text(script)
        program.chmod(0o755)
    real_timeout = shutil.which("timeout")
    assert real_timeout is not None
    (directory / "timeout").symlink_to(real_timeout)
    return directory


def _run(function: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``function`` of deploy/compose-command.sh, run by bash with PATH=path only."""
    return subprocess.run([BASH, "-c", f'. "$1"; {function}', "bash", str(DETECTION)],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": str(path), "HOME": os.environ.get("HOME", "/")})


@pytest.mark.parametrize(("programs", "expected"), [
    ({"docker": PLUGIN}, "docker compose"),
    ({"docker": PLUGIN, "docker-compose": STANDALONE}, "docker compose"),
    ({"docker": NO_PLUGIN, "docker-compose": STANDALONE}, "docker-compose"),
    ({"docker-compose": STANDALONE}, "docker-compose"),
], ids=["plugin", "both", "client-without-plugin", "standalone-only"])
def test_the_compose_command_is_the_one_installed(tmp_path: Path, programs: dict[str, str],
                                                  expected: str) -> None:
    path = _fake_path(tmp_path / "bin", programs)
    done = _run("compose_command", path)
    assert (done.returncode, done.stdout) == (0, expected + "\n"), done.stderr
    hint = _run("compose_up_hint deploy/compose.yaml", path)
    assert hint.stdout == f"{expected} -f deploy/compose.yaml up -d\n"


def test_without_compose_the_hint_says_what_to_install(tmp_path: Path) -> None:
    path = _fake_path(tmp_path / "bin", {"docker": NO_PLUGIN})
    done = _run("compose_command", path)
    assert (done.returncode, done.stdout) == (1, "")
    hint = _run("compose_up_hint deploy/compose.yaml", path)
    assert hint.returncode == 0
    assert hint.stdout.startswith("install Docker Compose") and "docker-compose" in hint.stdout


def test_build_images_ends_with_the_detected_command() -> None:
    """The script sources the detection and its closing line is the hint, not a fixed
    ``docker compose`` (running the script needs Docker and a network: see
    tests/test_deploy_docker.py)."""
    script = (DEPLOY / "build-images.sh").read_text()
    assert '. "${here}/compose-command.sh"' in script
    done_lines = [line.strip() for line in script.splitlines() if 'log "done' in line]
    assert done_lines == ['log "done: $(compose_up_hint deploy/compose.yaml)"']
    result = subprocess.run(["bash", "-n", str(DETECTION)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
