"""``python -m segshuffle.services.server``: run the server with settings from the environment."""

from __future__ import annotations

import sys

from .runner import run
from .settings import Settings


def main() -> int:
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        sys.stderr.write(f"segshuffle server: error: {exc}\n")
        return 2
    return run(settings)


if __name__ == "__main__":
    raise SystemExit(main())
