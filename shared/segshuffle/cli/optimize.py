"""``segshuffle optimize``: choose m and the lambda_k for a population (SPEC section 8)."""

from __future__ import annotations

import argparse
import json
import time

from segshuffle.core import validation
from segshuffle.core.optimizer import optimize

from ._args import float_list, integer, number


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "optimize",
        help="choose the blanket rate m and the Poisson rates lambda_k",
        description="Choose the blanket rate m and one Poisson rate per privacy level, "
        "minimising the MSE bound subject to every level's (epsilon, delta) guarantee.",
    )
    parser.add_argument("--users", type=integer, required=True, help="number of users n")
    parser.add_argument("--domain-size", type=integer, required=True,
                        help="number of items d (including padding items, if any)")
    parser.add_argument("--set-size", type=integer, required=True,
                        help="items per user s")
    parser.add_argument("--levels", type=float_list, required=True,
                        help="increasing privacy levels E_1,...,E_K")
    parser.add_argument("--shares", type=float_list, required=True,
                        help="share of users per level, summing to 1")
    parser.add_argument("--delta", type=number, required=True, help="user-level delta")
    parser.add_argument("--blanket", type=number, default=None,
                        help="fix the blanket rate m instead of optimising it")
    parser.add_argument("--dropout-tolerance", type=number, default=0.0,
                        help="share of users that may miss round 2 (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    users = validation.require_int("users", args.users, 2)
    levels = validation.require_levels(args.levels)
    shares = validation.require_shares(args.shares, len(levels))
    started = time.perf_counter()
    result = optimize(
        [users * share for share in shares],
        levels,
        args.domain_size,
        args.set_size,
        args.delta,
        dropout_tolerance=args.dropout_tolerance,
        blanket=args.blanket,
    )
    seconds = time.perf_counter() - started
    payload = result.to_dict()
    payload["shares"] = shares
    payload["seconds"] = seconds
    if args.json:
        print(json.dumps(payload))
        return 0
    print(f"blanket rate m      {result.m:.6g}"
          f"{'  (fixed)' if result.blanket_fixed else '  (optimised)'}")
    print(f"MSE bound           {result.mse_bound:.6g}")
    print(f"accounting users    {result.accounting_users} of {users}")
    print(f"{'level':>10} {'share':>8} {'lambda':>10} {'eps upper':>10} {'eps lower':>10}"
          f" {'m_k':>10}")
    blankets = result.level_blankets or (None,) * len(levels)
    for level, share, lam, upper, lower, m_k in zip(
        levels, shares, result.lambdas, result.epsilons, result.epsilons_lower, blankets,
        strict=True,
    ):
        print(f"{level:>10.4g} {share:>8.3g} {lam:>10.6f} {_fmt(upper):>10} {_fmt(lower):>10}"
              f" {_fmt(m_k):>10}")
    print(f"(delta {result.delta:.3g}, {seconds:.2f} s)")
    return 0


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"
