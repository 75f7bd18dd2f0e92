"""Elementwise arithmetic for the accountant's bounds: numpy's when installed, else lists.

A bound written once must run in two places: on the server, whose optimizer evaluates it
thousands of times (numpy and scipy are installed), and in a light client install, which
has neither.  Such a bound is written against the small namespace a backend module exports
(:mod:`.numpy_backend`, :mod:`.python_backend`): vectors with numpy's arithmetic,
comparisons and slicing, and the few elementwise functions and special functions a bound
needs (``where``, ``floor_int``, ``binom_pmf``, ``half_tail``, ``total``, ...).  The numpy
backend hands them to numpy and scipy; the Python backend computes them element by element
with the standard library, the same operations the web client's JavaScript accountant
performs, which the test vectors hold equal to it.

Which backend runs is a context setting (:func:`use`), so one process can check a value both
ways: the numpy-free accountant (:mod:`segshuffle.core.portable`) runs its bounds inside
``use(PYTHON)``, and everything else gets numpy when numpy and scipy are installed
(:func:`default_name`).  Memo tables of a bound key their entries by :func:`name`, so the
two backends never share a cached vector.  Nothing here imports numpy until the numpy
backend is asked for.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import ModuleType
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["KERNELS", "NUMPY", "PYTHON", "default_name", "exp_or_inf", "log_or_minus_inf",
           "name", "namespace", "on_python", "use"]

#: What every backend module exports: the one list of the kernels a bound may call (each
#: backend's ``__all__``; the Python backend adds its ``Vector`` class).
KERNELS = (
    "any_true", "arange", "binom_cdf", "binom_isf", "binom_pmf", "binom_ppf", "binom_sf",
    "binom_tails_range", "ceil", "ceil_int", "clip", "compress", "concatenate", "convolve_exact",
    "count_nonzero", "cumsum", "exp", "expm1", "fft_compose", "floor_int", "half_pmf_runs",
    "half_tail", "indices", "isfinite", "largest", "log", "log1p", "logical_not", "maximum",
    "minimum", "nonzero_at", "poisson_outside", "poisson_pmf", "poisson_tails", "quiet",
    "repeat", "run_totals", "runs", "scatter_add", "segment_totals", "smallest", "split_scatter",
    "suffix_sums", "take", "total", "vector", "where",
)

NUMPY = "numpy"
PYTHON = "python"
_BACKENDS = {NUMPY: ".numpy_backend", PYTHON: ".python_backend"}

_chosen: ContextVar[str | None] = ContextVar("segshuffle_arrays_backend", default=None)


@functools.cache
def default_name() -> str:
    """``numpy`` when numpy and scipy are importable, else ``python`` (found without
    importing either)."""
    installed = all(importlib.util.find_spec(package) is not None
                    for package in ("numpy", "scipy"))
    return NUMPY if installed else PYTHON


def name() -> str:
    """The backend the bounds use here: the one :func:`use` chose, else the default."""
    chosen = _chosen.get()
    return chosen if chosen is not None else default_name()


@functools.cache
def _load(backend: str) -> ModuleType:
    return importlib.import_module(_BACKENDS[backend], __name__)


def namespace() -> ModuleType:
    """The module of the backend in use (:func:`name`)."""
    return _load(name())


@contextmanager
def use(backend: str) -> Iterator[ModuleType]:
    """Run the enclosed code on ``backend`` (``numpy`` or ``python``); yields its module."""
    if backend not in _BACKENDS:
        raise ValueError(f"array backend must be one of {sorted(_BACKENDS)}, got {backend!r}")
    token = _chosen.set(backend)
    try:
        yield _load(backend)
    finally:
        _chosen.reset(token)


def on_python(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` run on the Python backend, whatever the caller's (the numpy-free
    accountant's entry points: they never import numpy)."""
    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with use(PYTHON):
            return function(*args, **kwargs)
    return wrapper


def exp_or_inf(x: float) -> float:
    """e^x for one float, +inf where it overflows: numpy's and JavaScript's value, where
    :func:`math.exp` raises (a bound's scalar steps and the Python backend's vectors)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def log_or_minus_inf(x: float) -> float:
    """ln x for one float, -inf at 0 and nan below: numpy's and JavaScript's values, where
    :func:`math.log` raises (a bound's scalar steps and the Python backend's vectors)."""
    if x > 0.0:
        return math.log(x)
    return -math.inf if x == 0.0 else math.nan
