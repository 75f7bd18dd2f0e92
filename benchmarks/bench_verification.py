"""What a client's check of a whole campaign costs, per accountant; prints figures.

Run: ``python benchmarks/bench_verification.py [--random N] [--seed S] [--timeout T]
[--only numpy,portable,node] [--json FILE]``.

A campaign is checked as a client checks it: first, at every level, an exhibited pair of
datasets whose divergence may already exceed delta (``refuting_delta``: then the campaign
is refused and nothing more is computed), else delta_user <= delta at every level's
published (E_k, lambda_k) (the accountant stops at the first bound that certifies it),
with cold caches, in a fresh process (the CPU seconds are counted
after the imports, so they are the check's own).  The campaigns are the 31 parameter
documents of docs/test-vectors.json and ``--random`` points drawn with a fixed seed:
n log-uniform in [8, 1e7], s uniform in 1..8, d log-uniform in [2s, 16384], m
log-uniform in [0.05, 20] (at most d), three levels 0.5, 1, 2 with lambdas uniform in
[0.05, 1], delta 1e-8 (1e-4 below 100 users).  Accountants: ``numpy`` and ``portable``
(the two Python ones, :mod:`segshuffle.client.accountant`) and ``node`` (the web
client's JavaScript accountant under Node, the engine Chromium runs in its Worker).
Budgets per campaign: numpy 0.3 s, portable 1 s, JavaScript 0.5 s.  A check that runs
past ``--timeout`` seconds is killed and counted at the timeout, over budget.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "docs" / "test-vectors.json"
ACCOUNTANT_JS = ROOT / "clients" / "web" / "src" / "accountant" / "index.js"
BUDGETS = {"numpy": 0.3, "portable": 1.0, "node": 0.5}

PYTHON_CHECK = """
import json, sys, time
from segshuffle.client import accountant
from segshuffle.core import arrays
user_delta = accountant.implementation(sys.argv[1])
refuting_delta = accountant.refutation(sys.argv[1])
# The array backend the check runs on, and its transforms, imported before the clock starts.
with arrays.use(arrays.NUMPY if sys.argv[1] == "numpy" else arrays.PYTHON):
    pass
if sys.argv[1] == "numpy":
    import scipy.fft
campaign = json.loads(sys.argv[2])
c = campaign
begun = time.process_time()
refuted = [refuting_delta(level, lam, c["s"], c["h"], c["m"], c["d"], mode=c["mode"],
                          delta=c["delta"]) for level, lam in c["levels"]]
if all(value is None for value in refuted):
    for level, lam in c["levels"]:
        user_delta(level, lam, c["s"], c["h"], c["m"], c["d"], mode=c["mode"],
                   delta=c["delta"], enough=c["delta"])
print(time.process_time() - begun)
"""

NODE_CHECK = """
const { refutingDelta, userDelta } = await import(process.argv[1]);
const c = JSON.parse(process.argv[2]);
const begun = process.cpuUsage();
const refuted = c.levels.map(([level, lam]) => refutingDelta(level, lam, c.s, c.h, c.m, c.d,
  { mode: c.mode, delta: c.delta }));
if (refuted.every((value) => value === null)) {
  for (const [level, lam] of c.levels) {
    userDelta(level, lam, c.s, c.h, c.m, c.d, { mode: c.mode, delta: c.delta, enough: c.delta });
  }
}
const used = process.cpuUsage(begun);
console.log((used.user + used.system) / 1e6);
"""


def vector_campaigns() -> list[dict[str, Any]]:
    """The vectors' parameter documents as campaigns (each level at its published lambda)."""
    campaigns = []
    for document in json.loads(VECTORS.read_text())["parameters"]:
        p = document["parameters"]
        campaigns.append({
            "name": document["description"][:60], "s": p["set_size"], "h": p["honest_users"],
            "m": p["m"], "d": p["privacy_domain_size"], "mode": p.get("blanket_mode", "slots"),
            "delta": p["delta"],
            "levels": [[v["level"], v["lambda"]] for v in document["level_verdicts"]]})
    return campaigns


def random_campaigns(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` random campaigns (module docstring)."""
    rng = random.Random(seed)

    def log_uniform(lo: float, hi: float) -> float:
        return math.exp(rng.uniform(math.log(lo), math.log(hi)))

    campaigns = []
    for i in range(count):
        s = rng.randint(1, 8)
        d = round(log_uniform(2 * s, 16384))
        h = round(log_uniform(8, 1e7))
        m = min(log_uniform(0.05, 20.0), float(d))
        campaigns.append({
            "name": f"random {i}: n={h} s={s} d={d} m={m:.3g}", "s": s, "h": h, "m": m, "d": d,
            "mode": "slots", "delta": 1e-4 if h < 100 else 1e-8,
            "levels": [[level, rng.uniform(0.05, 1.0)] for level in (0.5, 1.0, 2.0)]})
    return campaigns


def check_cost(accountant: str, campaign: dict[str, Any], timeout: float) -> float | None:
    """CPU seconds of one cold check (None: killed at the timeout or failed)."""
    payload = json.dumps(campaign)
    if accountant == "node":
        command = ["node", "--input-type=module", "-e", NODE_CHECK, ACCOUNTANT_JS.as_uri(),
                   payload]
    else:
        command = [sys.executable, "-c", PYTHON_CHECK, accountant, payload]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        print(f"  {accountant} failed on {campaign['name']}: "
              f"{done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return float(done.stdout.strip().splitlines()[-1])


def summarise(costs: list[float | None], budget: float, timeout: float) -> dict[str, Any]:
    """Median, worst and how many campaigns exceeded the budget."""
    charged = [timeout if c is None else c for c in costs]
    return {"median_s": round(statistics.median(charged), 3), "max_s": round(max(charged), 3),
            "over_budget": sum(1 for c in charged if c > budget),
            "timed_out": sum(1 for c in costs if c is None), "campaigns": len(costs),
            "budget_s": budget}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--random", type=int, default=50, help="random campaigns (default 50)")
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one check may run (default 60)")
    parser.add_argument("--only", default="numpy,portable,node",
                        help="comma-separated accountants (default all three)")
    parser.add_argument("--json", metavar="FILE", type=Path, help="write the figures here")
    args = parser.parse_args()
    accountants = [name for name in args.only.split(",") if name]
    unknown = set(accountants) - set(BUDGETS)
    if unknown:
        parser.error(f"unknown accountant(s): {', '.join(sorted(unknown))}")
    sets = {"vectors": vector_campaigns(), "random": random_campaigns(args.random, args.seed)}
    figures: dict[str, Any] = {}
    for set_name, campaigns in sets.items():
        if not campaigns:
            continue
        for accountant in accountants:
            costs = []
            for number, campaign in enumerate(campaigns, 1):
                costs.append(check_cost(accountant, campaign, args.timeout))
                if number % 10 == 0 or number == len(campaigns):
                    print(f"  {set_name} / {accountant}: {number} of {len(campaigns)} checked",
                          file=sys.stderr)
            summary = summarise(costs, BUDGETS[accountant], args.timeout)
            slowest = max(range(len(costs)), key=lambda i: args.timeout if costs[i] is None
                          else costs[i])
            summary["slowest"] = campaigns[slowest]["name"]
            figures[f"{set_name}/{accountant}"] = summary
            print(f"{set_name:8s} {accountant:9s} median {summary['median_s']:7.3f} s  "
                  f"max {summary['max_s']:7.3f} s  over the {summary['budget_s']} s budget: "
                  f"{summary['over_budget']} of {summary['campaigns']} "
                  f"(timed out {summary['timed_out']}); slowest: {summary['slowest']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
