"""The web client's session (clients/web) against the real services, beside Python users.

Both services run as processes (:class:`LocalStack`); the web users run in Node
(clients/web/harness/node-users.mjs), one process per round, as separate launches of an app
would, carrying each user from round 1 to round 2 in its saved state.  Saved states
cross between the clients too: one web user's state is resumed by the Python SDK and
one Python user's by the web client.

- ``web-exact`` publishes fixed parameters (lambda = 1, m = 0, the insecure test flag,
  which both clients accept only when told to), so the decoded counts are exactly the
  items every user fitted; they and both rounds' level histograms must equal what the
  users say they sent, to the unit.
- ``web-secure`` gets its parameters from the optimizer.  The web users verify them with
  the accountant of clients/web/src/accountant before round 2; the decoded counts must
  equal the non-null slots sent.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from segshuffle.client import Client
from segshuffle.testing.localstack import LocalStack

from .node_support import node
from .test_e2e_support import decoded_counts

pytestmark = pytest.mark.slow  # real service processes and Node processes, some seconds

WEB = Path(__file__).resolve().parents[1] / "clients" / "web"
SCRIPT = WEB / "harness" / "node-users.mjs"
ITEMS = ["apple", "banana", "cherry", "date", "elderberry", "fig", "grape", "kiwi"]
WEB_USERS = 6
PYTHON_USERS = 6


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    node()
    with LocalStack(tmp_path_factory.mktemp("web"), min_users=2, allow_insecure=True) as stack:
        yield stack


def _web(stack: LocalStack, directory: Path, phase: str, campaign_id: str,
         users: list[dict[str, Any]], *, allow_insecure: bool) -> dict[str, Any]:
    """Run one phase of web users; returns the script's report."""
    job = {"phase": phase, "shufflerUrl": stack.shuffler_url, "campaignId": campaign_id,
           "serverKey": stack.server_key, "allowInsecure": allow_insecure, "users": users}
    path = directory / f"{campaign_id}-{phase}.json"
    path.write_text(json.dumps(job), "utf-8")
    result = subprocess.run([node(), str(SCRIPT), str(path)], capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    report: dict[str, Any] = json.loads(result.stdout)
    assert len(report["users"]) == len(users)
    return report


def _web_users(invitations: list[str]) -> list[dict[str, Any]]:
    """Web users' inputs: names and ids, sets smaller, equal to and larger than s = 2."""
    choices: list[list[Any]] = [["apple"], ["banana", "fig"], [2, "date", "kiwi"], [7],
                                ["grape", 0], []]
    return [{"invitation": invitation, "levelIndex": number % 2,
             "items": choices[number % len(choices)]}
            for number, invitation in enumerate(invitations)]


def _python_round1(stack: LocalStack, campaign_id: str, invitations: list[str],
                   *, allow_insecure: bool) -> list[dict[str, Any]]:
    """Python users' round 1; returns their saved states."""
    states = []
    for number, invitation in enumerate(invitations):
        with Client(stack.shuffler_url, campaign_id, server_key=stack.server_key,
                    allow_insecure=allow_insecure, rng=np.random.default_rng(number)) as user:
            user.enroll(invitation)
            user.submit_level((number + 1) % 2)
            states.append(json.loads(json.dumps(user.state())))
    return states


def _python_round2(stack: LocalStack, states: list[dict[str, Any]],
                   items: list[list[Any]], *, allow_insecure: bool) -> list[list[int | None]]:
    """Python users (resumed from ``states``) send round 2; returns their slots."""
    slots = []
    for number, (state, chosen) in enumerate(zip(states, items, strict=True)):
        with Client.resume(stack.shuffler_url, state, allow_insecure=allow_insecure,
                           rng=np.random.default_rng(100 + number)) as user:
            user.wait_for_phase("round2", timeout=120)
            slots.append(list(user.submit_data(chosen).slots))
    return slots


def _counts(slots: list[list[int | None]], domain: int) -> list[int]:
    counted = Counter(j for user in slots for j in user if j is not None)
    return [counted[j] for j in range(domain)]


def test_exact_counts_from_web_and_python_users(stack: LocalStack, tmp_path: Path) -> None:
    cid = "web-exact"
    stack.create_campaign({"id": cid, "items": ITEMS, "set_size": 2, "levels": [1.0, 2.0],
                           "min_users": 10, "insecure_parameters": {"m": 0.0,
                                                                    "lambdas": [1.0, 1.0]}})
    invitations = stack.invitations(cid, WEB_USERS + PYTHON_USERS)
    web_users = _web_users(invitations[:WEB_USERS])
    first = _web(stack, tmp_path, "round1", cid, web_users, allow_insecure=True)
    assert [u["error"] for u in first["users"]] == [None] * WEB_USERS
    python_states = _python_round1(stack, cid, invitations[WEB_USERS:], allow_insecure=True)
    reported1 = [u["round1"]["reportedLevel"] for u in first["users"]]
    reported1 += [state["reported_level"] for state in python_states]
    stack.release(cid, 1)

    # Round 2 in new processes: the web users from their states, except the first, whose
    # state the Python SDK resumes; the first Python user's state goes to the web client.
    web_states = [u["state"] for u in first["users"]]
    assert all(state["format"] == "segshuffle-client-state" for state in web_states)
    python_items: list[list[Any]] = [["cherry"], ["apple", "kiwi"], [1, 3, 5], ["fig"],
                                     ["date", "grape"], ["banana"]]
    second_users = [{**user, "state": state}
                    for user, state in zip(web_users[1:], web_states[1:], strict=True)]
    second_users.append({"items": python_items[0], "state": python_states[0]})
    second = _web(stack, tmp_path, "round2", cid, second_users, allow_insecure=True)
    assert [u["error"] for u in second["users"]] == [None] * WEB_USERS
    slots = [u["round2"]["slots"] for u in second["users"]]
    # the Python SDK checksums 0 and 0.0 differently: a web state travels as stateJson's text
    from_web = json.loads(first["users"][0]["stateText"])
    assert from_web == web_states[0]
    slots += _python_round2(stack, [from_web, *python_states[1:]],
                            [web_users[0]["items"], *python_items[1:]], allow_insecure=True)
    stack.release(cid, 2)

    results = stack.results(cid)
    parameters = stack.campaign(cid).parameters
    assert parameters is not None and parameters.insecure
    assert parameters.messages_per_user == 2
    domain = parameters.privacy_domain_size  # 8 items and 2 padding ids
    assert decoded_counts(results, parameters).tolist() == _counts(slots, domain)
    # lambda = 1 and m = 0: every fitted item arrives, padding ids for the one-item sets
    assert all(len(user) == 2 and None not in user for user in slots)
    assert sum(_counts(slots, domain)[8:]) >= 3  # ["apple"], [7], [] and ["cherry"] padded
    histogram1 = [int(level.users_round1) for level in results.privacy.levels]
    histogram2 = [int(level.users_round2) for level in results.privacy.levels]
    assert histogram1 == [reported1.count(0), reported1.count(1)]
    assert histogram2 == histogram1  # round 2 repeats round 1's reports
    assert results.privacy.round2_users == WEB_USERS + PYTHON_USERS
    assert results.dropped_messages == 0


def test_web_users_verify_optimized_parameters(stack: LocalStack, tmp_path: Path) -> None:
    cid = "web-secure"
    users = WEB_USERS + PYTHON_USERS
    stack.create_campaign({"id": cid, "domain_size": 6, "set_size": 2, "levels": [3.0, 6.0],
                           "min_users": 10})
    invitations = stack.invitations(cid, users)
    web_users = _web_users(invitations[:WEB_USERS])
    for user in web_users:  # this campaign has no item names
        user["items"] = [(j if isinstance(j, int) else ITEMS.index(j)) % 6 for j in user["items"]]
    first = _web(stack, tmp_path, "round1", cid, web_users, allow_insecure=False)
    assert [u["error"] for u in first["users"]] == [None] * WEB_USERS
    python_states = _python_round1(stack, cid, invitations[WEB_USERS:], allow_insecure=False)
    stack.release(cid, 1)
    parameters = stack.campaign(cid).parameters
    assert parameters is not None and not parameters.insecure
    assert parameters.users == users  # every round-1 level, web and Python, was decoded

    second_users = [{**user, "state": u["state"]}
                    for user, u in zip(web_users, first["users"], strict=True)]
    second = _web(stack, tmp_path, "round2", cid, second_users, allow_insecure=False)
    assert [u["error"] for u in second["users"]] == [None] * WEB_USERS
    slots = [u["round2"]["slots"] for u in second["users"]]
    assert all(len(user) == parameters.messages_per_user for user in slots)
    slots += _python_round2(stack, python_states, [[0], [1, 2], [3], [4, 5], [], [2]],
                            allow_insecure=False)
    stack.release(cid, 2)
    results = stack.results(cid)
    assert decoded_counts(results, parameters).tolist() == _counts(
        slots, parameters.privacy_domain_size)
    assert results.privacy.round2_users == users
