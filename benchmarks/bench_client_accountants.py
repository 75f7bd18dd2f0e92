"""What a client's parameter check costs with each accountant; prints figures, asserts only
that both reach the vectors' verdicts.

Run: ``python benchmarks/bench_client_accountants.py [--json]``.

For every level verdict of the parameter documents in docs/test-vectors.json (the
campaigns a client is asked to accept or refuse), both accountants a Python client can
run (:mod:`segshuffle.client.accountant`: ``numpy``, the numpy and scipy one, and
``portable``, the standard-library one of the light install) compute delta_user at the
level, each in a fresh process with cold caches, as a client verifying a campaign would.
Reported: CPU seconds for all the verdicts, the ratio portable / numpy, and the slowest
single document (its CPU seconds with each).  A fresh process per accountant keeps one's
caches and imports from the other's figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

VECTORS = Path(__file__).resolve().parents[1] / "docs" / "test-vectors.json"

#: Run in a fresh interpreter: every document's verdicts with one accountant.
WORKER = """
import json, sys, time
from segshuffle.client import accountant
user_delta = accountant.implementation(sys.argv[2])
vectors = json.load(open(sys.argv[1]))
per_document = []
started = time.process_time()
for document in vectors["parameters"]:
    p = document["parameters"]
    begun = time.process_time()
    for verdict in document["level_verdicts"]:
        bound = user_delta(verdict["level"], verdict["lambda"], p["set_size"],
                           p["honest_users"], p["m"], p["privacy_domain_size"],
                           mode=p.get("blanket_mode", "slots"), delta=p["delta"])
        if (bound <= p["delta"]) != verdict["holds"]:
            raise SystemExit(f"{document['description']}: verdict differs at {verdict}")
    per_document.append(time.process_time() - begun)
print(json.dumps({"total": time.process_time() - started, "documents": per_document,
                  "verdicts": sum(len(d["level_verdicts"]) for d in vectors["parameters"])}))
"""


def measure(name: str) -> dict[str, object]:
    completed = subprocess.run([sys.executable, "-c", WORKER, str(VECTORS), name],
                               capture_output=True, text=True, check=True, timeout=3600)
    result: dict[str, object] = json.loads(completed.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on one line")
    args = parser.parse_args()
    numpy_run, portable_run = measure("numpy"), measure("portable")
    slowest = max(range(len(portable_run["documents"])),  # type: ignore[arg-type]
                  key=lambda i: portable_run["documents"][i])  # type: ignore[index]
    figures = {
        "verdicts": numpy_run["verdicts"],
        "numpy_cpu_s": round(float(numpy_run["total"]), 2),  # type: ignore[arg-type]
        "portable_cpu_s": round(float(portable_run["total"]), 2),  # type: ignore[arg-type]
        "ratio": round(float(portable_run["total"]) / float(numpy_run["total"]), 1),  # type: ignore[arg-type]
        "slowest_document": slowest,
        "slowest_numpy_cpu_s": round(numpy_run["documents"][slowest], 2),  # type: ignore[index]
        "slowest_portable_cpu_s": round(portable_run["documents"][slowest], 2),  # type: ignore[index]
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"{figures['verdicts']} level verdicts of {VECTORS.name}'s parameter documents, "
              "cold caches, one process each")
        print(f"  numpy accountant:    {figures['numpy_cpu_s']:8.2f} CPU-s")
        print(f"  portable accountant: {figures['portable_cpu_s']:8.2f} CPU-s "
              f"({figures['ratio']}x)")
        print(f"  slowest document (#{slowest}): numpy {figures['slowest_numpy_cpu_s']} CPU-s, "
              f"portable {figures['slowest_portable_cpu_s']} CPU-s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
