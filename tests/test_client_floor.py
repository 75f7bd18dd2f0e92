"""Sharing verdicts on identical public documents among the users of one process
(segshuffle/client/verdicts.py, the session's ``Received`` documents), without weakening
any check: the same bytes and settings share a verdict, anything else is checked in full,
and what differs between users (signatures, pins, levels) is checked per user."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from segshuffle.client import session as session_module
from segshuffle.client.aio import AsyncClient
from segshuffle.client.errors import ClientError, VerificationError
from segshuffle.client.policy import ClientPolicy
from segshuffle.client.session import PublicCache, Received, UserSession, receive
from segshuffle.client.verdicts import VERDICTS, Verdicts
from segshuffle.crypto.documents import sign_view
from segshuffle.wire.models import CampaignView, HpkeConfig, b64url_encode

from .vector_documents import VECTORS, vector_key_config, vector_view

SIGNING_KEY = Ed25519PrivateKey.generate()
SERVER_KEY = b64url_encode(SIGNING_KEY.public_key().public_bytes(Encoding.Raw,
                                                                 PublicFormat.Raw))


def _documents() -> tuple[dict[str, Any], dict[str, Any]]:
    """A signed round-2 view (JSON) that the default policy accepts, and its key config."""
    case = next(c for c in VECTORS["parameters"] if c["client_accepts"])
    hpke = vector_key_config()
    view = vector_view(case)
    signed = view.model_copy(update={"signatures": sign_view(SIGNING_KEY, view)})
    return signed.model_dump(mode="json"), hpke.model_dump(mode="json")


VIEW, HPKE = _documents()
CAMPAIGN = VIEW["id"]


def _received(model: type[Any], document: dict[str, Any], *, indent: int | None = None) -> Any:
    """``document`` as a client receives it: parsed from the bytes of an answer."""
    body = json.dumps(document, indent=indent).encode()
    return receive(model, httpx.Response(200, content=body), "test")


class Calls:
    """A module function wrapped to count its calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.count = 0
        original: Callable[..., Any] = getattr(module, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


@pytest.fixture(autouse=True)
def _fresh_verdicts() -> Iterator[None]:
    VERDICTS.clear()
    yield
    VERDICTS.clear()


def _user(**options: Any) -> UserSession:
    return UserSession(CAMPAIGN, server_key=options.pop("server_key", SERVER_KEY), **options)


# -- the campaign ----------------------------------------------------------------------------
def test_users_share_the_campaign_verdict_on_the_same_bytes(monkeypatch) -> None:
    checks = Calls(monkeypatch, session_module, "verify_campaign")
    signatures = Calls(monkeypatch, session_module, "verify_campaign_signature")
    view, hpke = _received(CampaignView, VIEW), _received(HpkeConfig, HPKE)
    for _ in range(3):
        _user().accept_campaign(view, hpke)
    assert checks.count == 1
    assert signatures.count == 3  # every user checks the server's signature itself
    # The same bytes fetched again (another object, the same digest): still shared.
    _user().accept_campaign(_received(CampaignView, VIEW), _received(HpkeConfig, HPKE))
    assert checks.count == 1
    # Other bytes, even of an equal document, are checked in full.
    _user().accept_campaign(_received(CampaignView, VIEW, indent=1), hpke)
    _user().accept_campaign(view, _received(HpkeConfig, HPKE, indent=1))
    assert checks.count == 3


def test_models_without_their_bytes_are_checked_in_full(monkeypatch) -> None:
    checks = Calls(monkeypatch, session_module, "verify_campaign")
    view, hpke = CampaignView.model_validate(VIEW), HpkeConfig.model_validate(HPKE)
    for _ in range(2):
        _user().accept_campaign(view, hpke)
    assert checks.count == 2


def test_a_tampered_document_is_refused_after_an_honest_one() -> None:
    _user().accept_campaign(_received(CampaignView, VIEW), _received(HpkeConfig, HPKE))
    tampered = {**VIEW, "config": {**VIEW["config"], "min_users": 1000}}
    with pytest.raises(VerificationError) as refused:
        _user().accept_campaign(_received(CampaignView, tampered),
                                _received(HpkeConfig, HPKE))
    assert refused.value.check == "config_hash"


def test_a_users_own_settings_are_part_of_the_verdict() -> None:
    view, hpke = _received(CampaignView, VIEW), _received(HpkeConfig, HPKE)
    _user().accept_campaign(view, hpke)
    strict = ClientPolicy(min_users=VIEW["config"]["min_users"] + 1)
    with pytest.raises(VerificationError) as refused:
        _user(policy=strict).accept_campaign(view, hpke)
    assert refused.value.check == "min_users"
    with pytest.raises(VerificationError) as refused:
        _user(min_fake_tolerance=0.5).accept_campaign(view, hpke)
    assert refused.value.check == "fake_tolerance"
    with pytest.raises(VerificationError) as refused:
        UserSession("another", server_key=SERVER_KEY).accept_campaign(view, hpke)
    assert refused.value.check == "campaign"


def test_signatures_and_pins_are_not_shared() -> None:
    view, hpke = _received(CampaignView, VIEW), _received(HpkeConfig, HPKE)
    _user().accept_campaign(view, hpke)
    other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw,
                                                                   PublicFormat.Raw)
    with pytest.raises(VerificationError) as refused:
        _user(server_key=b64url_encode(other)).accept_campaign(view, hpke)
    assert refused.value.check == "signature"
    with pytest.raises(VerificationError) as refused:
        _user(key_id="0" * 16).accept_campaign(view, hpke)
    assert refused.value.check == "key"


def test_a_refusal_is_not_remembered(monkeypatch) -> None:
    checks = Calls(monkeypatch, session_module, "verify_campaign")
    tampered = _received(CampaignView, {**VIEW, "config_hash": "0" * 64})
    for _ in range(2):
        with pytest.raises(VerificationError):
            _user().accept_campaign(tampered, _received(HpkeConfig, HPKE))
    assert checks.count == 2 and len(VERDICTS) == 0


# -- the parameters --------------------------------------------------------------------------
def _at_level(level: int, view: Received[CampaignView]) -> UserSession:
    user = _user()
    user.accept_campaign(view, _received(HpkeConfig, HPKE))
    user.level_index = level
    return user


def test_users_of_a_level_share_the_parameter_verdict(monkeypatch) -> None:
    checks = Calls(monkeypatch, session_module, "verify_parameters")
    signatures = Calls(monkeypatch, session_module, "verify_parameters_signature")
    view = _received(CampaignView, VIEW)
    for level in (0, 0, 1, 1, 2):
        parameters = _at_level(level, view).accept_parameters(view)
        assert parameters is view.value.parameters
    assert checks.count == 3  # once per level
    assert signatures.count == 5  # once per user
    _at_level(0, view).accept_parameters(view.value)  # without its bytes: in full
    assert checks.count == 4


def test_the_parameter_verdict_depends_on_the_round1_pins() -> None:
    view = _received(CampaignView, VIEW)
    _at_level(0, view).accept_parameters(view)
    pinned_elsewhere = _at_level(0, view)
    pinned_elsewhere.config_hash = "0" * 64  # as if round 1 had pinned another document
    with pytest.raises(VerificationError) as refused:
        pinned_elsewhere.accept_parameters(view)
    assert refused.value.check == "config_hash"


def test_an_unknown_level_is_refused_though_other_levels_passed() -> None:
    view = _received(CampaignView, VIEW)
    _at_level(0, view).accept_parameters(view)
    user = _at_level(0, view)
    user.level_index = len(VIEW["config"]["levels"])
    with pytest.raises(ClientError, match="level index"):
        user.accept_parameters(view)


# -- the memo --------------------------------------------------------------------------------
def test_verdicts_keep_successes_only_and_stay_bounded() -> None:
    verdicts = Verdicts(maxsize=2)
    calls: list[str] = []

    def check(name: str) -> Callable[[], str]:
        def run() -> str:
            calls.append(name)
            return name.upper()
        return run

    assert [verdicts.settle(k, check(k)) for k in ("a", "a", "b", "c", "a")] == \
        ["A", "A", "B", "C", "A"]
    assert calls == ["a", "b", "c", "a"] and len(verdicts) == 2  # "a" was evicted first

    def refuse() -> str:
        calls.append("refused")
        raise VerificationError("no", check="test")

    for _ in range(2):
        with pytest.raises(VerificationError):
            verdicts.settle("r", refuse)
    assert calls.count("refused") == 2
    with pytest.raises(ValueError):
        Verdicts(maxsize=0)


# -- through the client ------------------------------------------------------------------------
def test_clients_share_verdicts_through_the_bytes_they_fetch(monkeypatch) -> None:
    checks = Calls(monkeypatch, session_module, "verify_campaign")
    served = {"view": json.dumps(VIEW).encode()}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/hpke-config"):
            return httpx.Response(200, json=HPKE)
        return httpx.Response(200, content=served["view"])

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            cache = PublicCache(ttl=0.0)  # every user fetches the documents again

            async def user() -> None:
                client = AsyncClient("http://shuffler", CAMPAIGN, http=http, cache=cache,
                                     server_key=SERVER_KEY)
                await client.campaign()

            await user()
            await user()
            assert checks.count == 1  # the same bytes twice
            served["view"] = json.dumps(VIEW, indent=2).encode()
            await user()
            assert checks.count == 2

    asyncio.run(run())


def test_the_campaign_path_follows_the_campaign_id() -> None:
    user = UserSession("a b")
    assert user.campaign_path == "/v1/campaigns/a%20b"
    user.campaign_id = "c"
    assert user.round_path(2) == "/v1/campaigns/c/rounds/2"


def test_users_missing_the_cache_at_once_fetch_a_document_once() -> None:
    """Concurrent misses of one entry share one download; a failed download is not shared
    (each user then fetches on its own, with its own retries)."""
    gets: list[str] = []
    fail_first = {"view": True}

    async def answer(request: httpx.Request) -> httpx.Response:
        gets.append(request.url.path)
        await asyncio.sleep(0.01)  # every user is in flight before the first answer
        if request.url.path.endswith("/hpke-config"):
            return httpx.Response(200, json=HPKE)
        if fail_first["view"]:
            fail_first["view"] = False
            return httpx.Response(400, json={"detail": "refused once"})
        return httpx.Response(200, json=VIEW)

    async def run() -> list[BaseException | None]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            cache = PublicCache(ttl=60)
            clients = [AsyncClient("http://shuffler", CAMPAIGN, http=http, cache=cache,
                                   server_key=SERVER_KEY) for _ in range(8)]
            outcomes = await asyncio.gather(*(c.campaign() for c in clients),
                                            return_exceptions=True)
            return [o if isinstance(o, BaseException) else None for o in outcomes]

    outcomes = asyncio.run(run())
    # The first view download failed: its user sees the refusal, the others fetched again
    # on their own (and shared nothing of the failure); the key config was fetched once.
    assert [type(o).__name__ for o in outcomes if o is not None] == ["ServiceError"]
    assert gets.count(f"/v1/campaigns/{CAMPAIGN}/hpke-config") == 1
    assert gets.count(f"/v1/campaigns/{CAMPAIGN}") == 8
