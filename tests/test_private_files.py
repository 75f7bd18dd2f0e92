"""What the services keep on disk is private whatever the umask, and what is not is said.

Folders the project creates (a database's, the key folders, a local stack's) are 0700,
with every missing parent; databases with their ``-wal`` and ``-shm``, logs and keys are
0600.  An existing folder or file that others may use is left as it is, and a warning
names it with its mode.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from segshuffle.client.errors import ServiceError
from segshuffle.services.server import signing
from segshuffle.services.server.backends import open_repository
from segshuffle.services.server.keys import KeyStore
from segshuffle.services.shuffler.backends import open_storage
from segshuffle.services.shuffler.vault import RoundKeys
from segshuffle.testing.localstack import LocalStack

OPENERS = {"server": open_repository, "shuffler": open_storage}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The usual umask 022, under which new files are 0644 and folders 0755 by default."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="segshuffle.files")
    return caplog


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_a_new_database_its_wal_and_shm_and_its_folders_are_private(
        tmp_path: Path, service: str) -> None:
    path = tmp_path / "state" / "data" / f"{service}.sqlite3"
    store = OPENERS[service](str(path))
    try:
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert all(file.exists() for file in files)
        assert {file.name: _mode(file) for file in files} == \
            {file.name: 0o600 for file in files}
        assert (_mode(tmp_path / "state"), _mode(path.parent)) == (0o700, 0o700)
    finally:
        store.close()


def test_the_shufflers_lock_file_is_private(tmp_path: Path) -> None:
    from segshuffle.services.sqlite_base import hold_single_process

    path = tmp_path / "shuffler.sqlite3"
    hold_single_process(str(path), "shuffler").close()
    assert _mode(Path(f"{path}.lock")) == 0o600


def test_the_server_key_folder_is_private_when_the_signing_key_comes_first(
        tmp_path: Path) -> None:
    """The server makes its signing key (``<keys>/signing/...``) before its campaign key
    store: the key folder is then made as a parent, and must be 0700 too, since its
    file names are campaign ids."""
    keys = tmp_path / "deploy" / "server-keys"
    signing.load_or_create(signing.default_path(keys))
    store = KeyStore(keys)
    store.create("campaign-1")
    assert {p: _mode(p) for p in (tmp_path / "deploy", keys, keys / "signing")} == \
        {p: 0o700 for p in (tmp_path / "deploy", keys, keys / "signing")}
    assert {_mode(p) for p in keys.rglob("*.pem")} == {0o600}


def test_the_shufflers_round_key_folder_and_its_parents_are_private(tmp_path: Path) -> None:
    folder = tmp_path / "shuffler" / "round-keys"
    RoundKeys(folder)
    assert (_mode(folder.parent), _mode(folder)) == (0o700, 0o700)


def test_a_local_stacks_folder_and_logs_are_private(tmp_path: Path) -> None:
    """A service that cannot start still leaves its log: created 0600 in a 0700 folder."""
    stack = LocalStack(tmp_path / "demo" / "stack", python="/bin/false", startup_timeout=30)
    try:
        with pytest.raises(ServiceError):
            stack.start_service("server")
    finally:
        stack.close()
    assert (_mode(tmp_path / "demo"), _mode(stack.directory)) == (0o700, 0o700)
    assert _mode(stack.log_path("server")) == 0o600


def test_private_folders_whatever_the_umask(tmp_path: Path) -> None:
    from segshuffle.private_files import make_private_folder, open_private_append

    os.umask(0o777)  # would leave even the owner without access
    made = make_private_folder(tmp_path / "a" / "b")
    with open_private_append(tmp_path / "a" / "log") as log:
        log.write(b"x")
    os.umask(0o022)
    assert (_mode(tmp_path / "a"), _mode(made)) == (0o700, 0o700)
    assert _mode(tmp_path / "a" / "log") == 0o600


@pytest.mark.parametrize("service", sorted(OPENERS))
def test_an_existing_open_database_and_folder_are_reported_not_changed(
        tmp_path: Path, service: str, warnings: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "data"
    path = folder / f"{service}.sqlite3"
    OPENERS[service](str(path)).close()
    folder.chmod(0o755)
    path.chmod(0o644)
    OPENERS[service](str(path)).close()
    lines = [r.getMessage() for r in warnings.records]
    assert any(f"the folder {folder} has mode 0755" in line and f"chmod 700 {folder}" in line
               for line in lines), lines
    assert any(f"the file {path} has mode 0644" in line and f"chmod 600 {path}" in line
               for line in lines), lines
    assert (_mode(folder), _mode(path)) == (0o755, 0o644)  # reported, left as they are


def test_existing_open_key_folders_and_signing_key_are_reported(
        tmp_path: Path, warnings: pytest.LogCaptureFixture) -> None:
    campaign_keys, round_keys = tmp_path / "server-keys", tmp_path / "round-keys"
    for folder in (campaign_keys, round_keys):
        folder.mkdir(mode=0o755)
    key_path = signing.default_path(campaign_keys)
    signing.load_or_create(key_path)
    key_path.chmod(0o644)
    KeyStore(campaign_keys)
    RoundKeys(round_keys)
    signing.load_or_create(key_path)
    lines = [r.getMessage() for r in warnings.records]
    for expected in (f"the folder {campaign_keys} has mode 0755",
                     f"the folder {round_keys} has mode 0755",
                     f"the file {key_path} has mode 0644"):
        assert any(expected in line for line in lines), (expected, lines)
    assert all(r.levelno == logging.WARNING for r in warnings.records)


def test_private_paths_and_missing_ones_are_not_reported(tmp_path: Path) -> None:
    from segshuffle.private_files import make_private_folder, open_paths

    private = make_private_folder(tmp_path / "p")
    assert open_paths([private, tmp_path / "missing"]) == []


@pytest.mark.slow  # starts the service processes
@pytest.mark.parametrize("service", sorted(OPENERS))
def test_serve_reports_open_state_in_its_start_up_output(tmp_path: Path, service: str) -> None:
    """``segshuffle serve SERVICE`` on a database and key folder others may read starts,
    and says so in its log before it is ready (the shuffler's readiness needs its server,
    which is started first on private state)."""
    stack = LocalStack(tmp_path / "stack")
    try:
        database = stack.database_path(service)
        if service == "server":
            keys = stack.directory / "server-keys"
            KeyStore(keys)
        else:
            keys = Path(f"{database}.keys")  # the shuffler's default round key folder
            RoundKeys(keys)
            stack.start_service("server")
        OPENERS[service](str(database)).close()
        database.chmod(0o644)
        keys.chmod(0o755)
        stack.start_service(service)
        log = stack.log_path(service).read_text()
    finally:
        stack.close()
    for expected in (f"the file {database} has mode 0644", f"the folder {keys} has mode 0755"):
        assert expected in log, log
