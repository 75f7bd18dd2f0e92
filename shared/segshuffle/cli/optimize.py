"""``segshuffle optimize``: choose m and the lambda_k for a population.

The optimizer is docs/protocol.md section 5."""

from __future__ import annotations

import argparse
import json
import time

from segshuffle.core import rules, validation
from segshuffle.core.advice import parameter_notes
from segshuffle.core.blanket import BlanketMode
from segshuffle.core.level_privacy import LevelReport, LevelSetting, level_report
from segshuffle.core.optimizer import Objective, optimize, optimize_best_mode

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
    parser.add_argument("--dropout-tolerance", type=number,
                        default=rules.DEFAULT_DROPOUT_TOLERANCE,
                        help="share of users that may miss round 2; epsilons are accounted "
                             "for ceil((1 - T) n) users (default "
                             f"{rules.DEFAULT_DROPOUT_TOLERANCE:g}, as campaigns)")
    parser.add_argument("--fake-tolerance", type=number, default=0.0,
                        help="largest share of round-2 participants that may be fake or "
                        "collude with the server; privacy is accounted with the honest rest "
                        "(default 0)")
    parser.add_argument("--blanket-mode", choices=[*(m.value for m in BlanketMode), "best"],
                        default=BlanketMode.SLOTS.value,
                        help="slots: ceil(m) slots per user (the paper's blanket); "
                        "independent: one Bernoulli(m/d) blanket message per item, exact "
                        "accounting, s + d messages per user; best: the mode with the smaller "
                        "MSE bound within --max-messages-per-user (default slots)")
    parser.add_argument("--max-messages-per-user", type=integer, default=None,
                        help="budget of data ciphertexts per user and round")
    parser.add_argument("--no-compare", action="store_true",
                        help="do not optimise the other blanket mode for comparison")
    parser.add_argument("--objective", choices=[o.value for o in Objective],
                        default=Objective.VARIANCE.value,
                        help="what the m search minimises: the estimator's variance given "
                             "the data (default) or the paper's MSE bound; both are printed")
    parser.add_argument("--min-lambda", type=number, default=0.0,
                        help="a floor on every level's lambda (a tiny lambda makes a level's "
                             "estimate lean on the other levels' users)")
    parser.add_argument("--correlation-ratio", type=number, default=1.0,
                        help="guard against levels that go with items: the holders of an item "
                             "may have up to R times the other users' odds of a level; the "
                             "variance objective then adds the worst squared bias of one item "
                             "and the lambdas move toward each other (default 1: levels "
                             "independent of items, docs/protocol.md section 5.1)")
    parser.add_argument("--largest-share", type=number, default=1.0,
                        help="with --correlation-ratio: only items held by at most this share "
                             "of the users are guarded (default 1: any item)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    users = validation.require_int("users", args.users, 2)
    levels = validation.require_levels(args.levels)
    shares = validation.require_shares(args.shares, len(levels))
    started = time.perf_counter()
    counts = [users * share for share in shares]
    options = {"dropout_tolerance": args.dropout_tolerance,
               "fake_tolerance": args.fake_tolerance, "blanket": args.blanket,
               "max_messages_per_user": args.max_messages_per_user,
               "objective": args.objective, "min_lambda": args.min_lambda,
               "correlation_ratio": args.correlation_ratio,
               "largest_share": args.largest_share}
    if args.blanket_mode == "best":
        result = optimize_best_mode(counts, levels, args.domain_size, args.set_size,
                                    args.delta, **options)
    else:
        result = optimize(counts, levels, args.domain_size, args.set_size, args.delta,
                          blanket_mode=args.blanket_mode, compare_modes=not args.no_compare,
                          **options)
    seconds = time.perf_counter() - started
    payload = result.to_dict()
    payload["shares"] = shares
    payload["seconds"] = seconds
    notes = parameter_notes(levels, result.lambdas, result.epsilons, result.m,
                            result.mse_bound, args.set_size, users)
    payload["notes"] = notes
    level_report = _level_report(result, levels, args)
    payload["level_privacy"] = _level_payload(level_report)
    if args.json:
        print(json.dumps(payload))
        return 0
    print(f"blanket mode        {result.blanket_mode}")
    print(f"blanket rate m      {result.m:.6g}"
          f"{'  (fixed)' if result.blanket_fixed else '  (optimised)'}")
    marks = {} if result.correlation_ratio > 1.0 else {result.objective: "  (minimised)"}
    print(f"variance            {result.variance:.6g}{marks.get('variance', '')}")
    print(f"MSE bound           {result.mse_bound:.6g}{marks.get('paper-bound', '')}")
    if result.correlation_ratio > 1.0:
        print(f"bias bound          {result.bias_bound:.6g}  (one item, correlation up to "
              f"R = {result.correlation_ratio:g}; relative {result.relative_bias_bound:.4g} "
              "of its share)")
        print(f"worst-case MSE      {result.objective_value:.6g}  (minimised)")
    print(f"messages per user   {result.messages_per_user}")
    print(f"accounting users    {result.accounting_users} of {users}")
    print(f"honest users        {result.honest_users} of {result.accounting_users}"
          f"  (fake tolerance {result.fake_tolerance:g}; audit with --users "
          f"{result.honest_users})")
    print(f"{'level':>10} {'share':>8} {'lambda':>10} {'eps upper':>10} {'eps lower':>10}"
          f" {'~m_k':>10}")  # the m search's coarse estimate (section 5)
    blankets = result.level_blankets or (None,) * len(levels)
    for level, share, lam, upper, lower, m_k in zip(
        levels, shares, result.lambdas, result.epsilons, result.epsilons_lower, blankets,
        strict=True,
    ):
        print(f"{level:>10.4g} {share:>8.3g} {lam:>10.6f} {_fmt(upper):>10} {_fmt(lower):>10}"
              f" {_fmt(m_k):>10}")
    if result.alternative is not None:
        other = result.alternative
        if "unavailable" in other:
            print(f"other mode          {other['blanket_mode']}: {other['unavailable']}")
        else:
            print(f"other mode          {other['blanket_mode']}: m {other['m']:.6g}, "
                  f"variance {other['variance']:.6g}, MSE bound {other['mse_bound']:.6g}, "
                  f"{other['messages_per_user']} messages per user")
    for line in _level_lines(level_report):
        print(line)
    for note in notes:
        print(f"note: {note}")
    print(f"(delta {result.delta:.3g}, {seconds:.2f} s)")
    return 0


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


#: Up to this many distinct rates, ``optimize`` also prints the exhibited lower bounds.
LEVEL_LOWER_RATES = 4


def _level_report(result, levels: list[float], args: argparse.Namespace) -> LevelReport:
    """Round 2's level guarantee at the chosen parameters (docs/protocol.md section 4.6)."""
    setting = LevelSetting(result.honest_users, args.set_size, args.domain_size, result.m,
                           BlanketMode(result.blanket_mode))
    rates = len(set(result.lambdas))
    return level_report(levels, list(result.lambdas), setting, result.delta,
                        lower=rates <= LEVEL_LOWER_RATES)


def _level_payload(report: LevelReport) -> dict[str, object]:
    return {"delta": report.delta, "complete": report.complete,
            "pairs": [{"levels": list(pair.levels), "lambdas": list(pair.lambdas),
                       "epsilon_upper": pair.epsilon_upper,
                       "epsilon_lower": pair.epsilon_lower} for pair in report.pairs]}


def _level_lines(report: LevelReport) -> list[str]:
    """What round 2 reveals about the level (the items unchanged), and what round 1 does."""
    if not report.pairs:
        return ["level privacy       round 2: every level sends at the same rate, so the "
                "data messages tell the levels apart not at all"]
    lines = ["level privacy       round 2, a change of level with the items unchanged "
             "(full view):"]
    lines.append(f"{'levels':>16} {'lambdas':>20} {'eps upper':>10} {'eps lower':>10}")
    for pair in report.pairs:
        names = f"{pair.levels[0]:.4g} / {pair.levels[1]:.4g}"
        rates = f"{pair.lambdas[0]:.6f} / {pair.lambdas[1]:.6f}"
        lines.append(f"{names:>16} {rates:>20} {_fmt(pair.epsilon_upper):>10}"
                     f" {_fmt(pair.epsilon_lower):>10}")
    if not report.complete:
        lines.append("(neighbouring rates and the two extremes only: too many distinct rates)")
    lines.append("note: round 1 sends the level itself unless the campaign sets level_privacy "
                 "eps_p; with it, both rounds together protect a change of level at eps_p + "
                 "eps upper ('-': no guarantee)")
    return lines
