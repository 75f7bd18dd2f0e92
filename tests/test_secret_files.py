"""Secrets from files (``..._TOKEN_FILE``), so that no token shows in a process environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from segshuffle.services.server.settings import Settings as ServerSettings
from segshuffle.services.shuffler.settings import Settings as ShufflerSettings

ADMIN = "a" * 32
SHUFFLER = "s" * 32


def _file(tmp_path: Path, name: str, content: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content)
    path.chmod(0o600)
    return str(path)


def test_server_tokens_come_from_files(tmp_path: Path, environment) -> None:
    environ = {"SEGSHUFFLE_SERVER_ADMIN_TOKEN_FILE": _file(tmp_path, "a", ADMIN.encode() + b"\n"),
               "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN_FILE": _file(tmp_path, "s", SHUFFLER.encode())}
    environment(environ)
    settings = ServerSettings.from_env(database=str(tmp_path / "db"))
    assert (settings.admin_token, settings.shuffler_token) == (ADMIN, SHUFFLER)


def test_shuffler_tokens_come_from_files(tmp_path: Path, environment) -> None:
    environ = {"SEGSHUFFLE_SHUFFLER_SERVER_TOKEN_FILE": _file(tmp_path, "s", SHUFFLER.encode()),
               "SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN_FILE": _file(tmp_path, "o", b"op\r\n"),
               "SEGSHUFFLE_SHUFFLER_ENROLLMENT": "open"}
    environment(environ)
    settings = ShufflerSettings.from_env(database=str(tmp_path / "db"))
    assert (settings.server_token, settings.operator_token) == (SHUFFLER, "op")


@pytest.mark.parametrize("case", ["both", "missing", "large", "binary"])
def test_bad_secret_files_are_one_clear_error(tmp_path: Path, case: str, environment) -> None:
    variable = "SEGSHUFFLE_SERVER_ADMIN_TOKEN"
    environ = {"SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": SHUFFLER}
    if case == "both":
        environ |= {variable: ADMIN, variable + "_FILE": _file(tmp_path, "a", ADMIN.encode())}
    elif case == "missing":
        environ[variable + "_FILE"] = str(tmp_path / "nope")
    elif case == "large":
        environ[variable + "_FILE"] = _file(tmp_path, "a", b"x" * 5000)
    else:
        environ[variable + "_FILE"] = _file(tmp_path, "a", b"\xff\xfe")
    environment(environ)
    with pytest.raises(ValueError, match=f"{variable}") as refused:
        ServerSettings.from_env(database=str(tmp_path / "db"))
    assert "\n" not in str(refused.value)
