"""The CLI's own exceptions (their own module, so ``python -m segshuffle.cli.main`` and the
``segshuffle`` script catch the same class)."""

from __future__ import annotations

import signal


class CommandError(Exception):
    """A failure the user can act on; printed as one line, exit status 2."""


class Interrupted(KeyboardInterrupt):
    """A command stopped by SIGINT or SIGTERM after cleaning up; printed as one line,
    exit status 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell
    reports a process ended by that signal."""

    def __init__(self, signal_number: int) -> None:
        self.signal_number = signal_number
        super().__init__(f"interrupted by {signal.Signals(signal_number).name}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signal_number
