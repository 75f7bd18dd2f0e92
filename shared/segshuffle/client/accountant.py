"""The accountant a client checks published parameters with (docs/protocol.md section 6).

Two implementations certify the same bound, delta_user(E) <= delta on the server's full
view: :mod:`segshuffle.core.accounting` (numpy and scipy; also what the server's
optimizer uses) and :mod:`segshuffle.core.portable` (the standard library only, for the
light install ``pip install segshuffle``).  Tests keep them within 1e-9 relative (or
1e-13 absolute) of each other on every vector, and a server certifies every published
rate at delta (1 - 1e-5) (:data:`segshuffle.core.rules.PUBLICATION_HEADROOM`), so
either gives an honest server's parameters the same verdict.

:func:`user_delta` uses the numpy accountant when numpy and scipy are installed (it is
faster at a million users) and the portable one otherwise; ``SEGSHUFFLE_ACCOUNTANT``
set to ``portable`` or ``numpy`` chooses explicitly (an unknown name, or ``numpy``
without numpy, is an error rather than a silent fallback).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from typing import Any

ENVIRONMENT_VARIABLE = "SEGSHUFFLE_ACCOUNTANT"
"""Names the accountant the client uses: ``portable`` or ``numpy`` (default: numpy if installed)."""

_MODULES = {"numpy": "segshuffle.core.accounting", "portable": "segshuffle.core.portable"}

UserDelta = Callable[..., float]


RefutingDelta = Callable[..., "float | None"]


@functools.cache
def _load(name: str) -> UserDelta:
    return importlib.import_module(_MODULES[name]).user_delta


@functools.cache
def _load_refutation(name: str) -> RefutingDelta:
    return importlib.import_module(_MODULES[name]).refuting_delta


def accountant_name(choice: str | None = None) -> str:
    """Which accountant :func:`user_delta` uses: ``choice``, the environment's, or the default."""
    name = choice if choice is not None else os.environ.get(ENVIRONMENT_VARIABLE, "")
    name = name.strip().lower()
    if name:
        if name not in _MODULES:
            raise ValueError(f"{ENVIRONMENT_VARIABLE} must be one of {sorted(_MODULES)}, "
                             f"got {name!r}")
        return name
    return _default_name()


@functools.cache
def _default_name() -> str:
    """``numpy`` when the numpy accountant imports, else ``portable``; decided once per
    process, so a light install does not repeat the failed import at every check."""
    try:
        _load("numpy")
    except ImportError:
        return "portable"
    return "numpy"


def implementation(name: str | None = None) -> UserDelta:
    """The ``user_delta`` function of the accountant :func:`accountant_name` picks."""
    return _load(accountant_name(name))


def refutation(name: str | None = None) -> RefutingDelta:
    """The ``refuting_delta`` function of the same accountant: a certified lower bound on
    delta_user when it exceeds the ``delta`` asked, else None (checked first: a level it
    refutes fails whatever the upper bounds say)."""
    return _load_refutation(accountant_name(name))


def user_delta(level: float, lam: float, set_size: int, users: int, m: float,
               domain_size: int, **options: Any) -> float:
    """An upper bound on delta_user(level) (the arguments of
    :func:`segshuffle.core.accounting.user_delta`), from the chosen accountant."""
    return implementation()(level, lam, set_size, users, m, domain_size, **options)
