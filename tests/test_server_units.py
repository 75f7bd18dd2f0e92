"""Server building blocks: settings, decryption pool, message classification, OpenAPI."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest
from fastapi.testclient import TestClient

from segshuffle import __version__
from segshuffle.crypto import build_info, generate_private_key, key_id_for, private_key_bytes, seal
from segshuffle.services.server import Settings, create_app
from segshuffle.services.server.decrypt import Decryptor, open_chunk
from segshuffle.services.server.service import classify
from segshuffle.services.server.storage import AcceptedMessage
from segshuffle.wire.plaintext import Kind, item_plaintext, level_plaintext, null_plaintext

from .test_server_support import ADMIN, ADMIN_TOKEN, SHUFFLER_TOKEN, make_settings


def test_settings_from_environment(environment):
    env = {"SEGSHUFFLE_SERVER_ADMIN_TOKEN": ADMIN_TOKEN,
           "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": SHUFFLER_TOKEN,
           "SEGSHUFFLE_SERVER_PORT": "9001",
           "SEGSHUFFLE_SERVER_ALLOW_INSECURE_PARAMETERS": "yes",
           "SEGSHUFFLE_SERVER_DATABASE": "/data/s.db"}
    environment(env)
    settings = Settings.from_env(host="0.0.0.0", port=None)
    assert (settings.port, settings.host, settings.allow_insecure_parameters) == (
        9001, "0.0.0.0", True)
    assert settings.key_directory == "/data/s.db.keys"
    assert Settings.from_env(key_dir="/keys").key_directory == "/keys"


@pytest.mark.parametrize(("env", "message"), [
    ({}, "ADMIN_TOKEN"),
    ({"SEGSHUFFLE_SERVER_ADMIN_TOKEN": "short"}, "at least 16"),
    ({"SEGSHUFFLE_SERVER_ADMIN_TOKEN": ADMIN_TOKEN,
      "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": ADMIN_TOKEN}, "differ"),
    ({"SEGSHUFFLE_SERVER_PORT": "http"}, "SEGSHUFFLE_SERVER_PORT .* must be an integer"),
    ({"SEGSHUFFLE_SERVER_PORT": "70000"}, "65535"),
    ({"SEGSHUFFLE_SERVER_ALLOW_INSECURE_PARAMETERS": "maybe"}, "must be true or false"),
    ({"SEGSHUFFLE_SERVER_SYNCHRONOUS": "OFF"}, "SYNCHRONOUS .*'NORMAL', 'FULL' or 'EXTRA'"),
])
def test_settings_refuse_bad_values(env, message, environment):
    base = {"SEGSHUFFLE_SERVER_ADMIN_TOKEN": ADMIN_TOKEN,
            "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": SHUFFLER_TOKEN}
    if env == {}:
        base = {}
    environment({**base, **env})
    with pytest.raises(ValueError, match=message) as refused:
        Settings.from_env()
    assert "\n" not in str(refused.value)


def test_pool_and_in_process_opening_agree():
    key = generate_private_key()
    info = build_info("c", 2, key_id_for(key), bytes(32))
    messages = [item_plaintext(i) for i in range(30)] + [null_plaintext()]
    ciphertexts = [seal(key.public_key(), info, m) for m in messages] + [bytes(80), b"x"]
    raw = private_key_bytes(key)
    expected = open_chunk(raw, info, ciphertexts)
    assert expected[-2:] == ["decrypt-failed", "decrypt-failed"]
    assert [o[1] for o in expected[:30]] == list(range(30))
    decryptor = Decryptor(workers=2, threshold=4)
    try:
        assert decryptor.open(raw, info, ciphertexts) == expected
    finally:
        decryptor.close()


def test_a_broken_pool_is_replaced_and_the_chunk_still_opens():
    key = generate_private_key()
    info = build_info("c", 2, key_id_for(key), bytes(32))
    ciphertexts = [seal(key.public_key(), info, item_plaintext(i)) for i in range(12)]
    raw = private_key_bytes(key)
    expected = open_chunk(raw, info, ciphertexts)
    decryptor = Decryptor(workers=2, threshold=4)
    try:
        assert decryptor.open(raw, info, ciphertexts) == expected
        broken = decryptor._pool
        assert broken is not None
        for process in list(broken._processes.values()):
            process.kill()
            process.join()
        assert decryptor.open(raw, info, ciphertexts) == expected
        assert decryptor.open(raw, info, ciphertexts) == expected
        assert decryptor._pool is not broken
    finally:
        decryptor.close()


def test_classify_by_stream():
    nonce = bytes(16)
    outcomes = ["decrypt-failed", (int(Kind.LEVEL), 1, nonce), (int(Kind.LEVEL), 2, nonce),
                (int(Kind.ITEM), 0, nonce), (int(Kind.NULL), 0, nonce)]
    accepted, failures = classify(outcomes, "levels", 2, 10)
    assert accepted == [(1, AcceptedMessage(1, nonce))]
    assert failures == [(0, "decrypt-failed"), (2, "out-of-domain"), (3, "invalid-message"),
                        (4, "invalid-message")]
    accepted, failures = classify([*outcomes, (int(Kind.ITEM), 10, nonce)], "data", 2, 10)
    assert accepted == [(3, AcceptedMessage(0, nonce)), (4, AcceptedMessage(None, nonce))]
    assert failures == [(0, "decrypt-failed"), (1, "invalid-message"), (2, "invalid-message"),
                        (5, "out-of-domain")]


def test_health_openapi_and_key_files(tmp_path):
    with TestClient(create_app(make_settings(tmp_path))) as client:
        assert client.get("/livez").json() == {"status": "ok", "version": __version__}
        assert client.get("/readyz").json() == {"status": "ready", "version": __version__}
        schema = client.get("/openapi.json").json()
        text = json.dumps(schema)
        refs = set(re.findall(r"#/components/schemas/(\w+)", text))
        assert refs <= set(schema["components"]["schemas"])
        assert {"CampaignCreate", "BatchChunk"} <= refs
        assert client.get("/docs").status_code == 200
        view = client.post("/v1/campaigns", headers=ADMIN, json={
            "id": "k", "domain_size": 3, "set_size": 1, "levels": [1], "min_users": 2}).json()
        assert client.get("/v1/campaigns/k/hpke-config").json() == view["hpke_config"]
    key_file = tmp_path / "server.sqlite3.keys" / f"k~{view['hpke_config']['key_id']}.pem"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert b"PRIVATE KEY" in key_file.read_bytes()
    database = (tmp_path / "server.sqlite3").read_bytes()
    assert b"PRIVATE KEY" not in database


def test_level_messages_are_accepted_as_values(tmp_path):
    """Sanity of the level encoding used by clients: level index in the value field."""
    key = generate_private_key()
    info = build_info("c", 1, key_id_for(key), bytes(32))
    outcome = open_chunk(private_key_bytes(key), info,
                         [seal(key.public_key(), info, level_plaintext(7))])[0]
    assert outcome[:2] == (int(Kind.LEVEL), 7)
