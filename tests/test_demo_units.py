"""``segshuffle demo`` without services: its size bounds, its progress lines while a release
waits, and how a signal stops its event loop."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import threading
import time

import pytest

from segshuffle.cli import demo
from segshuffle.cli.main import main
from segshuffle.wire.models import MAX_ITEM_NAMES

WAIT_SECONDS = 60.0
"""A generous bound on waits for a thread of this test (the machine may be busy)."""


class NoServices:
    """Stands in for LocalStack: a demo that gets this far would start services."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the demo started its services for input it should refuse")


@pytest.fixture()
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    import segshuffle.testing.localstack

    monkeypatch.setattr(segshuffle.testing.localstack, "LocalStack", NoServices)


@pytest.mark.parametrize(("arguments", "flag"), [
    (["--users", "100000000000"], "--users"),  # terabytes of item sets, never drawn
    (["--users", "1000001"], "--users"),
    (["--items", "100000000000"], "--items"),
    (["--items", "1"], "--items"),
    (["--set-size", "0"], "--set-size"),  # 0 is a size, not "not given"
    (["--set-size", "65"], "--set-size"),
    (["--set-size", "40", "--items", "32"], "--set-size"),
    (["--concurrency", "1000000000"], "--concurrency"),  # a pool per 8 users in flight
    (["--top", "0"], "--top"),
    (["--seed", "-1"], "--seed"),  # numpy's refusal would name no flag
])
def test_sizes_out_of_bounds_are_one_line_and_exit_2(
        arguments: list[str], flag: str, no_services: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *arguments]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("segshuffle: error: ")
    assert flag in captured.err, captured.err


def test_the_largest_sizes_are_accepted() -> None:
    """The bounds refuse only what is out of them (checked without drawing any data)."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    demo.register(sub)
    args = parser.parse_args(["demo", "--users", str(demo.MAX_USERS), "--items",
                              str(demo.MAX_ITEMS), "--set-size", "64", "--concurrency",
                              str(demo.MAX_CONCURRENCY), "--top", "1"])
    demo.check_sizes(args)
    assert demo.MAX_ITEMS == MAX_ITEM_NAMES  # the campaign's own bound


class SlowRelease:
    """A stack whose release of a round lasts until ``lines`` progress lines were said."""

    def __init__(self, said: list[str], lines: int) -> None:
        self.said = said
        self.lines = lines
        self.released: list[tuple[str, int]] = []

    def release(self, campaign_id: str, round_number: int) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while sum("waiting for" in line for line in self.said) < self.lines:
            assert time.monotonic() < deadline, self.said
            time.sleep(0.01)
        self.released.append((campaign_id, round_number))


@pytest.mark.parametrize(("round_number", "waited_for"), [
    (1, "the server's optimizer"), (2, "the server to decrypt and decode")])
def test_a_slow_release_shows_progress_at_a_bounded_rate(round_number: int,
                                                         waited_for: str) -> None:
    said: list[str] = []
    stack = SlowRelease(said, lines=3)
    demo.release_with_progress(stack, round_number, said.append, first=0.02, every=0.02)
    assert stack.released == [(demo.CAMPAIGN_ID, round_number)]
    assert said[0].startswith(f"releasing round {round_number} (")
    progress = said[1:]
    assert len(progress) >= 3
    for line in progress:
        assert line.startswith(f"round {round_number}: waiting for {waited_for} (")
        assert line.endswith(" s)")
    count = len(said)
    time.sleep(0.1)  # the ticker has stopped with the release: no line after it
    assert len(said) == count


def test_a_quick_release_says_only_that_it_releases() -> None:
    said: list[str] = []
    stack = SlowRelease(said, lines=0)
    demo.release_with_progress(stack, 1, said.append, first=WAIT_SECONDS, every=WAIT_SECONDS)
    assert said == ["releasing round 1 (server optimizes and publishes the parameters)"]


def test_a_signal_cancels_the_event_loop_instead_of_raising_in_a_task(
        caplog: pytest.LogCaptureFixture) -> None:
    """SIGTERM while many tasks run: the run ends with Interrupted (exit status 143) and
    asyncio logs no task whose exception was never retrieved."""
    from segshuffle.cli._interrupts import SignalStop
    from segshuffle.cli.errors import Interrupted

    started = threading.Event()

    async def user() -> None:
        while True:
            started.set()
            await asyncio.sleep(0)
            sum(range(200))  # Python code running when the signal lands

    async def users() -> None:
        await asyncio.gather(*(user() for _ in range(8)))

    def send_signal() -> None:
        assert started.wait(WAIT_SECONDS)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send_signal)
    before = signal.getsignal(signal.SIGTERM)
    with caplog.at_level(logging.ERROR, logger="asyncio"), SignalStop() as stop:
        sender.start()
        with pytest.raises(Interrupted) as raised:
            stop.run(users)
        sender.join()
        gc.collect()
    assert raised.value.exit_status == 128 + signal.SIGTERM
    assert str(raised.value) == "interrupted by SIGTERM"
    assert not caplog.records, [record.getMessage() for record in caplog.records]
    assert signal.getsignal(signal.SIGTERM) == before  # the handler was restored
