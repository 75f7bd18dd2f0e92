"""How the deployment tests call Docker Compose: the ``docker compose`` plugin, else the
``docker-compose`` program; a test skips when neither is installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def compose_command() -> list[str]:
    """The compose command line prefix; skips the test without one."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("neither docker-compose nor the docker compose plugin is installed")
