"""The SDK checks what the server publishes and refuses, with a clear error, anything that
would not protect the user's level, or that does not match what round 1 pinned."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest

from segshuffle.client import Client, VerificationError
from segshuffle.client.session import UserSession
from segshuffle.client.verify import verify_campaign, verify_parameters
from segshuffle.crypto.documents import sign_view
from segshuffle.crypto.invitations import load_issuer_key
from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population
from segshuffle.wire.models import CampaignView, HpkeConfig, RoundStatus

from .test_e2e_support import run_rounds

pytestmark = pytest.mark.slow  # both services as real processes

CID = "verify"
USERS = 60


@dataclass
class Published:
    stack: LocalStack
    view: CampaignView
    hpke: HpkeConfig


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    with LocalStack(tmp_path_factory.mktemp("verify"), min_users=2) as stack:
        stack.create_campaign({"id": CID, "domain_size": 10, "set_size": 2,
                               "levels": [0.5, 2.0], "min_users": 20, "delta": 1e-4})
        rng = np.random.default_rng(2)
        sets = [list(rng.choice(10, size=2, replace=False)) for _ in range(USERS)]
        population = Population.with_shares(stack.shuffler_url, CID, sets,
                                            [0.5, 0.5], seed=4, server_key=stack.server_key,
                                            invitations=stack.invitations(CID, len(sets)))
        run_rounds(population, 1)
        stack.release(CID, 1)
        view = CampaignView.model_validate(
            httpx.get(f"{stack.server_url}/v1/campaigns/{CID}").json())
        hpke = HpkeConfig.model_validate(
            httpx.get(f"{stack.server_url}/v1/campaigns/{CID}/hpke-config").json())
        yield Published(stack, view, hpke)


def _tampered(view: CampaignView, *, rehash: bool = True, **changes: Any) -> CampaignView:
    parameters = view.parameters
    assert parameters is not None
    forged = parameters.model_copy(update=changes)
    return view.model_copy(update={
        "parameters": forged,
        "parameters_hash": forged.hash_hex() if rehash else view.parameters_hash,
    })


def _verify(view: CampaignView, original: CampaignView, level: int = 0) -> None:
    verify_parameters(view, level_index=level, key_id=original.key_id,
                      config_hash=original.config_hash)


def test_genuine_parameters_pass(published: Published) -> None:
    view = published.view
    key = verify_campaign(view, published.hpke, CID)
    assert key.key_id == view.key_id
    for level in (0, 1):
        parameters = verify_parameters(view, level_index=level, key_id=view.key_id,
                                       config_hash=view.config_hash)
        assert parameters.accounting_users == 54  # ceil(0.9 * 60)


def test_full_rate_without_blanket_is_refused(published: Published) -> None:
    view = published.view
    assert view.parameters is not None
    forged = _tampered(view, lambdas=[1.0, 1.0], m=0.0, blanket_slots=0,
                       messages_per_user=view.parameters.set_size)
    with pytest.raises(VerificationError, match=r"would not protect level 0\.5"):
        _verify(forged, view)


def test_raised_rate_for_one_level_is_refused(published: Published) -> None:
    view = published.view
    assert view.parameters is not None
    lambdas = list(view.parameters.lambdas)
    lambdas[0] = min(1.0, lambdas[0] * 1.5 + 0.05)
    forged = _tampered(view, lambdas=lambdas)
    with pytest.raises(VerificationError, match="would not protect"):
        _verify(forged, view, level=0)


def test_inflated_user_count_is_refused(published: Published) -> None:
    view = published.view
    assert view.parameters is not None
    forged = _tampered(view, accounting_users=view.parameters.accounting_users * 10)
    with pytest.raises(VerificationError, match="user counts"):
        _verify(forged, view)
    # Consistent but inflated counts pass the consistency check; what holds the server to
    # its n_min is the shuffler's release threshold, which the client checks as well.
    forged = _tampered(view, users=6000, accounting_users=5400, honest_users=5400)
    session = UserSession(CID)
    session.parameters = verify_parameters(forged, level_index=1, key_id=view.key_id,
                                           config_hash=view.config_hash)
    status = RoundStatus(campaign_id=CID, round=2, participants=0, required=54,
                         released=False)
    with pytest.raises(VerificationError, match="would release round 2 with 54"):
        session.check_release_threshold(status)


def test_hash_key_and_configuration_pins(published: Published) -> None:
    view = published.view
    forged = _tampered(view, rehash=False, lambdas=[1.0, 1.0])
    with pytest.raises(VerificationError, match="parameters_hash does not match"):
        _verify(forged, view)
    other_key = _tampered(view, key_id="0123456789abcdef")
    with pytest.raises(VerificationError, match="key id"):
        _verify(other_key, view)
    with pytest.raises(VerificationError, match="configuration changed"):
        verify_parameters(view, level_index=0, key_id=view.key_id, config_hash="0" * 64)
    insecure = _tampered(view, insecure=True)
    with pytest.raises(VerificationError, match="insecure"):
        _verify(insecure, view)
    wrong_hpke = published.hpke.model_copy(update={"key_id": "0123456789abcdef"})
    with pytest.raises(VerificationError):
        verify_campaign(view, wrong_hpke, CID)
    bad_config = view.model_copy(update={"config_hash": "f" * 64})
    with pytest.raises(VerificationError, match="config_hash"):
        verify_campaign(bad_config, published.hpke, CID)


def test_blanket_mode_and_message_geometry_are_checked(published: Published) -> None:
    view = published.view
    p = view.parameters
    assert p is not None and view.config.blanket_mode == "slots" == p.blanket_mode
    # parameters for the other mode, geometry consistent with that mode: still refused
    domain = p.privacy_domain_size
    other_mode = _tampered(view, blanket_mode="independent", blanket_slots=domain,
                           messages_per_user=p.set_size + domain)
    with pytest.raises(VerificationError, match=r"blanket mode \(independent, the campaign "
                                                r"uses slots\)"):
        _verify(other_mode, view)
    for wrong in (p.messages_per_user + 1, p.messages_per_user - 1, p.set_size + domain):
        forged = _tampered(view, messages_per_user=wrong)
        with pytest.raises(VerificationError, match=r"inconsistent.*messages per user"):
            _verify(forged, view)
    forged = _tampered(view, blanket_slots=p.blanket_slots + 1)
    with pytest.raises(VerificationError, match="blanket rate"):
        _verify(forged, view)


def test_live_client_refuses_and_sends_nothing(published: Published) -> None:
    stack = published.stack
    real = httpx.Client(timeout=30)
    submissions: list[str] = []
    # The forger is the server itself, which signs what it publishes: its signatures hold,
    # and the client refuses the parameters on the accountant's verdict alone.
    server_key = load_issuer_key(stack.directory / "server-keys" / "signing"
                                 / "document-signing-key.pem")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/submissions"):
            submissions.append(request.url.path)
        upstream = real.request(request.method, str(request.url), headers=request.headers,
                                content=request.content)
        content = upstream.content
        if request.method == "GET" and request.url.path == f"/v1/campaigns/{CID}":
            view = CampaignView.model_validate_json(content)
            if view.parameters is not None:  # the attack: full rate, no blanket
                forged = _tampered(view, lambdas=[1.0, 1.0], m=0.0, blanket_slots=0,
                                   messages_per_user=view.parameters.set_size)
                forged = forged.model_copy(update={"signatures": sign_view(server_key, forged)})
                content = json.dumps(forged.model_dump(mode="json")).encode()
        return httpx.Response(upstream.status_code, content=content,
                              headers={"content-type": upstream.headers["content-type"]})

    with Client(stack.shuffler_url, CID, server_key=stack.server_key,
                http=httpx.Client(transport=httpx.MockTransport(handler))) as client:
        client.campaign()
        client.enroll(stack.invitations(CID, 1)[0])
        client.session.level_index = 0  # a level-0.5 user who joined round 1 elsewhere
        with pytest.raises(VerificationError, match=r"would not protect level 0\.5"):
            client.submit_data([1, 2])
    assert submissions == []
    real.close()


def _with_default_delta(view: CampaignView, delta: float) -> tuple[CampaignView, str]:
    """The same campaign as if it had left delta unset, with ``delta`` published."""
    assert view.parameters is not None
    config = view.config.model_copy(update={"delta": None})
    config_hash = config.hash_hex()
    forged = view.parameters.model_copy(update={"delta": delta, "config_hash": config_hash})
    return view.model_copy(update={"config": config, "config_hash": config_hash,
                                   "parameters": forged,
                                   "parameters_hash": forged.hash_hex()}), config_hash


def test_default_delta_follows_the_documented_rule(published: Published) -> None:
    view = published.view
    assert view.parameters is not None
    honest, config_hash = _with_default_delta(view, 0.01 / view.parameters.users)
    verify_parameters(honest, level_index=0, key_id=view.key_id, config_hash=config_hash)
    # A campaign that leaves delta unset does not let the server pick any delta: 0.3
    # with no blanket, or 0.01 at full rate, used to pass.
    for delta, changes in ((0.3, {"m": 0.0, "blanket_slots": 0,
                                  "messages_per_user": view.parameters.set_size}),
                           (0.01, {"lambdas": [1.0, 1.0]})):
        forged, config_hash = _with_default_delta(view, delta)
        forged = _tampered(forged, **changes)
        with pytest.raises(VerificationError, match="delta"):
            verify_parameters(forged, level_index=1, key_id=view.key_id,
                              config_hash=config_hash)


def test_delta_above_the_clients_ceiling_is_refused(published: Published) -> None:
    view = published.view
    with pytest.raises(VerificationError, match="ceiling"):
        verify_parameters(view, level_index=0, key_id=view.key_id,
                          config_hash=view.config_hash, delta_ceiling=1e-5)


def test_raised_delta_is_refused(published: Published) -> None:
    view = published.view
    with pytest.raises(VerificationError, match="delta"):
        _verify(_tampered(view, delta=2e-4), view)


def test_another_levels_weakness_is_refused_by_every_client(published: Published) -> None:
    # The server raises level 0's rate only; a client at level 1 must refuse too, or the
    # server learns who sits at level 0 from who drops out.
    view = published.view
    assert view.parameters is not None
    lambdas = list(view.parameters.lambdas)
    lambdas[0] = 1.0
    forged = _tampered(view, lambdas=lambdas)
    assert view.parameters.lambdas[0] < 1.0  # the honest level-0 rate is below full signal
    with pytest.raises(VerificationError, match=r"would not protect level 0\.5"):
        _verify(forged, view, level=1)


def test_lowered_blanket_is_refused(published: Published) -> None:
    view = published.view
    assert view.parameters is not None
    m = view.parameters.m / 4
    forged = _tampered(view, m=m, blanket_slots=math.ceil(m),
                       messages_per_user=view.parameters.set_size + math.ceil(m))
    with pytest.raises(VerificationError, match="would not protect"):
        _verify(forged, view, level=1)


def test_inflated_slots_or_messages_are_refused(published: Published) -> None:
    view = published.view
    assert view.parameters is not None
    for changes in ({"blanket_slots": view.parameters.blanket_slots + 5},
                    {"messages_per_user": view.parameters.messages_per_user + 5},
                    {"m": 5000.0, "blanket_slots": 5000, "messages_per_user": 5002}):
        with pytest.raises(VerificationError, match=r"blanket rate|messages per user"):
            _verify(_tampered(view, **changes), view)
