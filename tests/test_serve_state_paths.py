"""A directory that cannot hold a service's state is bad input: one line naming the
setting and exit status 2, before anything is made (it used to be a traceback from deep
inside SQLite or ``mkdir`` and exit status 1).  The same for every way to start a service:
``segshuffle serve`` and ``python -m segshuffle.services.server|shuffler``.

The unwritable directories are ones no permission bit can open, so that the tests hold
when they run as root: a path through a regular file, and ``/proc``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from segshuffle.services.server.settings import Settings as ServerSettings
from segshuffle.services.shuffler.settings import Settings as ShufflerSettings

PROC = Path("/proc/self")
needs_proc = pytest.mark.skipif(not PROC.is_dir(), reason="needs Linux's /proc")

SECRETS = {
    "server": {"SEGSHUFFLE_SERVER_ADMIN_TOKEN": "a" * 32,
               "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": "s" * 32},
    "shuffler": {"SEGSHUFFLE_SHUFFLER_SERVER_TOKEN": "s" * 32,
                 "SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN": "o" * 32,
                 "SEGSHUFFLE_SHUFFLER_ENROLLMENT": "open"},
}
KEY_SETTING = {"server": "KEY_DIR", "shuffler": "KEY_DIRECTORY"}


def _start(argv: list[str], service: str, directory: Path,
           **settings: str) -> subprocess.CompletedProcess[str]:
    """A service started with ``argv`` in ``directory``, with its secrets and ``settings``
    (``SEGSHUFFLE_<SERVICE>_<NAME>``) and no other SEGSHUFFLE_ variable, to its end."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    environment.update(SECRETS[service])
    prefix = f"SEGSHUFFLE_{service.upper()}_"
    environment.update({prefix + name: value for name, value in settings.items()})
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          timeout=120, env=environment, cwd=directory)


def _serve(service: str, directory: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    return _start(["-m", "segshuffle.cli.main", "serve", service, "--port", "0"], service,
                  directory, **settings)


def _module(service: str, directory: Path,
            **settings: str) -> subprocess.CompletedProcess[str]:
    return _start(["-m", f"segshuffle.services.{service}"], service, directory,
                  **{"PORT": "0", **settings})


def _refused_in_one_line(done: subprocess.CompletedProcess[str], program: str,
                         *names: str) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{program}: error: "), done.stderr
    for name in names:
        assert name in lines[0], lines[0]
    assert done.returncode == 2, done.stderr
    return lines[0]


def _a_regular_file(directory: Path) -> Path:
    blocker = directory / "blocker"
    blocker.write_text("a regular file, not a directory\n")
    return blocker


# -- the check itself ---------------------------------------------------------------------------

def test_a_key_directory_under_a_regular_file_is_refused(tmp_path: Path) -> None:
    from segshuffle.services.state_paths import (
        StateDirectory,
        UnusableDirectoryError,
        require_writable,
    )

    blocker = _a_regular_file(tmp_path)
    with pytest.raises(UnusableDirectoryError, match=rf"--key-dir.*{blocker} is not a dir"):
        require_writable([StateDirectory("--key-dir", blocker / "sub" / "keys", True)])
    with pytest.raises(UnusableDirectoryError, match="is not a directory"):
        require_writable([StateDirectory("--key-dir", blocker, True)])
    with pytest.raises(UnusableDirectoryError, match="does not exist"):
        require_writable([StateDirectory("--spill", tmp_path / "missing", False)])
    require_writable([StateDirectory("--key-dir", tmp_path / "new" / "keys", True),
                      StateDirectory("--spill", tmp_path, False)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]  # nothing made


@needs_proc
def test_a_directory_no_file_can_be_created_in_is_refused() -> None:
    from segshuffle.services.state_paths import (
        StateDirectory,
        UnusableDirectoryError,
        require_writable,
    )

    with pytest.raises(UnusableDirectoryError, match="--database: cannot create files in /proc"):
        require_writable([StateDirectory("--database", Path("/proc"), False)])


def test_every_directory_a_service_writes_in_is_listed(tmp_path: Path) -> None:
    server = ServerSettings(**{"admin_token": "a" * 32, "shuffler_token": "s" * 32,
                               "database": str(tmp_path / "s.db"),
                               "signing_key_file": str(tmp_path / "signing" / "k.pem")})
    assert [(d.label, d.path, d.made_when_missing) for d in server.state_directories()] == [
        ("SEGSHUFFLE_SERVER_DATABASE (--database)", tmp_path, False),
        ("SEGSHUFFLE_SERVER_KEY_DIR (--key-dir)", Path(f"{tmp_path}/s.db.keys"), True),
        ("SEGSHUFFLE_SERVER_SIGNING_KEY_FILE (--signing-key-file)", tmp_path / "signing",
         True)]
    shuffler = ShufflerSettings(**{"server_token": "s" * 32, "operator_token": "o" * 32,
                                   "enrollment": "open", "database": str(tmp_path / "h.db"),
                                   "spill_directory": str(tmp_path / "spill")})
    assert [(d.label, d.path, d.made_when_missing) for d in shuffler.state_directories()] == [
        ("SEGSHUFFLE_SHUFFLER_DATABASE (--database)", tmp_path, False),
        ("SEGSHUFFLE_SHUFFLER_KEY_DIRECTORY (--key-directory)",
         Path(f"{tmp_path}/h.db.keys"), True),
        ("SEGSHUFFLE_SHUFFLER_SPILL_DIRECTORY (--spill-directory)", tmp_path / "spill",
         False)]


# -- every way to start a service ---------------------------------------------------------------

@pytest.mark.slow  # subprocesses importing the service stack
@needs_proc
@pytest.mark.parametrize("service", ["server", "shuffler"])
def test_serve_with_a_database_in_an_unwritable_directory_exits_2(
        service: str, tmp_path: Path) -> None:
    done = _serve(service, tmp_path, DATABASE="/proc/segshuffle.sqlite3",
                  **{KEY_SETTING[service]: str(tmp_path / "keys")})
    _refused_in_one_line(done, "segshuffle", f"SEGSHUFFLE_{service.upper()}_DATABASE",
                         "--database", "/proc")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("service", ["server", "shuffler"])
def test_serve_with_a_key_directory_under_a_regular_file_exits_2(
        service: str, tmp_path: Path) -> None:
    blocker = _a_regular_file(tmp_path)
    done = _serve(service, tmp_path, DATABASE=str(tmp_path / f"{service}.sqlite3"),
                  **{KEY_SETTING[service]: str(blocker / "keys")})
    _refused_in_one_line(done, "segshuffle", KEY_SETTING[service], str(blocker))
    assert [p.name for p in tmp_path.iterdir()] == ["blocker"]  # no database made either


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize("service", ["server", "shuffler"])
def test_the_service_modules_refuse_alike(service: str, tmp_path: Path) -> None:
    """``python -m segshuffle.services.SERVICE`` refuses in one line too."""
    done = _module(service, tmp_path, DATABASE="/proc/segshuffle.sqlite3",
                   **{KEY_SETTING[service]: str(tmp_path / "keys")})
    _refused_in_one_line(done, f"segshuffle {service}", "DATABASE", "/proc")


@pytest.mark.slow
@pytest.mark.parametrize("service", ["server", "shuffler"])
def test_the_service_modules_refuse_a_port_in_use_in_one_line(
        service: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        done = _module(service, tmp_path, PORT=port,
                       DATABASE=str(tmp_path / f"{service}.sqlite3"))
    _refused_in_one_line(done, f"segshuffle {service}", f"cannot listen on 127.0.0.1:{port}")
