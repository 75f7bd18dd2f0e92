"""The JavaScript client (clients/web) runs its own tests under Node: every HPKE vector
sealed and opened, every canonical form and document hash, the document signatures of
docs/wire.md section 9, and the session on top of them (the retry budget, every check of
docs/protocol.md section 6 against the parameters vectors, the randomizers, the saved
state and both rounds against an in-memory shuffler)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .node_support import node

WEB = Path(__file__).resolve().parents[1] / "clients" / "web"


@pytest.mark.slow
def test_the_web_client_passes_its_vector_tests() -> None:
    result = subprocess.run([node(), "--test", str(WEB)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    counts = dict(re.findall(r"^# (tests|pass|fail) (\d+)$", result.stdout, re.MULTILINE))
    assert counts.get("fail") == "0" and counts.get("pass") == counts.get("tests"), counts
    assert int(counts["pass"]) >= 50, counts
