"""Every bad request answers the right RFC 9457 problem type and leaves the state unchanged."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from segshuffle.crypto import build_info, generate_private_key, key_id_for, seal
from segshuffle.services.server import create_app
from segshuffle.wire.models import CIPHERTEXT_LENGTH, b64url_encode
from segshuffle.wire.plaintext import (
    Kind,
    encode_plaintext,
    item_plaintext,
    level_plaintext,
)

from .sqlite_backend import snapshot
from .test_server_support import (
    ADMIN,
    SHUFFLER,
    Sealer,
    complete_round,
    decoded,
    deliver,
    make_settings,
)

CAMPAIGN = {"id": "c1", "domain_size": 4, "set_size": 1, "levels": [1, 2], "min_users": 3,
            "dropout_tolerance": 0.0}
BATCH = "/v1/campaigns/c1/rounds/1/batches/b1"


@pytest.fixture
def setup(tmp_path):
    settings = make_settings(tmp_path, max_body_bytes=64 * 1024)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        view = client.post("/v1/campaigns", json=CAMPAIGN, headers=ADMIN).json()
        yield client, view, settings.database


def assert_problem(response, name, status):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"] == f"urn:segshuffle:error:{name}", body
    assert body["status"] == status
    return body


def chunk(ciphertexts, index=0, count=1, stream="levels"):
    return {"chunk_index": index, "chunk_count": count, "stream": stream,
            "ciphertexts": ciphertexts}


def put_decoded(client, url, body):
    """PUT a chunk (accepted into the decode queue: ``202``) and return its receipt once
    the server's decode workers have counted it."""
    response = client.put(url, json=body, headers=SHUFFLER)
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "queued"
    parts = url.split("/")
    return decoded(client, parts[3], int(parts[5]), parts[7], body["stream"],
                   body["chunk_index"])


def unchanged(setup, request, name, status):
    client, _, database = setup
    before = snapshot(database)
    body = assert_problem(request(client), name, status)
    assert snapshot(database) == before
    return body


# -- authentication and authorization ----------------------------------------------------

@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-xxxxxxxx"},
                                     {"Authorization": "Basic abc"},
                                     {"Authorization": "Bearer"}])
def test_bad_or_missing_token(setup, headers):
    body = unchanged(setup, lambda c: c.put(BATCH, json=chunk([]), headers=headers),
                     "unauthorized", 401)
    assert "detail" in body
    unchanged(setup, lambda c: c.post("/v1/campaigns", json={**CAMPAIGN, "id": "c2"},
                                      headers=headers), "unauthorized", 401)
    unchanged(setup, lambda c: c.get("/v1/campaigns/c1/results", headers=headers),
              "unauthorized", 401)


def test_unauthorized_carries_www_authenticate(setup):
    client, _, _ = setup
    assert client.put(BATCH, json=chunk([])).headers["www-authenticate"].startswith("Bearer")


def test_batch_not_from_the_shuffler(setup):
    unchanged(setup, lambda c: c.put(BATCH, json=chunk([]), headers=ADMIN), "forbidden", 403)
    unchanged(setup, lambda c: c.post(BATCH + "/complete", headers=ADMIN), "forbidden", 403)


def test_shuffler_cannot_administer(setup):
    unchanged(setup, lambda c: c.post("/v1/campaigns", json={**CAMPAIGN, "id": "c2"},
                                      headers=SHUFFLER), "forbidden", 403)
    unchanged(setup, lambda c: c.get("/v1/campaigns/c1/results", headers=SHUFFLER),
              "forbidden", 403)


def test_auth_is_checked_before_the_body(setup):
    unchanged(setup, lambda c: c.put(BATCH, content=b"{oops",
                                     headers={"content-type": "application/json"}),
              "unauthorized", 401)


# -- bodies ------------------------------------------------------------------------------

def test_malformed_json(setup):
    for raw in (b"{oops", b"", b"[1,", b"\xff\xfe"):
        unchanged(setup, lambda c, raw=raw: c.post(
            "/v1/campaigns", content=raw,
            headers={**ADMIN, "content-type": "application/json"}), "malformed-body", 400)


@pytest.mark.parametrize("body", [
    {**CAMPAIGN, "id": "c2", "set_size": "1"},
    {**CAMPAIGN, "id": "c2", "levels": "1,2"},
    {**CAMPAIGN, "id": "c2", "min_users": 2.5},
    {**CAMPAIGN, "id": "c2", "extra": True},
    {**CAMPAIGN, "id": "c2", "blanket_mode": "uniform"},
    {**CAMPAIGN, "id": "c2", "blanket_mode": "independent", "domain_size": 9000},
    {"id": "c2"},
    [CAMPAIGN],
    "c2",
])
def test_wrong_types_in_campaign(setup, body):
    error = unchanged(setup, lambda c: c.post("/v1/campaigns", json=body, headers=ADMIN),
                      "invalid-field", 422)
    assert error["errors"]


@pytest.mark.parametrize("body", [
    chunk(["x" * 107]),
    chunk(["A" * 106]),
    chunk([]) | {"chunk_index": 1},
    chunk([]) | {"stream": "other"},
    chunk([]) | {"chunk_count": "1"},
    {"chunk_index": 0},
])
def test_wrong_types_in_chunk(setup, body):
    unchanged(setup, lambda c: c.put(BATCH, json=body, headers=SHUFFLER), "invalid-field", 422)


def test_data_stream_in_round_one(setup):
    unchanged(setup, lambda c: c.put(BATCH, json=chunk([], stream="data"), headers=SHUFFLER),
              "invalid-field", 422)


def test_wrong_media_type(setup):
    unchanged(setup, lambda c: c.put(BATCH, content=b'{"chunk_index":0}',
                                     headers={**SHUFFLER, "content-type": "text/plain"}),
              "unsupported-media-type", 415)


def test_oversize_body(setup):
    many = ["A" * 107] * 700  # > 64 KiB
    unchanged(setup, lambda c: c.put(BATCH, json=chunk(many), headers=SHUFFLER),
              "body-too-large", 413)


def test_error_bodies_do_not_echo_ciphertexts_or_tokens(setup):
    client, _, _ = setup
    secret = "Q" * 106 + "A"
    response = client.put(BATCH, json=chunk([secret]) | {"chunk_index": "x"}, headers=SHUFFLER)
    assert secret not in response.text and "shuffler-token" not in response.text


# -- resources and phases ----------------------------------------------------------------

def test_unknown_campaign(setup):
    for request in (
        lambda c: c.get("/v1/campaigns/nope"),
        lambda c: c.get("/v1/campaigns/nope/hpke-config"),
        lambda c: c.get("/v1/campaigns/nope/results", headers=ADMIN),
        lambda c: c.put("/v1/campaigns/nope/rounds/1/batches/b", json=chunk([]),
                        headers=SHUFFLER),
        lambda c: c.post("/v1/campaigns/nope/rounds/1/batches/b/complete", headers=SHUFFLER),
        lambda c: c.get("/v1/campaigns/bad%20id"),
    ):
        unchanged(setup, request, "unknown-campaign", 404)


def test_unknown_round_route_and_method(setup):
    unchanged(setup, lambda c: c.put("/v1/campaigns/c1/rounds/3/batches/b", json=chunk([]),
                                     headers=SHUFFLER), "unknown-round", 404)
    unchanged(setup, lambda c: c.get("/v1/nothing"), "not-found", 404)
    unchanged(setup, lambda c: c.delete("/v1/campaigns/c1"), "method-not-allowed", 405)


def test_duplicate_campaign(setup):
    unchanged(setup, lambda c: c.post("/v1/campaigns", json=CAMPAIGN, headers=ADMIN),
              "already-exists", 409)


def test_insecure_parameters_need_the_flag(setup):
    body = {**CAMPAIGN, "id": "c2", "insecure_parameters": {"m": 0, "lambdas": [1, 1]}}
    unchanged(setup, lambda c: c.post("/v1/campaigns", json=body, headers=ADMIN),
              "insecure-refused", 403)


@pytest.mark.slow  # over 10 s on a 2-core machine: the fast tier stays within 3 minutes
def test_wrong_phase(setup):
    client, view, _ = setup
    round2 = "/v1/campaigns/c1/rounds/2/batches/b2"
    unchanged(setup, lambda c: c.put(round2, json=chunk([]), headers=SHUFFLER),
              "wrong-phase", 409)
    unchanged(setup, lambda c: c.post(round2 + "/complete", headers=SHUFFLER),
              "wrong-phase", 409)
    unchanged(setup, lambda c: c.get("/v1/campaigns/c1/results", headers=ADMIN),
              "wrong-phase", 409)
    deliver(client, "c1", 1, "b1", {"levels": Sealer(view, 1).levels([0, 1, 1])})
    unchanged(setup, lambda c: c.put("/v1/campaigns/c1/rounds/1/batches/other",
                                     json=chunk([]), headers=SHUFFLER), "wrong-phase", 409)
    unchanged(setup, lambda c: c.post("/v1/campaigns/c1/rounds/1/batches/other/complete",
                                      headers=SHUFFLER), "wrong-phase", 409)


def test_incomplete_batch_and_unknown_batch(setup):
    client, view, _ = setup
    sealer = Sealer(view, 1)
    put_decoded(client, BATCH, chunk(sealer.levels([0, 1]), 0, 2))
    body = unchanged(setup, lambda c: c.post(BATCH + "/complete", headers=SHUFFLER),
                     "incomplete-batch", 409)
    assert body["missing_chunks"] == [1]
    unchanged(setup, lambda c: c.post("/v1/campaigns/c1/rounds/1/batches/zz/complete",
                                      headers=SHUFFLER), "not-found", 404)
    # Another batch id for a round that is pinned, and a changed chunk_count.
    unchanged(setup, lambda c: c.put("/v1/campaigns/c1/rounds/1/batches/b9",
                                     json=chunk([], 0, 2), headers=SHUFFLER), "conflict", 409)
    unchanged(setup, lambda c: c.put(BATCH, json=chunk([], 1, 3), headers=SHUFFLER),
              "conflict", 409)


def test_too_few_valid_messages_close_the_campaign_as_failed(setup):
    """R2: a released round whose valid count falls below the threshold must end, not be
    refused forever (the shuffler would retry ``complete`` without end)."""
    client, view, database = setup
    deliver(client, "c1", 1, "b1", {"levels": Sealer(view, 1).levels([0, 1])}, complete=False)
    done = complete_round(client, "c1", 1, "b1")
    assert done.status_code == 200, done.text
    completion = done.json()
    assert completion["phase"] == "failed"
    assert "2 valid level messages" in completion["end_reason"]
    assert "at least 3" in completion["end_reason"]
    campaign = client.get("/v1/campaigns/c1").json()
    assert (campaign["phase"], campaign["end_reason"]) == ("failed", completion["end_reason"])
    before = snapshot(database)
    assert client.post(BATCH + "/complete", headers=SHUFFLER).json() == completion
    assert snapshot(database) == before
    body = assert_problem(client.get("/v1/campaigns/c1/results", headers=ADMIN),
                          "wrong-phase", 409)
    assert body["end_reason"] == completion["end_reason"]
    unchanged(setup, lambda c: c.put(BATCH, json=chunk([], 1, 2), headers=SHUFFLER),
              "wrong-phase", 409)


def test_admin_aborts_a_campaign(setup):
    client, view, database = setup
    deliver(client, "c1", 1, "b1", {"levels": Sealer(view, 1).levels([0, 1])}, complete=False)
    unchanged(setup, lambda c: c.post("/v1/campaigns/c1/abort", headers=SHUFFLER),
              "forbidden", 403)
    unchanged(setup, lambda c: c.post("/v1/campaigns/c1/abort", json={"reason": ""},
                                      headers=ADMIN), "invalid-field", 422)
    answer = client.post("/v1/campaigns/c1/abort", json={"reason": "wrong item list"},
                         headers=ADMIN)
    assert answer.status_code == 200
    assert (answer.json()["phase"], answer.json()["end_reason"]) == ("aborted",
                                                                     "wrong item list")
    before = snapshot(database)
    assert client.post("/v1/campaigns/c1/abort", headers=ADMIN).json() == answer.json()
    assert snapshot(database) == before
    unchanged(setup, lambda c: c.post(BATCH + "/complete", headers=SHUFFLER),
              "wrong-phase", 409)
    unchanged(setup, lambda c: c.post("/v1/campaigns/nope/abort", headers=ADMIN),
              "unknown-campaign", 404)


# -- idempotency ---------------------------------------------------------------------------

@pytest.mark.slow  # over 10 s on a 2-core machine: the fast tier stays within 3 minutes
def test_chunks_and_completion_are_idempotent(setup):
    client, view, database = setup
    sealer = Sealer(view, 1)
    first = chunk(sealer.levels([0, 1, 1]), 0, 2)
    receipt = put_decoded(client, BATCH, first)
    assert receipt["accepted"] == 3 and not receipt["duplicate"]
    assert receipt["state"] == "decoded"
    before = snapshot(database)
    again = client.put(BATCH, json=first, headers=SHUFFLER)
    assert again.status_code == 200 and again.json() == receipt | {"duplicate": True}
    assert snapshot(database) == before
    changed = chunk(sealer.levels([0, 1, 1]), 0, 2)
    unchanged(setup, lambda c: c.put(BATCH, json=changed, headers=SHUFFLER), "conflict", 409)
    client.put(BATCH, json=chunk(sealer.levels([1]), 1, 2), headers=SHUFFLER)
    done = complete_round(client, "c1", 1, "b1")
    assert done.status_code == 200
    before = snapshot(database)
    assert client.post(BATCH + "/complete", headers=SHUFFLER).json() == done.json()
    # A chunk retried after completion still gets its receipt.
    assert client.put(BATCH, json=first, headers=SHUFFLER).json()["duplicate"] is True
    assert snapshot(database) == before
    assert client.get("/v1/campaigns/c1").json()["parameters"]["users"] == 4


# -- per-message failures --------------------------------------------------------------------

@pytest.mark.slow  # over 10 s on a 2-core machine: the fast tier stays within 3 minutes
def test_bad_messages_are_reported_and_not_counted(setup):
    client, view, _ = setup
    sealer = Sealer(view, 1)
    good = sealer.levels([0, 1, 1])
    other_key = generate_private_key()
    foreign = b64url_encode(seal(other_key.public_key(),
                                 build_info("c1", 1, key_id_for(other_key), bytes(32)),
                                 level_plaintext(0)))
    wrong_round = Sealer(view, 1)
    wrong_round.info = build_info("c1", 2, view["key_id"], bytes.fromhex(view["config_hash"]))
    garbage = b64url_encode(bytes(CIPHERTEXT_LENGTH))
    bad = [
        foreign,                                            # another key: decrypt-failed
        wrong_round.levels([0])[0],                         # another round: decrypt-failed
        garbage,                                            # decrypt-failed
        sealer.levels([2])[0],                              # level 2 of 2: out-of-domain
        sealer.raw(item_plaintext(1)),                      # item in levels stream
        sealer.raw(encode_plaintext(Kind.LEVEL, 0)[:-1] + b"\x01"),  # invalid-message
        good[0],                                            # exact replay
    ]
    receipt = put_decoded(client, BATCH, chunk(good + bad))
    kinds = {f["index"]: f["type"].rsplit(":", 1)[1] for f in receipt["failures"]}
    assert kinds == {3: "decrypt-failed", 4: "decrypt-failed", 5: "decrypt-failed",
                     6: "out-of-domain", 7: "invalid-message", 8: "invalid-message",
                     9: "replay"}
    assert receipt["accepted"] == 3 and receipt["replays"] == 1 and receipt["received"] == 10
    assert receipt["failure_counts"] == {"decrypt-failed": 3, "invalid-message": 2,
                                         "out-of-domain": 1, "replay": 1}
    done = complete_round(client, "c1", 1, "b1").json()
    assert done["streams"]["levels"]["accepted"] == 3
    assert done["streams"]["levels"]["decrypt_failures"] == 3
    assert len(done["failures"]) == 7
    view = client.get("/v1/campaigns/c1").json()
    assert view["parameters"]["users"] == 3


def test_round_two_out_of_domain_items_and_nulls(tmp_path):
    settings = make_settings(tmp_path, allow_insecure_parameters=True)
    with TestClient(create_app(settings)) as client:
        body = {**CAMPAIGN, "insecure_parameters": {"m": 0, "lambdas": [1, 1]}}
        view = client.post("/v1/campaigns", json=body, headers=ADMIN).json()
        deliver(client, "c1", 1, "b1", {"levels": Sealer(view, 1).levels([0, 1, 1])})
        view = client.get("/v1/campaigns/c1").json()
        sealer = Sealer(view, 2)
        # Domain: 4 items + 1 padding id = 5; id 5 is out of the domain.
        data = [*sealer.slots([0, 4, None]), sealer.raw(item_plaintext(5)),
                sealer.raw(level_plaintext(0))]
        receipts = deliver(client, "c1", 2, "b2", {"levels": sealer.levels([0, 1, 1]),
                                                   "data": data}, shuffle=False)
        data_receipt = receipts[1]
        assert data_receipt["accepted"] == 3 and "nulls" not in data_receipt
        assert [f["type"].rsplit(":", 1)[1] for f in data_receipt["failures"]] == [
            "out-of-domain", "invalid-message"]
        results = client.get("/v1/campaigns/c1/results", headers=ADMIN).json()
    assert [r["estimate"] for r in results["items"]] == pytest.approx([1 / 3, 0, 0, 0])
    assert results["padding"][0]["estimate"] == pytest.approx(1 / 3)
    assert results["dropped_messages"] == 2 and results["null_messages"] == 1


def test_receipts_do_not_reveal_which_slots_were_null(tmp_path):
    """The shuffler knows whose messages a chunk holds: a chunk of nulls and a chunk of items
    must get the same answer."""
    settings = make_settings(tmp_path, allow_insecure_parameters=True)
    with TestClient(create_app(settings)) as client:
        body = {**CAMPAIGN, "insecure_parameters": {"m": 2, "lambdas": [0.5, 1]}}
        view = client.post("/v1/campaigns", json=body, headers=ADMIN).json()
        deliver(client, "c1", 1, "b1", {"levels": Sealer(view, 1).levels([0, 1, 1])})
        sealer = Sealer(client.get("/v1/campaigns/c1").json(), 2)
        url = "/v1/campaigns/c1/rounds/2/batches/b2"
        bodies = [chunk(sealer.slots(values), index, 2, "data")
                  for index, values in enumerate([[None, None, None], [0, 1, 4]])]
        queued = [client.put(url, headers=SHUFFLER, json=body).json() for body in bodies]
        answers = [decoded(client, "c1", 2, "b2", "data", index) for index in (0, 1)]
    for answer in [*queued, *answers]:
        answer.pop("chunk_index")
    assert queued[0] == queued[1] and queued[0]["state"] == "queued"
    assert answers[0] == answers[1] and answers[0]["state"] == "decoded"


@pytest.mark.parametrize("change", [
    {"levels": [5e-324]}, {"levels": [0.001, 1.0]}, {"levels": [40.0]},
    {"levels": [1.0] * 10_001}, {"domain_size": 1_000_001}, {"set_size": 65},
    {"min_users": 10**13}, {"delta": 1e-300}, {"dropout_tolerance": 1.0},
])
def test_campaigns_beyond_the_caps_are_refused_at_creation(setup, change):
    """R4: nothing a campaign asks of clients or services exceeds the documented caps."""
    body = unchanged(setup, lambda c: c.post("/v1/campaigns", json={**CAMPAIGN, "id": "big",
                                                                    **change}, headers=ADMIN),
                     "invalid-field", 422)
    assert "big" not in str(body)
