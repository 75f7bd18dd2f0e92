"""Node for the web client's tests: ``.ci/run`` installs Debian's nodejs when the machine
has none; without it these tests skip, except under ``CI=true``, where they fail."""

from __future__ import annotations

import os
import shutil

import pytest


def node() -> str:
    """The node binary (skips, or fails under CI=true, without one)."""
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed (.ci/run installs Debian's nodejs)")
        pytest.skip("node is not installed")
    return found
