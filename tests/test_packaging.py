"""Every package directory is declared in pyproject.toml, so a regular install ships it."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
