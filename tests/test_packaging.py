"""Packaging: every package directory is declared in pyproject.toml, so a regular install
ships it, and the base install (core, wire, crypto, client SDK) needs no numpy, scipy, web
framework or plotting, and fits a fresh virtualenv of at most 80 MB."""

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
OPTIONAL = ("numpy", "scipy", "fastapi", "starlette", "uvicorn", "matplotlib")
BASE_IMPORT = ("import json, sys; import segshuffle.client, segshuffle.core, segshuffle.crypto, "
               "segshuffle.wire.models, segshuffle.wire.plaintext, segshuffle.wire.problems, "
               "segshuffle.client.sync, segshuffle.client.aio, segshuffle.client.verify, "
               "segshuffle.client.messages, segshuffle.core.portable, "
               "segshuffle.core.randomizers; "
               "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")

#: The most a fresh virtualenv with the base install may occupy on disk (pip included).
LIGHT_INSTALL_BYTES = 80 * 10**6

#: Parameter documents of the vectors whose levels the portable accountant checks in a
#: fraction of a second each (both blanket modes, s = 1 and 2, accepted and refused);
#: tests/test_portable_accountant.py checks every document.
LIGHT_DOCUMENTS = (4, 5, 6, 7, 8, 9, 13, 22, 23)

#: Run in the light install: the portable accountant's verdict on every level of those
#: parameters documents of the vectors file, and a client's randomizers, without numpy.
LIGHT_CHECK = """
import json, sys
from segshuffle.client import accountant
from segshuffle.core.randomizers import fit_set, fixed_size_slots
assert accountant.accountant_name() == "portable"
vectors = json.load(open(sys.argv[1]))
checked = 0
for index in json.loads(sys.argv[2]):
    document = vectors["parameters"][index]
    p = document["parameters"]
    for verdict in document["level_verdicts"]:
        bound = accountant.user_delta(
            verdict["level"], verdict["lambda"], p["set_size"], p["honest_users"], p["m"],
            p["privacy_domain_size"], mode=p.get("blanket_mode", "slots"), delta=p["delta"])
        assert (bound <= p["delta"]) == verdict["holds"], (document["description"], verdict)
        checked += 1
slots = fixed_size_slots(fit_set([1, 2], 4, 10), 0.5, 1.5, 14)
assert len(slots) == 6
print(checked)
"""


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
    """A real base-only install (from pip's cache when warm) is at most 80 MB with pip, has
    no numpy or scipy, imports the client SDK, gives the vectors' level verdicts (of the
    documents it checks quickly) with the portable accountant, and ``segshuffle optimize``
    and ``serve`` name the missing extra in one line."""
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
    size = sum(path.lstat().st_blocks * 512 for path in venv.rglob("*"))
    assert size <= LIGHT_INSTALL_BYTES, f"the light install takes {size / 1e6:.1f} MB"
    light = subprocess.run(
        [str(python), "-c", LIGHT_CHECK, str(ROOT / "docs" / "test-vectors.json"),
         json.dumps(LIGHT_DOCUMENTS)],
        capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert light.returncode == 0, light.stderr[-2000:]
    assert int(light.stdout) == 3 * len(LIGHT_DOCUMENTS)
    optimize = subprocess.run([str(venv / "bin" / "segshuffle"), "optimize", "--help"],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert optimize.returncode == 2 and "segshuffle[numeric]" in optimize.stderr
    serve = subprocess.run([str(venv / "bin" / "segshuffle"), "serve", "server"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert serve.returncode == 2
    assert "segshuffle[server]" in serve.stderr and len(serve.stderr.splitlines()) == 1
