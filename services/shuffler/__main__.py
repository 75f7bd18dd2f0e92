"""``python -m segshuffle.services.shuffler``: serve with settings from the environment.

A refused start is one line and exit status 2 or 1, as ``segshuffle serve shuffler``
(:mod:`..exit_status`)."""

from __future__ import annotations

from ..exit_status import run_or_refuse
from .main import run
from .settings import Settings


def main() -> int:
    return run_or_refuse("segshuffle shuffler", lambda: run(Settings.from_env()))


if __name__ == "__main__":
    raise SystemExit(main())
