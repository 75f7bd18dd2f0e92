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


@pytest.fixture
def composed_group_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The group sizes (slots) of every pair composition the labelled-groups bound asks
    for from now on (:func:`segshuffle.core.slot_groups._composed_groups`), in order."""
    from segshuffle.core import slot_groups

    sizes: list[int] = []
    compose = slot_groups._composed_groups

    def recorded(slots, r, lam, pairs, step):
        sizes.append(slots)
        return compose(slots, r, lam, pairs, step)

    monkeypatch.setattr(slot_groups, "_composed_groups", recorded)
    return sizes
