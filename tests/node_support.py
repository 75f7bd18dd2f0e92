"""Node for the web client's tests: ``.ci/run`` installs Debian's nodejs when the machine
has none; without it these tests skip, except under ``CI=true``, where they fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest


def node() -> str:
    """The node binary (skips, or fails under CI=true, without one)."""
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed (.ci/run installs Debian's nodejs)")
        pytest.skip("node is not installed")
    return found


_USER_DELTA_SCRIPT = """
const calls = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
import(process.argv[1]).then(({ userDelta }) => {
  console.log(JSON.stringify(calls.map(([args, options]) => userDelta(...args, options))));
});
"""


ACCOUNTANT_DIR = Path(__file__).resolve().parents[1] / "clients" / "web" / "src" / "accountant"


def run_accountant_script(script: str, module: str, payload: object, *,
                          timeout: float = 120.0) -> Any:
    """Run ``script`` in one Node process with the URL of the web accountant's ``module``
    (a file name, e.g. ``slot_groups.js``) as ``process.argv[1]`` and ``payload`` as JSON on
    its standard input; what it prints, parsed as JSON.  A failing script fails the test
    with the end of its stderr."""
    path = ACCOUNTANT_DIR / module
    done = subprocess.run([node(), "-e", script, path.as_uri()], input=json.dumps(payload),
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def javascript_user_deltas(calls: list[tuple[list[float], dict]], *, timeout: float = 600.0
                           ) -> list[float]:
    """The web client's ``userDelta(level, lam, s, h, m, d, options)`` for each
    (arguments, options) of ``calls``, in one Node process."""
    return run_accountant_script(_USER_DELTA_SCRIPT, "index.js", calls, timeout=timeout)
