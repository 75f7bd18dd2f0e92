"""The answers of plain submissions whose token is checked inside the store's own
transaction (``submit_as``), the same on every store: the tests of each store count its
own calls (tests/test_shuffler_loop_statements.py, tests/test_shuffler_sqlite_submit_as.py)."""

from __future__ import annotations

import base64
import secrets
import time

from fastapi.testclient import TestClient

from segshuffle.wire.models import CIPHERTEXT_LENGTH


def ciphertext() -> str:
    """A ciphertext of the wire's length, in its encoding."""
    return base64.urlsafe_b64encode(secrets.token_bytes(CIPHERTEXT_LENGTH)).decode().rstrip("=")


def check_plain_submissions(client: TestClient, campaign_id: str, phase: dict[str, str],
                            calls: list[str], one_call: list[str]) -> None:
    """Round 1 of ``campaign_id`` (open enrollment; its view in ``phase["now"]``): once
    the round's key exists, a plain submission with a good token makes exactly
    ``one_call`` in ``calls``, and every refusal answers as in the usual order: a bad
    token ``unauthorized`` before any problem of the body, and ``wrong-phase`` once the
    campaign has ended."""
    path = f"/v1/campaigns/{campaign_id}/rounds/1/submissions"
    tokens = [client.post(f"/v1/campaigns/{campaign_id}/enrollments").json()["token"]
              for _ in range(3)]
    bearer = [{"authorization": f"Bearer {token}"} for token in tokens]
    stranger = {"authorization": "Bearer " + "x" * 43}
    first = client.post(path, json={"level": ciphertext()}, headers=bearer[0])
    assert first.status_code == 201, first.text  # the round's key is made here

    calls.clear()
    second = client.post(path, json={"level": ciphertext()}, headers=bearer[1])
    assert second.status_code == 201, second.text
    assert calls == one_call

    calls.clear()
    again = client.post(path, json={"level": ciphertext()}, headers=bearer[1])
    assert again.status_code == 409 and again.json()["type"].endswith(":already-submitted")
    assert calls == one_call

    unknown = client.post(path, json={"level": ciphertext()}, headers=stranger)
    assert unknown.status_code == 401, unknown.text
    assert unknown.headers["www-authenticate"] == 'Bearer realm="shuffler"'
    # a bad token takes precedence over whatever is wrong with the body
    for body, media in ((b"{not json", "application/json"),
                        (b'{"level": "short"}', "application/json"),
                        (b'{"level": "x"}', "text/plain")):
        answer = client.post(path, content=body, headers={**stranger, "content-type": media})
        assert answer.status_code == 401, (body, media, answer.text)
    # a chunked body too large for the edge: still unauthorized first
    oversize = client.post(path, content=iter([b'{"level": "', b"x" * (1 << 20), b'"}']),
                           headers={**stranger, "content-type": "application/json"})
    assert oversize.status_code == 401, oversize.text
    # a good token with a bad body: the body's problem, as before
    bad = client.post(path, content=b"{not json", headers=bearer[2])
    assert bad.status_code == 400 and bad.json()["type"].endswith(":malformed-body")

    status = client.get(f"/v1/campaigns/{campaign_id}/rounds/1").json()
    assert status["participants"] == 2

    phase["now"] = "aborted"  # the cached view still says round 1
    time.sleep(0.3)  # a refused token refreshes the view at most every 0.25 s
    late = client.post(path, json={"level": ciphertext()}, headers=stranger)
    assert late.status_code == 409, late.text
    assert late.json()["type"].endswith(":wrong-phase")
