"""Benchmark of the accountant and the optimizer; prints figures, asserts nothing.

Run: ``python benchmarks/bench_accounting.py [--repeats R] [--skip-2d-above N]``.

1. One delta evaluation of the Poisson pair (lambda = 0.5, r = 1/128) at N = 1e5 .. 1e8
   slots, at the eps where delta is about 1e-6 (a realistic operating point: a tiny delta
   would be all cancellation in the 2-D sum): cold (window weights computed) and warm
   (cached), medians.
2. The same evaluation by a plain 2-D sum over the same window of (a, b), and the ratio.
3. A full optimize for n = 1e6, d = 128, s = 8, K = 3 levels (0.5, 1, 2; shares 25/50/25;
   delta = 1e-8) in-process with cold caches (CPU seconds, median), in both blanket modes,
   and the whole ``segshuffle optimize`` process (which also optimises the other mode).
4. The same population with K = 1000 levels evenly spaced in [0.5, 2].
5. The full-view user-level bound at one (m, lambda): the slot blanket (s = 8, cold:
   Poisson comparisons and PLD compositions built) and the independent blanket.
6. Whole processes, CPU seconds (user + system, median) against the bare import of the
   command line in the same run: `segshuffle audit` at n = 1e6 (s = 1, d = 17, m = 1.5;
   s = 8, d = 128, m = 0.5; lambda = 0.5, delta = 1e-8) and `segshuffle optimize` at
   n = 1e6, d = 128, s = 8 for K = 3 and (with --k1000) K = 1000 levels.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
from scipy.special import gammaln

from segshuffle.core import hockey_stick
from segshuffle.core.accounting import clear_caches, user_delta
from segshuffle.core.hockey_stick import delta_for, epsilon_for, poisson_pair
from segshuffle.core.optimizer import optimize

LAM, R, TARGET = 0.5, 1.0 / 128, 1e-6


def median_seconds(function, repeats: int, clock=time.perf_counter) -> float:
    samples = []
    for _ in range(repeats):
        started = clock()
        function()
        samples.append(clock() - started)
    return statistics.median(samples)


def child_cpu_seconds(command: list[str]) -> float:
    """User + system CPU seconds of one child process run to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def whole_processes(repeats: int, with_k1000: bool) -> None:
    """Section 6: the commands' CPU against the import of the command line."""
    cli = [sys.executable, "-m", "segshuffle.cli.main"]
    imports = statistics.median(
        child_cpu_seconds([sys.executable, "-c", "import segshuffle.cli.main, "
                           "segshuffle.core.optimizer"]) for _ in range(repeats))
    print(f"\n6. whole processes (CPU s, median of {repeats}); bare import {imports:.2f} s")
    cases = [
        ("audit s=1 d=17 m=1.5", [*cli, "audit", "--users", "1000000", "--domain-size", "17",
                                  "--set-size", "1", "--blanket", "1.5", "--lam", "0.5",
                                  "--delta", "1e-8"]),
        ("audit s=8 d=128 m=0.5", [*cli, "audit", "--users", "1000000", "--domain-size",
                                   "128", "--set-size", "8", "--blanket", "0.5", "--lam",
                                   "0.5", "--delta", "1e-8"]),
        ("optimize K=3", [*cli, "optimize", "--users", "1000000", "--domain-size", "128",
                          "--set-size", "8", "--levels", "0.5,1,2", "--shares",
                          "0.25,0.5,0.25", "--delta", "1e-8", "--no-compare"]),
    ]
    if with_k1000:
        levels = ",".join(f"{x:.6f}" for x in np.linspace(0.5, 2.0, 1000))
        shares = ",".join(["0.001"] * 1000)
        cases.append(("optimize K=1000", [*cli, "optimize", "--users", "1000000",
                                          "--domain-size", "128", "--set-size", "8",
                                          "--levels", levels, "--shares", shares,
                                          "--delta", "1e-8", "--no-compare"]))
    print(f"   {'command':<24} {'CPU s':>8} {'beyond import':>14} {'x import':>9}")
    for name, command in cases:
        count = repeats if "K=1000" not in name else 1
        cpu = statistics.median(child_cpu_seconds(command) for _ in range(count))
        print(f"   {name:<24} {cpu:>8.2f} {cpu - imports:>14.2f} {cpu / imports:>9.2f}",
              flush=True)


def two_d_delta(n_slots: int, r: float, lam: float, eps: float) -> float:
    """max(0, P - e^eps Q) summed over a box of (a, b) covering the same window, chunked."""
    window = hockey_stick.summation_window(n_slots, r)
    t_lo, t_hi = int(window.t[0]), int(window.t[-1])
    # Each coordinate: Binomial(N, r); cover the same number of sigmas as the total window.
    mean = n_slots * r
    margin = hockey_stick._WINDOW_SIGMAS * math.sqrt(n_slots * r * (1 - r)) + 123
    lo = max(0, math.floor(mean - margin))
    hi = min(n_slots + 1, math.ceil(mean + margin) + 1)
    b = np.arange(lo, hi + 1, dtype=float)[None, :]
    e = math.exp(eps)
    log_r, log_rest = math.log(r), math.log1p(-2 * r)

    def log_multinomial(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        ok = (x >= 0) & (y >= 0) & (x + y <= n_slots)
        xx, yy = np.where(ok, x, 0), np.where(ok, y, 0)
        value = (gammaln(n_slots + 1) - gammaln(xx + 1) - gammaln(yy + 1)
                 - gammaln(n_slots - xx - yy + 1) + (xx + yy) * log_r
                 + (n_slots - xx - yy) * log_rest)
        return np.where(ok, value, -np.inf)

    total = 0.0
    for start in range(lo, hi + 1, 512):
        a = np.arange(start, min(start + 512, hi + 1), dtype=float)[:, None]
        inside = ((a + b) >= t_lo) & ((a + b) <= t_hi)
        m_ab = np.exp(log_multinomial(a, b))
        p = (1 - lam) * m_ab + lam * np.exp(log_multinomial(a - 1, b))
        q = (1 - lam) * m_ab + lam * np.exp(log_multinomial(a, b - 1))
        total += float(np.where(inside, np.maximum(p - e * q, 0.0), 0.0).sum())
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-2d-above", type=float, default=1e8,
                        help="skip the 2-D sum for N above this (it is slow)")
    parser.add_argument("--processes-only", action="store_true",
                        help="run section 6 (whole processes) alone")
    parser.add_argument("--k1000", action="store_true",
                        help="section 6 also times optimize with K = 1000 levels")
    args = parser.parse_args()
    if args.processes_only:
        whole_processes(args.repeats, args.k1000)
        return

    print("1-2. one delta evaluation (lambda 0.5, r 1/128, eps where delta ~ 1e-6)")
    print(f"{'N':>12} {'eps':>8} {'window':>8} {'cold ms':>9} {'warm ms':>9} "
          f"{'2-D sum ms':>11} {'ratio':>8} {'rel diff':>9}")
    for exponent in (5, 6, 7, 8):
        n_slots = 10**exponent
        pair = poisson_pair(LAM, n_slots, R)
        eps = epsilon_for(pair, TARGET)

        def cold(pair=pair, eps=eps) -> float:
            hockey_stick.clear_caches()
            return delta_for(pair, eps)

        cold_s = median_seconds(cold, args.repeats)
        warm_s = median_seconds(lambda pair=pair, e=eps: delta_for(pair, e), args.repeats)
        width = hockey_stick.summation_window(n_slots, R).t.size
        value = delta_for(pair, eps)
        if n_slots <= args.skip_2d_above:
            started = time.perf_counter()
            reference = two_d_delta(n_slots, R, LAM, eps)
            flat_s = time.perf_counter() - started
            rel = abs(value - reference) / max(reference, 1e-300)
            print(f"{n_slots:>12.0e} {eps:>8.4f} {width:>8} {cold_s * 1e3:>9.2f} "
                  f"{warm_s * 1e3:>9.2f} "
                  f"{flat_s * 1e3:>11.0f} {flat_s / cold_s:>8.0f} {rel:>9.1e}", flush=True)
        else:
            print(f"{n_slots:>12.0e} {eps:>8.4f} {width:>8} {cold_s * 1e3:>9.2f} "
                  f"{warm_s * 1e3:>9.2f} "
                  f"{'skipped':>11}", flush=True)

    users = 1_000_000
    counts = [users * 0.25, users * 0.5, users * 0.25]
    print("\n3. optimize n = 1e6, d = 128, s = 8, K = 3, delta = 1e-8 (CPU, cold caches)")
    for mode in ("slots", "independent"):
        result = None

        def run_k3(mode=mode) -> None:
            nonlocal result
            clear_caches()
            result = optimize(counts, [0.5, 1.0, 2.0], 128, 8, 1e-8, blanket_mode=mode)

        k3 = median_seconds(run_k3, 3, time.process_time)
        assert result is not None
        print(f"   {mode:>11}: median {k3:.2f} s: m = {result.m:.4f}, lambdas = "
              f"{[round(x, 4) for x in result.lambdas]}, MSE bound = {result.mse_bound:.3e}, "
              f"{result.messages_per_user} messages per user", flush=True)
    command = [sys.executable, "-m", "segshuffle.cli.main", "optimize", "--users", "1000000",
               "--domain-size", "128", "--set-size", "8", "--levels", "0.5,1,2", "--shares",
               "0.25,0.5,0.25", "--delta", "1e-8", "--json"]
    whole = median_seconds(lambda: subprocess.run(command, check=True, capture_output=True), 3)
    print(f"   whole `segshuffle optimize` process (both modes) median {whole:.2f} s wall")

    print("\n4. optimize n = 1e6, d = 128, s = 8, K = 1000 levels in [0.5, 2] (CPU, cold)")
    levels = list(np.linspace(0.5, 2.0, 1000))
    for mode in ("slots", "independent"):
        clear_caches()
        started = time.process_time()
        many = optimize([users / 1000] * 1000, levels, 128, 8, 1e-8, blanket_mode=mode)
        print(f"   {mode:>11}: {time.process_time() - started:.1f} s: m = {many.m:.4f}, lambda "
              f"range [{min(many.lambdas):.4f}, {max(many.lambdas):.4f}], MSE bound = "
              f"{many.mse_bound:.3e}", flush=True)

    print("\n5. one full-view bound, n = 1e6, d = 128, s = 8, lambda = 0.5, E = 1 (CPU)")
    for mode, m in (("slots", 0.5), ("independent", 0.5)):
        def bound(mode=mode, m=m) -> float:
            clear_caches()
            return user_delta(1.0, 0.5, 8, users, m, 128, mode=mode, delta=1e-8)

        cold = median_seconds(bound, args.repeats, time.process_time)
        warm = median_seconds(lambda mode=mode, m=m: user_delta(
            1.0, 0.5, 8, users, m, 128, mode=mode, delta=1e-8), args.repeats,
            time.process_time)
        print(f"   {mode:>11}: cold {cold * 1e3:.1f} ms, warm {warm * 1e3:.2f} ms", flush=True)
    whole_processes(args.repeats, args.k1000)


if __name__ == "__main__":
    main()
