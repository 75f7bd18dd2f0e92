"""``segshuffle audit``: achieved user-level epsilon of one (m, lambda) setting.

The accounting is docs/protocol.md section 4."""

from __future__ import annotations

import argparse
import json

from segshuffle.core import validation
from segshuffle.core.accounting import audit
from segshuffle.core.blanket import BlanketMode

from ._args import integer, number


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="upper and lower user-level epsilon of one (m, lambda) setting",
        description="Report the user-level epsilon guaranteed by the accountant on the "
        "server's full view (upper) and the largest epsilon an exhibited dataset still "
        "violates (lower) for a blanket rate m and Poisson rate lambda.",
    )
    parser.add_argument("--users", type=integer, required=True,
                        help="users whose blanket is guaranteed: the published honest_users h "
                        "(n without dropout or fake tolerance)")
    parser.add_argument("--domain-size", type=integer, required=True, help="number of items d")
    parser.add_argument("--set-size", type=integer, required=True, help="items per user s")
    parser.add_argument("--blanket", type=number, required=True, help="blanket rate m")
    parser.add_argument("--lam", type=number, required=True, help="Poisson rate lambda")
    parser.add_argument("--delta", type=number, required=True, help="user-level delta")
    parser.add_argument("--blanket-mode", choices=[m.value for m in BlanketMode],
                        default=BlanketMode.SLOTS.value,
                        help="slots (ceil(m) slots per user, default) or independent "
                        "(one Bernoulli(m/d) blanket message per item)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    users = validation.require_int("users", args.users, 2)
    validation.require_non_negative("blanket rate m", args.blanket)
    result = audit(users, args.domain_size, args.set_size, args.blanket, args.lam, args.delta,
                   mode=args.blanket_mode)
    if args.json:
        print(json.dumps({
            "epsilon_upper": result.epsilon_upper,
            "epsilon_lower": result.epsilon_lower,
            "users": users,
            "domain_size": args.domain_size,
            "set_size": args.set_size,
            "m": args.blanket,
            "lam": args.lam,
            "delta": args.delta,
            "blanket_mode": args.blanket_mode,
        }))
        return 0
    for name, value in (("epsilon upper", result.epsilon_upper),
                        ("epsilon lower", result.epsilon_lower)):
        text = "not achievable (epsilon above 30)" if value is None else f"{value:.6g}"
        print(f"{name:14} {text}")
    return 0
