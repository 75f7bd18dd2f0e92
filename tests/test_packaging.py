"""Packaging: every package directory is declared in pyproject.toml, so a regular install
ships it, and the base install (core, wire, crypto, client SDK) needs no web framework."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_declared() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = set(config["tool"]["setuptools"]["packages"])
    roots = config["tool"]["setuptools"]["package-dir"]
    found = set()
    for package, directory in roots.items():
        base = ROOT / directory
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base).parts
            found.add(".".join((package, *relative)) if relative else package)
    assert found <= declared, f"undeclared packages: {sorted(found - declared)}"


#: Modules of the optional extras that the base install must not need.
OPTIONAL = ("fastapi", "starlette", "uvicorn", "matplotlib")
BASE_IMPORT = ("import json, sys; import segshuffle.client, segshuffle.core, segshuffle.crypto, "
               "segshuffle.wire.models, segshuffle.wire.plaintext, segshuffle.wire.problems; "
               "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")


def test_base_dependencies_leave_out_the_extras() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(config["dependencies"])
    assert not any(name in base for name in OPTIONAL)
    extras = config["optional-dependencies"]
    assert any("fastapi" in d for d in extras["server"])
    assert any("uvicorn" in d for d in extras["server"])
    assert any("matplotlib" in d for d in extras["experiments"])
    assert any("server" in d and "experiments" in d for d in extras["dev"])


def test_client_sdk_imports_no_web_framework_or_plotting() -> None:
    completed = subprocess.run([sys.executable, "-c", BASE_IMPORT], capture_output=True,
                               text=True, timeout=120, check=True)
    loaded = set(json.loads(completed.stdout))
    assert not loaded & set(OPTIONAL), sorted(loaded & set(OPTIONAL))


def test_operator_tooling_is_not_in_the_client_package() -> None:
    client = ROOT / "shared" / "segshuffle" / "client"
    assert not (client / "localstack.py").exists()
    assert not (client / "population.py").exists()


@pytest.mark.slow
def test_base_install_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    """A real base-only install (from pip's cache when warm) imports the client SDK, and
    ``segshuffle serve`` names the missing extra in one line."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(ROOT)],
                             capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-2000:]
    completed = subprocess.run([str(python), "-c", BASE_IMPORT], capture_output=True,
                               text=True, timeout=120, check=True, cwd=tmp_path)
    assert not set(json.loads(completed.stdout)) & set(OPTIONAL)
    for name in OPTIONAL:
        probe = subprocess.run([str(python), "-c", f"import {name}"], capture_output=True,
                               timeout=60, cwd=tmp_path)
        assert probe.returncode != 0, f"{name} was installed by the base install"
    serve = subprocess.run([str(venv / "bin" / "segshuffle"), "serve", "server"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert serve.returncode == 2
    assert "segshuffle[server]" in serve.stderr and len(serve.stderr.splitlines()) == 1
