"""The JavaScript client's wire layer (clients/web) runs its own tests under Node:
every HPKE vector sealed and opened, every canonical form and document hash, and the
document signatures of docs/wire.md section 9."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

WEB = Path(__file__).resolve().parents[1] / "clients" / "web"


def _node() -> str:
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed (.ci/run installs Debian's nodejs)")
        pytest.skip("node is not installed")
    return found


def test_the_web_client_passes_its_vector_tests() -> None:
    result = subprocess.run([_node(), "--test", str(WEB)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout and "# pass 8" in result.stdout
