"""Users of the light install (no numpy, no scipy): run by tests/test_light_client.py with
the light virtualenv's interpreter, one process per round, as separate app launches would.

``python light_client_users.py JOB.json`` reads a job (phase, shuffler URL, campaign id,
server key, users) and prints a JSON report.  Round 1: enroll with the invitation, send
the level, save the state.  Round 2: resume from the state, wait for the parameters,
verify them (with the portable accountant: the script asserts numpy is absent) and send
the items.  It imports only the SDK, as an app would.
"""

from __future__ import annotations

import json
import random
import sys
import time


def main(path: str) -> int:
    with open(path, encoding="utf-8") as file:
        job = json.load(file)
    from segshuffle.client import Client, accountant

    assert "numpy" not in sys.modules and "scipy" not in sys.modules
    report: dict[str, object] = {"accountant": accountant.accountant_name(), "users": []}
    started = time.process_time()
    for number, user in enumerate(job["users"]):
        rng = random.Random(job.get("seed", 0) * 1000 + number)
        if job["phase"] == "round1":
            with Client(job["shufflerUrl"], job["campaignId"], server_key=job["serverKey"],
                        rng=rng) as client:
                client.enroll(user["invitation"])
                client.submit_level(user["levelIndex"])
                report["users"].append({"state": client.state()})
        else:
            with Client.resume(job["shufflerUrl"], user["state"], rng=rng) as client:
                client.wait_for_phase("round2", timeout=300)
                sent = client.submit_data(user["items"])
                report["users"].append({"slots": list(sent.slots)})
    report["cpu_seconds"] = time.process_time() - started
    report["modules"] = sorted({name.split(".")[0] for name in sys.modules})
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
