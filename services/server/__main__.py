"""``python -m segshuffle.services.server``: run the server with settings from the environment.

A refused start is one line and exit status 2 or 1, as ``segshuffle serve server``
(:mod:`..exit_status`)."""

from __future__ import annotations

from ..exit_status import run_or_refuse
from .runner import run
from .settings import Settings
from .signing import SigningKeyError


def main() -> int:
    return run_or_refuse("segshuffle server", lambda: run(Settings.from_env()),
                         unusable=(SigningKeyError,))


if __name__ == "__main__":
    raise SystemExit(main())
