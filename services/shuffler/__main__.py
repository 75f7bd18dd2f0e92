"""``python -m segshuffle.services.shuffler``: serve with settings from the environment."""

from __future__ import annotations

import sys

from .main import run
from .settings import Settings


def main() -> int:
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        sys.stderr.write(f"segshuffle shuffler: error: {exc}\n")
        return 2
    return int(run(settings) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
