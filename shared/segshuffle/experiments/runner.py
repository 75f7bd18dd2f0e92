"""Running the experiments on every core: plans first, then repeats, then one row per method.

Phase 1 plans every panel (accountant searches, :func:`~.methods.plan_panel`);
phase 2 runs the repeats in chunks, once per correlation setting
(:class:`~.correlated_levels.Correlation`: the plans depend on public parameters only,
so every setting reuses them).  Both phases go through one
:class:`multiprocessing.Pool`.  Every repeat draws from generators keyed by
(seed, panel, repeat, method) (:func:`~.methods.stream`), so the numbers do not
depend on the number of workers, on the chunking, or on task order.  Progress goes
to stderr.  ``plan_cache`` keeps plans on disk between runs (:mod:`~.plan_cache`).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TextIO

import numpy as np

from ..datasets.msnbc import load_msnbc
from ..datasets.population import CollectionSource, DatasetSource, synthetic_source
from ..datasets.transactions import SetCollection, load_transactions
from .correlated_levels import NO_CORRELATION, Correlation
from .methods import PanelPlan, plan_panel, run_repeat_outcome
from .plan_cache import PlanCache
from .settings import SYNTHETIC_ITEMS, Figure, Panel

#: Repeats per phase-2 task: small enough to balance two workers, large enough that
#: task overhead stays negligible.
CHUNK = 5


@dataclass(frozen=True)
class DataChoice:
    """Where the real-data figures take their users: the bundled MSNBC or a transaction file."""

    path: str | None = None  # None: bundled MSNBC

    @property
    def label(self) -> str:
        return "msnbc" if self.path is None else Path(self.path).name


@lru_cache(maxsize=4)
def _collection(path: str | None) -> SetCollection:
    return load_msnbc() if path is None else load_transactions(path)


def source_for(figure: Figure, data: DataChoice) -> DatasetSource:
    if figure.dataset == "synthetic":
        return synthetic_source(SYNTHETIC_ITEMS)
    return CollectionSource(name=data.label, collection=_collection(data.path))


def domain_of(figure: Figure, panel: Panel, data: DataChoice) -> tuple[int, int]:
    """(real items d, privacy domain) of a panel: d + s with padding for real data."""
    if figure.dataset == "synthetic":
        return SYNTHETIC_ITEMS, SYNTHETIC_ITEMS
    d = _collection(data.path).item_count
    return d, d + panel.set_size


@dataclass
class PanelResult:
    """Per-repeat squared errors of one panel, keyed by method (segmented: one per point),
    and per-repeat item errors W^_j - w_j of each method's headline point (repeats x items),
    under one correlation setting."""

    figure: Figure
    panel: Panel
    plan: PanelPlan
    errors: dict[str, list[list[float]]] = field(default_factory=dict)
    correlation: Correlation = NO_CORRELATION
    item_errors: dict[str, np.ndarray] = field(default_factory=dict)


def _panel_key(figure: Figure, panel: Panel, data: DataChoice) -> str:
    # The shares and the dataset determine the population; the figure name does not
    # (msnbc-s1 run alone or within "all" gives the same numbers).
    return f"{data.label}|{figure.dataset}|{figure.shares_name}|n={panel.n}|s={panel.set_size}"


def _plan_task(args: tuple) -> tuple[int, PanelPlan]:
    index, key, panel, d, domain, shares, grid, guards, largest_share = args
    return index, plan_panel(key, panel.n, panel.set_size, domain, d, shares, grid,
                             guards=guards, largest_share=largest_share)


def _repeat_task(args: tuple) -> tuple[int, list[int], list]:
    index, figure, data, plan, seed, repeats, correlation = args
    source = source_for(figure, data)
    return index, repeats, [run_repeat_outcome(plan, source, seed, r, correlation)
                            for r in repeats]


def _pool(jobs: int):
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    return context.Pool(processes=jobs)


def _map(jobs: int, func: Callable, tasks: list, pool) -> Iterable:
    if pool is None:
        return map(func, tasks)
    return pool.imap_unordered(func, tasks)


def run_figures(
    figures: list[Figure],
    *,
    repeats: int,
    grid: tuple[float, ...],
    seed: int = 0,
    jobs: int | None = None,
    data: DataChoice | None = None,
    log: TextIO | None = None,
    correlations: tuple[Correlation, ...] = (NO_CORRELATION,),
    guards: tuple[float, ...] = (),
    largest_share: float = 1.0,
    plan_cache: Path | None = None,
) -> list[PanelResult]:
    """Plan and run every panel of ``figures`` under every correlation setting; returns
    the per-repeat errors, one :class:`PanelResult` per (panel, setting), panels first.

    ``guards`` adds the slot blanket tuned for correlation up to each R (``ours-r<R>``,
    items held by at most ``largest_share`` of the users).
    """
    data = data or DataChoice()
    if not correlations:
        raise ValueError("at least one correlation setting is needed")
    log = log if log is not None else sys.stderr
    jobs = max(1, jobs if jobs is not None else (os.cpu_count() or 1))
    start = time.perf_counter()

    def say(message: str) -> None:
        log.write(f"reproduce [{time.perf_counter() - start:7.1f}s] {message}\n")
        log.flush()

    cells = [(f, p) for f in figures for p in f.panels]
    for figure, panel in cells:  # load the data (and fail early) before forking workers
        domain_of(figure, panel, data)
    if any(f.dataset != "synthetic" for f in figures):
        collection = _collection(data.path)
        for _, panel in cells:
            if panel.n > collection.n_users:
                raise ValueError(f"{data.label} has {collection.n_users} users; panel "
                                 f"{panel.label} needs {panel.n}")

    for correlation in correlations:
        if correlation.independent or correlation.mode != "items":
            continue
        for figure, panel in cells:
            d, _ = domain_of(figure, panel, data)
            if max(correlation.items) >= d:
                raise ValueError(f"correlated item {max(correlation.items)} is not one of the "
                                 f"{d} items of {figure.name}")

    pool = _pool(jobs) if jobs > 1 else None
    try:
        cache = PlanCache(plan_cache) if plan_cache is not None else None
        plan_tasks = []
        plans: dict[int, PanelPlan] = {}
        for index, (figure, panel) in enumerate(cells):
            d, domain = domain_of(figure, panel, data)
            task = (index, _panel_key(figure, panel, data), panel, d, domain,
                    figure.shares, grid, tuple(guards), largest_share)
            cached = cache.load(task[1:]) if cache is not None else None
            if cached is not None:
                plans[index] = cached
                say(f"plan of {figure.name} {panel.label} read from {plan_cache}")
            else:
                plan_tasks.append(task)
        say(f"planning {len(plan_tasks)} panels (accountant searches) on {jobs} worker(s)")
        for index, plan in _map(jobs, _plan_task, plan_tasks, pool):
            plans[index] = plan
            if cache is not None:
                cache.store(next(t for t in plan_tasks if t[0] == index)[1:], plan)
            figure, panel = cells[index]
            say(f"planned {figure.name} {panel.label} ({len(plans)}/{len(cells)})")

        runs = [(f, p, i, c) for i, (f, p) in enumerate(cells) for c in correlations]
        results = [PanelResult(f, p, plans[i], correlation=c) for f, p, i, c in runs]
        per_repeat: list[dict[int, object]] = [{} for _ in runs]
        repeat_tasks = []
        for run_index, (figure, _, index, correlation) in enumerate(runs):
            for lo in range(0, repeats, CHUNK):
                chunk = list(range(lo, min(repeats, lo + CHUNK)))
                repeat_tasks.append((run_index, figure, data, plans[index], seed, chunk,
                                     correlation))
        done = 0
        total = len(runs) * repeats
        last_report = 0.0
        say(f"running {total} panel repeats in {len(repeat_tasks)} tasks")
        for run_index, chunk, outcomes in _map(jobs, _repeat_task, repeat_tasks, pool):
            for r, outcome in zip(chunk, outcomes, strict=True):
                per_repeat[run_index][r] = outcome
            done += len(chunk)
            now = time.perf_counter()
            if now - last_report > 5.0 or done == total:
                last_report = now
                say(f"repeats {done}/{total}")
    except BaseException:
        if pool is not None:  # stop the queued tasks at once (errors, Ctrl-C)
            pool.terminate()
            pool.join()
        raise
    if pool is not None:
        pool.close()
        pool.join()

    for index, result in enumerate(results):
        ordered = [per_repeat[index][r] for r in range(repeats)]
        for method in result.plan.methods:
            result.errors[method] = [outcome.errors[method] for outcome in ordered]
            if all(method in outcome.item_errors for outcome in ordered):
                result.item_errors[method] = np.vstack([outcome.item_errors[method]
                                                        for outcome in ordered])
    say("done")
    return results


def summarize(errors: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation over repeats (std 0 for one repeat)."""
    values = np.asarray(errors, dtype=float)
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return float(values.mean()), std


def expected_messages_ours(plan: PanelPlan, lambdas: tuple[float, ...], m: float) -> float:
    """Expected non-null messages per user: s sum_k n_k lambda_k / n + m."""
    signal = math.fsum(c * lam for c, lam in zip(plan.counts, lambdas, strict=True))
    return plan.set_size * signal / plan.n + m
