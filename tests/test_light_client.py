"""The light install (``pip install segshuffle``: no numpy, no scipy) takes part in a real
campaign beside full-install users.

A fresh virtualenv gets the base install only; its interpreter runs
tests/light_client_users.py, one process per round.  The services run as processes
(:class:`LocalStack`) from the full install, the optimizer publishes the parameters, and
the light users verify them with the portable accountant before round 2.  The decoded
counts must equal, to the unit, the non-null slots that every user (light and full) says
it sent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from segshuffle.client import Client
from segshuffle.testing.localstack import LocalStack

from .test_e2e_support import decoded_counts

pytestmark = pytest.mark.slow  # a virtualenv install and service processes: about a minute

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).with_name("light_client_users.py")
LIGHT_USERS = 8
FULL_USERS = 6


@pytest.fixture(scope="module")
def light_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a fresh virtualenv holding the base install only."""
    venv = tmp_path_factory.mktemp("light") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(ROOT)],
                             capture_output=True, text=True, timeout=900, check=False)
    assert install.returncode == 0, install.stderr[-2000:]
    for module in ("numpy", "scipy"):
        probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True,
                               timeout=60, check=False)
        assert probe.returncode != 0, f"the base install brought {module}"
    return python


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("light-stack"), min_users=2) as stack:
        yield stack


def _light(python: Path, directory: Path, job: dict[str, Any]) -> dict[str, Any]:
    path = directory / f"{job['campaignId']}-{job['phase']}.json"
    path.write_text(json.dumps(job), "utf-8")
    completed = subprocess.run([str(python), str(SCRIPT), str(path)], capture_output=True,
                               text=True, timeout=900, check=False, cwd=directory)
    assert completed.returncode == 0, completed.stderr[-4000:]
    report: dict[str, Any] = json.loads(completed.stdout)
    assert report["accountant"] == "portable"
    assert not {"numpy", "scipy"} & set(report["modules"])
    return report


def test_light_users_verify_and_count_exactly(light_python: Path, stack: LocalStack,
                                              tmp_path: Path) -> None:
    cid = "light"
    users = LIGHT_USERS + FULL_USERS
    stack.create_campaign({"id": cid, "domain_size": 6, "set_size": 2, "levels": [3.0, 6.0],
                           "min_users": 10})
    invitations = stack.invitations(cid, users)
    job = {"shufflerUrl": stack.shuffler_url, "campaignId": cid,
           "serverKey": stack.server_key, "seed": 1}
    light = [{"invitation": invitation, "levelIndex": number % 2}
             for number, invitation in enumerate(invitations[:LIGHT_USERS])]
    first = _light(light_python, tmp_path, {**job, "phase": "round1", "users": light})
    full_states = []
    for number, invitation in enumerate(invitations[LIGHT_USERS:]):
        with Client(stack.shuffler_url, cid, server_key=stack.server_key,
                    rng=np.random.default_rng(number)) as user:
            user.enroll(invitation)
            user.submit_level(number % 2)
            full_states.append(user.state())
    stack.release(cid, 1)
    parameters = stack.campaign(cid).parameters
    assert parameters is not None and not parameters.insecure
    assert parameters.users == users

    items = [[0], [1, 2], [3], [4, 5], [], [2, 3, 4], [5], [0, 1]]
    second_users = [{"state": u["state"], "items": chosen}
                    for u, chosen in zip(first["users"], items, strict=True)]
    second = _light(light_python, tmp_path, {**job, "phase": "round2", "users": second_users})
    slots = [u["slots"] for u in second["users"]]
    assert all(len(user) == parameters.messages_per_user for user in slots)
    for number, state in enumerate(full_states):
        with Client.resume(stack.shuffler_url, state,
                           rng=np.random.default_rng(100 + number)) as user:
            user.wait_for_phase("round2", timeout=120)
            slots.append(list(user.submit_data([number % 6]).slots))
    stack.release(cid, 2)

    results = stack.results(cid)
    counted = Counter(j for user in slots for j in user if j is not None)
    expected = [counted[j] for j in range(parameters.privacy_domain_size)]
    assert decoded_counts(results, parameters).tolist() == expected
    assert results.privacy.round2_users == users
