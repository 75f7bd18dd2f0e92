"""Server-signed campaign documents (docs/wire.md section 9): the signed statements, the
server's signing key, and the client that refuses what the server did not sign."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from segshuffle.cli.main import main
from segshuffle.client.errors import CampaignEndedError, ClientError, VerificationError
from segshuffle.client.policy import ClientPolicy
from segshuffle.client.session import UserSession
from segshuffle.core.rules import default_delta
from segshuffle.crypto import generate_private_key, key_config, save_private_key
from segshuffle.crypto.documents import (
    SignatureError,
    campaign_message,
    end_message,
    parameters_message,
    parse_server_key,
    sign_view,
    verify_campaign_signature,
    verify_end_signature,
    verify_parameters_signature,
)
from segshuffle.crypto.invitations import public_key_text
from segshuffle.services.server import create_app
from segshuffle.services.server.signing import SigningKeyError
from segshuffle.wire.models import CampaignView, b64url_encode

from .test_server_support import ADMIN, SHUFFLER, Sealer, deliver, make_settings

# --- the test vector of docs/wire.md section 9 ----------------------------------------------

VECTOR_SEED = bytes(range(32))
VECTOR_PUBLIC_KEY = "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"
VECTOR_CAMPAIGN = (
    "73656773687566666c652f76312f63616d706169676e2d646f63756d656e7400000a63616d706169676e2d"
    "31002011111111111111111111111111111111111111111111111111111111111111110008012345678"
    "9abcdef0020202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f",
    "c27pk7isMj62USH1LJ01ogBRDfOFj6IMYMXiozicuvW1GCeS-YJwntGegiKL6vsEDltF_UwzPSJBU2JwJOXXAQ")
VECTOR_PARAMETERS = (
    "73656773687566666c652f76312f706172616d65746572732d646f63756d656e7400000a63616d706169676e"
    "2d3100202222222222222222222222222222222222222222222222222222222222222222",
    "0gCl2tHnH7cxXvHMU53gIY7jozim_ObN0Sg2XV4cdmG6H1bdFvvopIiqXzd3E4ojZchNlwXYQDqu7dMfNzEdAg")
VECTOR_END = (
    "73656773687566666c652f76312f63616d706169676e2d656e6400000a63616d706169676e2d31000761626f"
    "7274656401001c61626f72746564206279207468652061646d696e6973747261746f72",
    "i8yUEvPZB4NMR-c7k4R9pgsk9WIlgXZoPYNoWjg13rSOgl2_V8lxU_-kh7ownnNPxeaMt9ytsm9eKaCeGUVLBw")


def test_the_documented_vector() -> None:
    key = Ed25519PrivateKey.from_private_bytes(VECTOR_SEED)
    public = parse_server_key(VECTOR_PUBLIC_KEY)
    assert public_key_text(key) == VECTOR_PUBLIC_KEY
    messages = [
        (campaign_message("campaign-1", "11" * 32, "0123456789abcdef", bytes(range(32, 64))),
         VECTOR_CAMPAIGN),
        (parameters_message("campaign-1", "22" * 32), VECTOR_PARAMETERS),
        (end_message("campaign-1", "aborted", "aborted by the administrator"), VECTOR_END),
    ]
    for message, (expected, signature) in messages:
        assert message.hex() == expected
        assert b64url_encode(key.sign(message)) == signature  # Ed25519 is deterministic
        public.verify(key.sign(message), message)


def test_encodings_are_unambiguous() -> None:
    # No reason and an empty reason differ; the length prefixes keep fields apart.
    assert end_message("c", "failed", None) != end_message("c", "failed", "")
    assert parameters_message("ab", "22" * 32) != parameters_message("a", "22" * 32)
    with pytest.raises(ValueError):
        end_message("c", "round2", None)  # only terminal phases are signed as ends
    with pytest.raises(ValueError):
        campaign_message("c", "11" * 32, "0123456789ABCDEF", bytes(32))  # hex is lower case


# --- views signed by a real server app ------------------------------------------------------

ITEMS = ["a", "b", "c"]


def _campaign_body(cid: str) -> dict[str, Any]:
    return {"id": cid, "items": ITEMS, "set_size": 1, "levels": [1, 2], "min_users": 3,
            "dropout_tolerance": 0.0, "insecure_parameters": {"m": 0, "lambdas": [1, 1]}}


class Documents:
    """Views a real server app signed: round 1, round 2 and aborted, for two campaigns."""

    def __init__(self, directory: Path) -> None:
        settings = make_settings(directory, allow_insecure_parameters=True)
        with TestClient(create_app(settings)) as client:
            self.server_key = client.get("/v1/signing-key", headers=ADMIN).json()["public_key"]
            views: dict[str, dict[str, Any]] = {}
            for cid in ("one", "two"):
                round1 = client.post("/v1/campaigns", json=_campaign_body(cid),
                                     headers=ADMIN).json()
                views[f"{cid}-round1"] = round1
                deliver(client, cid, 1, "b1", {"levels": Sealer(round1, 1).levels([0, 1, 0])})
                views[f"{cid}-round2"] = client.get(f"/v1/campaigns/{cid}").json()
                views[f"{cid}-aborted"] = client.post(
                    f"/v1/campaigns/{cid}/abort", json={"reason": "stopped"},
                    headers=ADMIN).json()
                views[f"{cid}-hpke"] = client.get(f"/v1/campaigns/{cid}/hpke-config").json()
        self.raw = views
        self.key = parse_server_key(self.server_key)

    def view(self, name: str, **changes: Any) -> CampaignView:
        return CampaignView.model_validate({**self.raw[name], **changes})

    def session(self, *, server_key: str | None = "default") -> UserSession:
        key = self.server_key if server_key == "default" else server_key
        return UserSession("one", allow_insecure=True, server_key=key,
                           policy=ClientPolicy(min_users=3, delta_ceiling=default_delta(3)))


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Documents:
    return Documents(tmp_path_factory.mktemp("signed"))


def test_the_server_signs_every_statement(documents: Documents) -> None:
    round1, round2 = documents.view("one-round1"), documents.view("one-round2")
    aborted = documents.view("one-aborted")
    assert round1.signatures is not None and round1.signatures.parameters is None
    assert round1.signatures.end is None
    verify_campaign_signature(documents.key, round1)
    verify_parameters_signature(documents.key, round2)
    verify_end_signature(documents.key, aborted)
    assert aborted.phase == "aborted" and aborted.end_reason == "stopped"
    assert aborted.parameters is not None  # aborted in round 2: both statements signed
    verify_campaign_signature(documents.key, aborted)
    verify_parameters_signature(documents.key, aborted)


def test_every_signed_field_is_bound(documents: Documents) -> None:
    view = documents.raw["one-aborted"]
    attacker = key_config(generate_private_key())
    other = documents.raw["two-aborted"]
    tampered = {
        "campaign": [{"id": "two"}, {"config_hash": other["config_hash"]},
                     {"key_id": attacker.key_id},
                     {"hpke_config": {**view["hpke_config"],
                                      "public_key": attacker.public_key}}],
        "parameters": [{"id": "two"}, {"parameters_hash": other["parameters_hash"]}],
        "end": [{"id": "two"}, {"phase": "failed"}, {"end_reason": "other"},
                {"end_reason": None}],
    }
    checks = {"campaign": verify_campaign_signature, "parameters": verify_parameters_signature,
              "end": verify_end_signature}
    for check, changes in tampered.items():
        for change in changes:
            forged = CampaignView.model_validate({**view, **change})
            with pytest.raises(SignatureError) as refused:
                checks[check](documents.key, forged)
            assert refused.value.check == check, change


def test_another_key_or_no_signature_is_refused(documents: Documents) -> None:
    view = documents.view("one-aborted")
    stranger = Ed25519PrivateKey.generate().public_key()
    for check in (verify_campaign_signature, verify_parameters_signature,
                  verify_end_signature):
        with pytest.raises(SignatureError, match="does not verify"):
            check(stranger, view)
        with pytest.raises(SignatureError, match="carries no"):
            check(documents.key, view.model_copy(update={"signatures": None}))


# --- the client -------------------------------------------------------------------------------


def _hpke(documents: Documents, cid: str = "one") -> Any:
    from segshuffle.wire.models import HpkeConfig

    return HpkeConfig.model_validate(documents.raw[f"{cid}-hpke"])


def test_the_client_accepts_the_honest_documents(documents: Documents) -> None:
    session = documents.session()
    session.accept_campaign(documents.view("one-round1"), _hpke(documents))
    session.level_index = 0
    assert session.accept_parameters(documents.view("one-round2")).lambdas == [1, 1]
    assert session.reached(documents.view("one-round2"), "round2")
    with pytest.raises(CampaignEndedError, match="stopped"):
        session.reached(documents.view("one-aborted"), "done")


def test_the_client_refuses_a_view_signed_by_another_key(documents: Documents) -> None:
    relay = Ed25519PrivateKey.generate()
    view = documents.view("one-round1")
    resigned = view.model_copy(update={"signatures": sign_view(relay, view)})
    with pytest.raises(VerificationError, match=r"server signature \(campaign\)"):
        documents.session().accept_campaign(resigned, _hpke(documents))


def test_the_client_refuses_a_swapped_key(documents: Documents) -> None:
    """What a malicious relay does on first contact: its own HPKE key, under a consistent
    key id, in both the view and the key config."""
    attacker = key_config(generate_private_key())
    swapped = documents.view("one-round1", key_id=attacker.key_id,
                             hpke_config=attacker.model_dump(mode="json"))
    with pytest.raises(VerificationError, match=r"server signature \(campaign\)"):
        documents.session().accept_campaign(swapped, attacker)
    # Trust on first use: without the server key the swap goes unnoticed.
    tofu = documents.session(server_key=None)
    assert tofu.accept_campaign(swapped, attacker).key_id == attacker.key_id


def test_the_client_refuses_parameters_of_another_document(documents: Documents) -> None:
    session = documents.session()
    session.accept_campaign(documents.view("one-round1"), _hpke(documents))
    session.level_index = 0
    honest = documents.raw["one-round2"]
    # Changed parameters under a recomputed hash, keeping the honest signatures.
    changed = CampaignView.model_validate(honest).parameters
    assert changed is not None
    changed = changed.model_copy(update={"lambdas": [1.0, 0.5]})
    forged = documents.view("one-round2", parameters=changed.model_dump(mode="json"),
                            parameters_hash=changed.hash_hex())
    with pytest.raises(VerificationError, match=r"server signature \(parameters\)"):
        session.accept_parameters(forged)
    # Another campaign's signed parameters statement does not carry over.
    signatures = {**honest["signatures"],
                  "parameters": documents.raw["two-round2"]["signatures"]["parameters"]}
    with pytest.raises(VerificationError, match=r"server signature \(parameters\)"):
        session.accept_parameters(documents.view("one-round2", signatures=signatures))
    assert session.parameters is None  # nothing was accepted


def test_the_client_refuses_a_forged_ending(documents: Documents) -> None:
    session = documents.session()
    round2 = documents.raw["one-round2"]
    forged = documents.view("one-round2", phase="aborted", end_reason="stopped")
    with pytest.raises(VerificationError, match=r"server signature \(end\)"):
        session.reached(forged, "done")
    # ... also with the end signature of another campaign that really was aborted.
    borrowed = {**round2["signatures"], "end": documents.raw["two-aborted"]["signatures"]["end"]}
    with pytest.raises(VerificationError, match=r"server signature \(end\)"):
        session.reached(documents.view("one-round2", phase="aborted", end_reason="stopped",
                                       signatures=borrowed), "done")
    # Without the server key a forged ending is believed.
    with pytest.raises(CampaignEndedError):
        documents.session(server_key=None).reached(forged, "done")


def test_a_malformed_server_key_is_a_client_error() -> None:
    for text in ("", "not base64!", b64url_encode(bytes(31))):
        with pytest.raises(ClientError, match="server_key"):
            UserSession("one", server_key=text)


# --- the server's key -------------------------------------------------------------------------


def test_the_key_file_is_private_and_reused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    path = Path(settings.signing_key_path)
    assert not path.exists()
    with TestClient(create_app(settings)) as client:
        first = client.get("/v1/signing-key", headers=ADMIN).json()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.parent.parent == Path(settings.key_directory)
    with TestClient(create_app(settings)) as client:
        again = client.get("/v1/signing-key", headers=ADMIN).json()
    assert again == first and first["algorithm"] == "Ed25519"
    # A campaign named after the key file cannot touch it (campaign keys are <id>.pem).
    with TestClient(create_app(settings)) as client:
        body = {**_campaign_body("document-signing-key"), "insecure_parameters": None}
        assert client.post("/v1/campaigns", json=body, headers=ADMIN).status_code == 201
        assert client.get("/v1/signing-key", headers=ADMIN).json() == first


def test_the_signing_key_document_needs_the_admin_token(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        assert client.get("/v1/signing-key").status_code == 401
        refused = client.get("/v1/signing-key", headers=SHUFFLER)
        assert refused.status_code == 403
        assert refused.headers["content-type"] == "application/problem+json"
        assert client.get("/v1/signing-key", headers=ADMIN).status_code == 200


def test_a_configured_key_file_is_used(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    from segshuffle.crypto.invitations import issuer_key_pem, write_private_file

    path = tmp_path / "elsewhere.pem"
    write_private_file(path, [issuer_key_pem(key)])
    settings = make_settings(tmp_path, signing_key_file=str(path))
    with TestClient(create_app(settings)) as client:
        answer = client.get("/v1/signing-key", headers=ADMIN).json()
    assert answer["public_key"] == public_key_text(key)


def test_an_unusable_key_file_stops_the_server(tmp_path: Path) -> None:
    wrong_type = tmp_path / "x25519.pem"
    save_private_key(wrong_type, generate_private_key())
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key\n")
    unreadable = tmp_path / "directory.pem"
    unreadable.mkdir()
    for path, reason in ((wrong_type, "not an Ed25519 key"),
                         (garbage, "not an unencrypted PEM"), (unreadable, "cannot read")):
        with pytest.raises(SigningKeyError, match=reason) as refused:
            create_app(make_settings(tmp_path, signing_key_file=str(path)))
        assert "\n" not in str(refused.value)
    assert garbage.read_text() == "not a key\n"  # never replaced


# --- segshuffle admin signing-key: bad input --------------------------------------------------


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["--server", "http://127.0.0.1:9"], None, "needs a token: set SEGSHUFFLE_ADMIN_TOKEN"),
    (["--server", "ftp://example"], "admin-token-0123456789", "must be an http"),
    (["--server", "http://127.0.0.1:9", "--token-file", "/nonexistent/token"], None,
     "cannot read --token-file"),
    (["--server", "http://127.0.0.1:9", "--timeout", "2"], "admin-token-0123456789",
     "cannot reach the server"),
])
def test_signing_key_command_bad_input(argv: list[str], env: str | None, message: str,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SEGSHUFFLE_ADMIN_TOKEN", raising=False)
    if env is not None:
        monkeypatch.setenv("SEGSHUFFLE_ADMIN_TOKEN", env)
    assert main(["admin", "signing-key", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1


def test_signing_key_command_json_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The answer of a real server app, served through httpx's mock transport."""
    import httpx

    with TestClient(create_app(make_settings(tmp_path))) as client:
        def relay(request: httpx.Request) -> httpx.Response:
            answer = client.get(request.url.path, headers=dict(request.headers))
            return httpx.Response(answer.status_code, content=answer.content,
                                  headers=answer.headers)

        def get(url: str, **options: Any) -> httpx.Response:
            with httpx.Client(transport=httpx.MockTransport(relay)) as http:
                return http.get(url, headers=options.get("headers"))

        monkeypatch.setattr(httpx, "get", get)
        token = tmp_path / "token"
        token.write_text(ADMIN["Authorization"].removeprefix("Bearer ") + "\n")
        assert main(["admin", "signing-key", "--server", "http://server", "--token-file",
                     str(token), "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        expected = client.get("/v1/signing-key", headers=ADMIN).json()["public_key"]
        assert printed == {"server": "http://server", "algorithm": "Ed25519",
                           "public_key": expected}
        token.write_text("wrong-token-0123456789\n")
        assert main(["admin", "signing-key", "--server", "http://server", "--token-file",
                     str(token)]) == 2
        assert "401" in capsys.readouterr().err
