"""Where the Python tools find the web client: an explicit folder, the
``SEGSHUFFLE_WEB_CLIENT`` setting, or ``clients/web`` under the current directory, and
never a path computed from where the Python package is installed (an installed package
has no ``clients/`` above it)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from segshuffle.testing import web_client, web_demo
from segshuffle.testing.web_client import WEB_CLIENT_SETTING, web_client_root


def _client(folder: Path) -> Path:
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "index.js").write_text("export {};\n", "utf-8")
    return folder


def test_the_setting_names_the_web_client_and_an_explicit_folder_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed = _client(tmp_path / "node_modules" / "segshuffle-web")
    monkeypatch.setenv(WEB_CLIENT_SETTING, str(installed))
    monkeypatch.chdir(tmp_path)
    assert web_client_root() == installed.resolve()
    other = _client(tmp_path / "elsewhere")
    assert web_client_root(other) == other.resolve()


def test_without_the_setting_only_the_working_directory_is_looked_at(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WEB_CLIENT_SETTING, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=WEB_CLIENT_SETTING) as raised:
        web_client_root()
    assert "\n" not in str(raised.value)
    checkout = _client(tmp_path / "clients" / "web")
    assert web_client_root() == checkout.resolve()


def test_a_folder_without_the_client_is_refused_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WEB_CLIENT_SETTING, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match=r"has no src/index\.js"):
        web_client_root()


def test_the_demo_ends_with_one_line_when_it_cannot_find_the_client(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(WEB_CLIENT_SETTING, raising=False)
    monkeypatch.chdir(tmp_path)
    assert web_demo.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("web demo: the web client is not at ") and err.count("\n") == 1
    client = _client(tmp_path / "client")  # a package without the checkout's demo page
    assert web_demo.main(["--web-client", str(client)]) == 2
    assert "has no demo/index.html" in capsys.readouterr().err


def test_the_python_tools_do_not_reach_above_their_package() -> None:
    for module in (web_client, web_demo):
        assert "__file__" not in inspect.getsource(module), module.__name__


def test_the_demo_refuses_fewer_users_than_the_clients_default_floor(capsys) -> None:
    # The pages' default policy refuses min_users below the shuffler's default floor, so
    # a smaller demo could only end in refusals.
    with pytest.raises(SystemExit) as stopped:
        web_demo.main(["--users", "9"])
    assert stopped.value.code == 2
    assert "at least 10" in capsys.readouterr().err
