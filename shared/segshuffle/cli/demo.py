"""``segshuffle demo``: the whole protocol over real HTTP on this machine.

Starts the server and the shuffler as uvicorn subprocesses on free loopback ports
with storage in a temporary directory (:class:`segshuffle.testing.localstack.LocalStack`),
creates a campaign (in the blanket mode ``--blanket-mode`` names, docs/protocol.md section 3),
signs one enrollment invitation per user (the shuffler admits invited users only), runs N
simulated users (:mod:`segshuffle.testing.population`)
through round 1, has the shuffler release it (the server optimizes and publishes
m and the lambda_k), runs round 2, releases it, and reads the server's estimates.

The truth is the share of users holding each item of the privacy domain after the
users fitted their sets to s items (what the estimator is unbiased for,
docs/protocol.md section 2); ``mse`` is sum_j (W^_j - w_j)^2 over that domain, the quantity
the paper's bound ``mse_bound`` controls.

Progress goes to stderr (stdout holds only the report, one JSON object with ``--json``):
a line per tenth of the users of each round and at least every 10 s while they run, and
one every few seconds while a release waits for the server (:class:`~._progress.Ticker`).
Every size is bounded before anything starts (:func:`check_sizes`).  The services are
stopped on exit, on error and on SIGINT or SIGTERM (one line, status 130 or 143:
:mod:`._interrupts`); they also stop by themselves if the demo is killed outright (their
lifeline, :mod:`segshuffle.services.lifeline`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from segshuffle.core import rules, validation
from segshuffle.core.advice import parameter_notes
from segshuffle.core.blanket import BlanketMode

if TYPE_CHECKING:
    import numpy as np

    from segshuffle.testing.localstack import LocalStack
    from segshuffle.testing.population import PhaseTiming, Population

from ._args import field_message, float_list, integer, number
from ._interrupts import SignalStop
from ._progress import Ticker

DATASETS = ("synthetic", "msnbc")
BLANKET_MODES = tuple(mode.value for mode in BlanketMode)
CAMPAIGN_ID = "demo"

MAX_USERS = 1_000_000
"""Most simulated users: they all live in this one process (a few kB each, a few
hundred a second through a round on two cores), so a million already takes hours and
gigabytes.  Larger populations are for the services and a separate load generator."""
MAX_ITEMS = 100_000
"""Most items of the synthetic dataset: the most item names a campaign may have
(``segshuffle.wire.models.MAX_ITEM_NAMES``, not imported here to keep ``--help`` light)."""
MAX_CONCURRENCY = 1024
"""Most simulated users in flight at once (each a connection to the shuffler)."""

RELEASE_WORK = {1: ("server optimizes and publishes the parameters", "the server's optimizer"),
                2: ("server decrypts and decodes", "the server to decrypt and decode")}
"""Per round: what its release makes the server do, and what a progress line waits for."""
PROGRESS_FIRST_SECONDS = 5.0
"""A release's first progress line comes after this long (quick releases show none)."""
PROGRESS_EVERY_SECONDS = 10.0
"""Then one line this often while the release waits."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the shuffler and the server locally with simulated users",
        description="Start both services on loopback, run N simulated users through both "
                    "rounds over HTTP, print estimates, truth, MSE, parameters and timings.",
    )
    parser.add_argument("--users", type=integer, default=2000, help="users (default 2000)")
    parser.add_argument("--dataset", choices=DATASETS, default="synthetic",
                        help="msnbc: users sampled from the MSNBC data (17 categories); "
                             "synthetic: s items uniform over --items items (default)")
    parser.add_argument("--items", type=integer, default=32,
                        help="items of the synthetic dataset (default 32)")
    parser.add_argument("--set-size", type=integer, default=None,
                        help="items per user s (default 4 for msnbc, 3 for synthetic)")
    parser.add_argument("--levels", type=float_list, default=[0.5, 1.0, 2.0],
                        help="privacy levels E_1,..,E_K (default 0.5,1,2)")
    parser.add_argument("--shares", type=float_list, default=None,
                        help="share of users per level (default: equal)")
    parser.add_argument("--delta", type=number, default=None,
                        help="delta (default: the server's 0.01/n)")
    parser.add_argument("--dropout-tolerance", type=number,
                        default=rules.DEFAULT_DROPOUT_TOLERANCE)
    parser.add_argument("--fake-tolerance", type=number, default=0.0,
                        help="largest share of round-2 participants that may be fake; the "
                             "server accounts with the honest rest (default 0)")
    parser.add_argument("--level-privacy", type=number, default=None,
                        help="eps_p: randomize levels with K-ary randomized response")
    parser.add_argument("--blanket-mode", choices=BLANKET_MODES, default=BlanketMode.SLOTS.value,
                        help="slots: ceil(m) blanket slots per user (default); independent: "
                             "one blanket slot per item of the domain, sent with "
                             "probability m/d")
    parser.add_argument("--concurrency", type=integer, default=8,
                        help="simulated users in flight at once (default 8)")
    parser.add_argument("--seed", type=integer, default=0, help="seed of the simulation")
    parser.add_argument("--top", type=integer, default=10, help="items shown (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


@dataclass(frozen=True)
class DemoData:
    """Users' raw item sets, the item names and the real domain size d."""

    name: str
    sets: list[list[int]]
    names: list[str]
    set_size: int


def check_sizes(args: argparse.Namespace) -> None:
    """Every size option within its bounds, before any data is drawn or any service starts
    (a ValueError naming the flag: one line, exit status 2)."""
    validation.require_int("--users", args.users, 2)
    if args.users > MAX_USERS:
        raise ValueError(f"--users must be at most {MAX_USERS} (every simulated user lives "
                         f"in this process), got {args.users}")
    bounded = (("--items", args.items, 2, MAX_ITEMS),
               ("--set-size", args.set_size, 1, rules.MAX_SET_SIZE),
               ("--concurrency", args.concurrency, 1, MAX_CONCURRENCY))
    for flag, value, least, most in bounded:
        if value is not None and not least <= value <= most:
            raise ValueError(f"{flag} must be in [{least}, {most}], got {value}")
    if args.dataset == "synthetic" and (args.set_size or 0) > args.items:
        raise ValueError(f"--set-size ({args.set_size}) must not exceed --items "
                         f"({args.items})")
    validation.require_int("--top", args.top, 1)
    validation.require_int("--seed", args.seed, 0)  # numpy's own refusal names no flag


def dataset_items(args: argparse.Namespace) -> DemoData:
    """The dataset's name, item names and set size, with no user's set drawn yet (``sets``
    empty): enough to check the campaign before the draw, which can take minutes."""
    if args.dataset == "msnbc":
        from segshuffle.datasets import load_msnbc

        collection = load_msnbc()  # parsed once: load_data's call finds it cached
        if args.users > collection.n_users:
            raise ValueError(f"msnbc has {collection.n_users} users, asked for {args.users}")
        names = list(collection.names) or [f"item{j}" for j in range(collection.item_count)]
        return DemoData("msnbc", [], names, args.set_size or 4)
    return DemoData(f"synthetic-T{args.items}", [], [f"item{j}" for j in range(args.items)],
                    args.set_size or 3)


def load_data(args: argparse.Namespace, rng: np.random.Generator) -> DemoData:
    import numpy as np

    data = dataset_items(args)
    if args.dataset == "msnbc":
        from segshuffle.datasets import load_msnbc

        collection = load_msnbc()
        chosen = np.sort(rng.choice(collection.n_users, size=args.users, replace=False))
        sets = [[int(j) for j in collection.user_items(int(u))] for u in chosen]
    else:
        from segshuffle.datasets import synthetic_source

        population = synthetic_source(args.items).draw(args.users, data.set_size, rng)
        sets = [[int(j) for j in row] for row in population.items]
    return replace(data, sets=sets)


def _say(args: argparse.Namespace, message: str) -> None:
    sys.stderr.write(f"demo: {message}\n")
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    import fastapi  # noqa: F401  (the services the demo starts need the server extra)
    import numpy as np
    import uvicorn  # noqa: F401

    from segshuffle.client.errors import ClientError
    from segshuffle.testing.localstack import LocalStack

    check_sizes(args)
    levels = validation.require_levels(args.levels)
    shares = list(args.shares) if args.shares is not None else [1.0 / len(levels)] * len(levels)
    if len(shares) != len(levels) or any(f < 0 for f in shares) or \
            abs(math.fsum(shares) - 1.0) > 1e-6:
        raise ValueError("--shares needs one non-negative share per level, summing to 1")
    fake_tolerance = validation.require_tolerance("--fake-tolerance", args.fake_tolerance)
    items = dataset_items(args)
    body: dict[str, Any] = {
        "id": CAMPAIGN_ID, "items": items.names, "set_size": items.set_size,
        "levels": levels, "min_users": min(args.users, 100),
        "dropout_tolerance": args.dropout_tolerance,
        "fake_tolerance": fake_tolerance,
        "blanket_mode": args.blanket_mode,
    }
    if args.delta is not None:
        body["delta"] = args.delta
    if args.level_privacy is not None:
        body["level_privacy"] = args.level_privacy
    _check_campaign(body)  # before the draw and any service: bad input is one line
    started = time.perf_counter()
    timings: dict[str, float] = {}
    # Drawing the users' sets costs users x items random keys (about 7 ns each: minutes at
    # the largest sizes), so it is said first and a signal ends it like any other phase.
    with SignalStop() as stop:
        try:
            _say(args, f"{args.users} users, dataset {items.name}, drawing their item sets")
            data = load_data(args, np.random.default_rng(args.seed))
            _say(args, "starting the services")
            mark = time.perf_counter()
            with LocalStack(min_users=2) as stack:
                timings["start_services"] = time.perf_counter() - mark
                stack.create_campaign(body)
                outcome = _rounds(args, stack, data, shares, timings, stop)
            timings["total"] = time.perf_counter() - started
        except Exception as exc:
            # The signal may have landed inside code that wraps exceptions (a pydantic
            # serializer, an HTTP client): it is still the signal.
            stop.check()
            if isinstance(exc, ClientError):
                raise ValueError(f"demo failed: {exc}") from None
            raise
    report = _report(args, data, outcome, timings)
    if args.json:
        sys.stdout.write(json.dumps(report) + "\n")
    else:
        sys.stdout.write(_human(report, args.top))
    return 0


def _check_campaign(body: dict[str, Any]) -> None:
    """The campaign the demo will create, validated by the model the server uses: a
    ValueError naming the flag and the rule."""
    from pydantic import ValidationError

    from segshuffle.wire.models import CampaignCreate

    try:
        CampaignCreate.model_validate(body)
    except ValidationError as exc:
        raise ValueError(field_message(exc.errors()[0], {"min_users": "--users"})) from None


def _rounds(args: argparse.Namespace, stack: LocalStack, data: DemoData,
            shares: list[float], timings: dict[str, float], stop: SignalStop
            ) -> dict[str, Any]:
    """Both rounds: the users take part (in an event loop a signal cancels), then the
    round is released (a blocking call in this thread, where a signal raises)."""
    from segshuffle.client.errors import ClientError
    from segshuffle.testing.population import Population, stderr_progress

    # The users are this stack's app: its shuffler's floor, and the demo's own delta.
    policy = stack.client_policy()
    if args.delta is not None and args.delta > policy.delta_limit():
        policy = stack.client_policy(delta_ceiling=args.delta)
    population = Population.with_shares(
        stack.shuffler_url, CAMPAIGN_ID, data.sets, shares,
        seed=args.seed, concurrency=args.concurrency, progress=stderr_progress,
        invitations=stack.invitations(CAMPAIGN_ID, len(data.sets)),
        server_key=stack.server_key, policy=policy,
    )
    for round_number in (1, 2):
        phase = stop.run(lambda r=round_number: _take_part(population, r))
        timings[f"round{round_number}_users"] = phase.seconds
        _check(population, phase)
        mark = time.perf_counter()
        release_with_progress(stack, round_number, lambda line: _say(args, line))
        timings[f"round{round_number}_release"] = time.perf_counter() - mark
    results = stack.results(CAMPAIGN_ID)
    view = stack.campaign(CAMPAIGN_ID)
    if view.parameters is None:
        raise ClientError("the server did not publish parameters")
    fitted = [u.round2.items for u in population.users if u.round2 is not None]
    return {"results": results, "parameters": view.parameters, "fitted": fitted}


async def _take_part(population: Population, round_number: int) -> PhaseTiming:
    """Every user takes part in round ``round_number`` (in the event loop of this call)."""
    async with population:
        if round_number == 1:
            return await population.round1()
        return await population.round2()


def release_with_progress(stack: Any, round_number: int, say: Callable[[str], None], *,
                          first: float = PROGRESS_FIRST_SECONDS,
                          every: float = PROGRESS_EVERY_SECONDS) -> None:
    """Release round ``round_number`` and wait for the server, saying what it waits for
    and for how long (after ``first`` seconds, then every ``every`` seconds), so that a
    slow optimizer on a busy machine does not look like a hung demo."""
    work, waited_for = RELEASE_WORK[round_number]
    say(f"releasing round {round_number} ({work})")
    with Ticker(lambda seconds: say(f"round {round_number}: waiting for {waited_for} "
                                    f"({seconds:.0f} s)"),
                first=first, every=every):
        stack.release(CAMPAIGN_ID, round_number)


def _check(population: Any, phase: Any) -> None:
    from segshuffle.client.errors import ClientError

    if phase.failures:
        raise ClientError(f"{phase.failures} users failed in {phase.phase}; first: "
                          f"{population.errors()[0]}")


def _report(args: argparse.Namespace, data: DemoData, outcome: dict[str, Any],
            timings: dict[str, float]) -> dict[str, Any]:
    import numpy as np

    results = outcome["results"]
    parameters = outcome["parameters"]
    domain = parameters.privacy_domain_size
    holders = np.zeros(domain, dtype=np.int64)
    for items in outcome["fitted"]:
        holders[list(items)] += 1
    n2 = max(1, len(outcome["fitted"]))
    truth = holders / n2
    entries = list(results.items) + list(results.padding)
    entries.sort(key=lambda e: e.id)
    estimates = [e.estimate for e in entries]
    errors = [e.standard_error for e in entries]
    names = [e.name if e.name is not None else f"padding{e.id - len(data.names)}"
             for e in entries]
    values = np.array([np.nan if v is None else v for v in estimates], dtype=float)
    mse = float(np.sum((values - truth) ** 2))
    return {
        "users": args.users,
        "dataset": data.name,
        "domain_size": len(data.names),
        "privacy_domain_size": domain,
        "set_size": data.set_size,
        "levels": list(parameters.levels),
        "m": parameters.m,
        "blanket_mode": parameters.blanket_mode,
        "messages_per_user": parameters.messages_per_user,
        "lambdas": list(parameters.lambdas),
        "epsilons": list(parameters.epsilons),
        "epsilons_lower": list(parameters.epsilons_lower),
        "delta": parameters.delta,
        "accounting_users": parameters.accounting_users,
        "fake_tolerance": parameters.fake_tolerance,
        "honest_users": parameters.honest_users,
        "level_counts": [lv.users_round2 for lv in results.privacy.levels],
        "items": names,
        "estimates": estimates,
        "standard_errors": errors,
        "truth": truth.tolist(),
        "mse": mse,
        "mse_bound": parameters.mse_bound,
        "notes": parameter_notes(list(parameters.levels), list(parameters.lambdas),
                                 list(parameters.epsilons), parameters.m,
                                 parameters.mse_bound, parameters.set_size,
                                 parameters.users),
        "dropped_messages": results.dropped_messages,
        "seconds": timings.get("total", 0.0),
        "timings": timings,
    }


def _item_line(report: dict[str, Any], j: int) -> str:
    est, se = report["estimates"][j], report["standard_errors"][j]
    shown = "n/a" if est is None else f"{est:.4f} +- {se:.4f}"
    return f"  {report['items'][j]:<16} {report['truth'][j]:.4f}   {shown}"


def _human(report: dict[str, Any], top: int) -> str:
    import numpy as np

    lines = [
        f"segshuffle demo: {report['users']} users, dataset {report['dataset']}, "
        f"d={report['domain_size']} (+{report['privacy_domain_size'] - report['domain_size']} "
        f"padding), s={report['set_size']}",
        f"parameters: m={report['m']:.4f} ({report['blanket_mode']} blanket, "
        f"{report['messages_per_user']} messages per user), delta={report['delta']:.3g}, "
        f"n_min={report['accounting_users']}, accounted with h={report['honest_users']} "
        f"honest users (fake tolerance {report['fake_tolerance']:g})",
    ]
    for k, level in enumerate(report["levels"]):
        eps = report["epsilons"][k]
        lines.append(f"  level {level:g}: lambda={report['lambdas'][k]:.4f}, "
                     f"users={report['level_counts'][k]:g}, achieved eps="
                     f"{'n/a' if eps is None else f'{eps:.4f}'}")
    real = report["domain_size"]  # padding ids d..d+s-1 follow the real ones
    order = np.argsort(report["truth"][:real])[::-1][:top]
    lines.append(f"top {len(order)} items: true share vs estimate +- standard error")
    lines.extend(_item_line(report, int(j)) for j in order)
    if report["privacy_domain_size"] > real:
        lines.append("padding items, reported apart (ids a client adds to a set smaller than s, "
                     "so every set has s items; an estimate is the share of padded sets plus "
                     "the same noise as any item's):")
        lines.extend(_item_line(report, j) for j in range(real, report["privacy_domain_size"]))
    lines.append(f"MSE (sum over the domain): {report['mse']:.6f}   bound: "
                 f"{report['mse_bound']:.6f}")
    lines.extend(f"note: {note}" for note in report["notes"])
    lines.append("timings (s): " + ", ".join(f"{k}={v:.2f}"
                                             for k, v in report["timings"].items()))
    return "\n".join(lines) + "\n"
