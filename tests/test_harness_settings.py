"""The waits of the test harness and the benchmarks are settings, with defaults for a busy
host (a fixed 30 s start-up and 300 s release wait gave up on a loaded 2-core machine)."""

from __future__ import annotations

import pytest

from segshuffle.testing import localstack
from segshuffle.testing.localstack import LocalStack, harness_seconds


def test_the_defaults_hold_on_a_busy_host(monkeypatch) -> None:
    monkeypatch.delenv("SEGSHUFFLE_HARNESS_STARTUP_SECONDS", raising=False)
    monkeypatch.delenv("SEGSHUFFLE_HARNESS_RELEASE_SECONDS", raising=False)
    assert harness_seconds("startup", localstack.STARTUP_SECONDS) >= 120
    assert harness_seconds("release", localstack.RELEASE_SECONDS) >= 1800
    monkeypatch.setenv("SEGSHUFFLE_HARNESS_STARTUP_SECONDS", "300")
    for stack, expected in ((LocalStack(), 300.0),  # not started: its settings only
                            (LocalStack(startup_timeout=5.0), 5.0)):  # an argument wins
        try:
            assert stack.startup_timeout == expected
        finally:
            stack.close()


def test_an_environment_variable_sets_a_wait(monkeypatch) -> None:
    monkeypatch.setenv("SEGSHUFFLE_HARNESS_STARTUP_SECONDS", "300")
    assert harness_seconds("startup", 1.0) == 300.0


@pytest.mark.parametrize("text", ["soon", "0", "-3", "inf", "nan"])
def test_a_wait_that_is_not_a_positive_number_is_refused(monkeypatch, text: str) -> None:
    monkeypatch.setenv("SEGSHUFFLE_HARNESS_RELEASE_SECONDS", text)
    with pytest.raises(ValueError, match="SEGSHUFFLE_HARNESS_RELEASE_SECONDS"):
        harness_seconds("release", 10.0)
