"""Shared test fixtures."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240611)


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> Callable[[Mapping[str, str]], None]:
    """Replace this process's ``SEGSHUFFLE_*`` variables with the given ones (services'
    settings read ``os.environ``); everything is restored after the test."""
    for name in list(os.environ):
        if name.startswith("SEGSHUFFLE_"):
            monkeypatch.delenv(name)

    def use(values: Mapping[str, str]) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return use
