"""What the browser tests need: Debian's Chromium and Playwright.

``.ci/run`` installs both; without them the browser tests skip, except under ``CI=true``,
where they fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from segshuffle.testing.web_demo import CHROMIUM


def require_chromium() -> None:
    """Skip the calling test (fail it under CI) without Chromium or Playwright."""
    missing = []
    if not Path(CHROMIUM).is_file():
        missing.append("chromium (apt-get install chromium)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install playwright)")
    if missing and os.environ.get("CI") == "true":
        pytest.fail(f"missing under CI: {', '.join(missing)}")
    if missing:
        pytest.skip(f"missing: {', '.join(missing)}")
