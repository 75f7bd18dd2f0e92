"""Accounting that names its trust assumption: a campaign tolerates a fraction f of fake or
colluding round-2 participants, every epsilon is accounted with the h = ceil((1 - f) n_min)
honest users that remain, and the client holds the server to it."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segshuffle.cli.main import main as cli_main
from segshuffle.client.errors import ClientError, VerificationError
from segshuffle.client.session import UserSession
from segshuffle.client.verify import verify_campaign, verify_parameters
from segshuffle.core import accounting, rules
from segshuffle.core.optimizer import optimize
from segshuffle.core.simulate import item_holders, simulate_counts
from segshuffle.crypto import generate_private_key, key_config
from segshuffle.services.server.aggregation import decode_results, publish_parameters
from segshuffle.wire.models import (
    CampaignConfig,
    CampaignCreate,
    CampaignView,
    PrivacyReport,
    PublishedParameters,
)

N = 2000
F = 0.2
LEVELS = [1.0, 2.0]
DOMAIN = 50
TAU = 0.1
N_MIN = 1800  # ceil(0.9 * 2000)
H = 1440  # ceil(0.8 * 1800)

tolerances = st.decimals(min_value=0, max_value="0.999", places=3).map(float)


# --- the rule ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(users=st.integers(1, 10**9), tau=tolerances, f=tolerances)
def test_honest_users_is_exact_on_the_shortest_decimals(users: int, tau: float, f: float):
    n_min = math.ceil((1 - Fraction(repr(tau))) * users)
    expected = max(1, math.ceil((1 - Fraction(repr(f))) * max(1, n_min)))
    assert rules.honest_users(users, tau, f) == expected
    # The worst released batch: n_min participants, floor(f n_min) of them fake.
    n_min = rules.accounting_users(users, tau)
    assert expected == n_min - math.floor(Fraction(repr(f)) * n_min)


@settings(max_examples=200, deadline=None)
@given(users=st.integers(1, 10**6), tau=tolerances, f=tolerances, g=tolerances)
def test_honest_users_is_monotone_and_n_min_without_fakes(users: int, tau: float, f: float,
                                                          g: float):
    n_min = rules.accounting_users(users, tau)
    assert rules.honest_users(users, tau, 0.0) == n_min
    low, high = sorted((f, g))
    assert 1 <= rules.honest_users(users, tau, high) <= rules.honest_users(users, tau, low)
    assert rules.honest_users(users, tau, f) <= rules.honest_users(users + 1, tau, f)


@settings(max_examples=100, deadline=None)
@given(n_min=st.integers(1, 10**5), f=tolerances)
def test_more_released_participants_never_leave_fewer_honest(n_min: int, f: float):
    """n2 - floor(f n2) does not decrease in n2: the worst batch is the smallest one."""
    fraction = Fraction(repr(f))
    honest = [n2 - math.floor(fraction * n2) for n2 in range(n_min, n_min + 50)]
    assert honest == sorted(honest)
    assert honest[0] == rules.honest_users(n_min, 0.0, f)


def test_honest_users_examples_and_refusals():
    assert rules.honest_users(N, TAU, F) == H
    assert rules.honest_users(100, 0.45, 0.3) == 39  # ceil(0.7 * 55) = ceil(38.5)
    assert rules.honest_users(10, 0.0, 0.7) == 3  # 0.3 * 10 is 3 exactly, not 3.0000000004
    assert rules.honest_users(1, 0.0, 0.99) == 1
    for bad in (1.0, -0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="fake tolerance"):
            rules.honest_users(N, TAU, bad)


# --- the publication accounts with h ------------------------------------------------------


def _config(fake_tolerance: float = F, **changes: Any) -> CampaignConfig:
    body = {"id": "fakes", "domain_size": DOMAIN, "set_size": 2, "levels": LEVELS,
            "min_users": 10, "dropout_tolerance": TAU, "fake_tolerance": fake_tolerance}
    return CampaignCreate.model_validate({**body, **changes}).to_config()


def _publish(config: CampaignConfig) -> PublishedParameters:
    parameters, _ = publish_parameters(config, config.hash_hex(), "0" * 16, [N // 2, N // 2])
    return parameters


@pytest.fixture(scope="module")
def honest_parameters() -> PublishedParameters:
    return _publish(_config())


@pytest.fixture(scope="module")
def ignoring_parameters() -> PublishedParameters:
    """What a server that ignores f publishes: accounted with all n_min users."""
    return _publish(_config(0.0))


def _audit(parameters: PublishedParameters, lam: float, users: int) -> float:
    """``segshuffle audit --users users ...`` through the CLI's main(), its JSON epsilon."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli_main([
            "audit", "--users", str(users), "--domain-size", str(parameters.privacy_domain_size),
            "--set-size", str(parameters.set_size), "--blanket", repr(parameters.m),
            "--lam", repr(lam), "--delta", repr(parameters.delta),
            "--blanket-mode", parameters.blanket_mode, "--json"])
    assert status == 0
    return float(json.loads(out.getvalue())["epsilon_upper"])


def test_the_published_parameters_state_the_assumption(honest_parameters):
    p = honest_parameters
    assert (p.users, p.accounting_users, p.honest_users, p.fake_tolerance) == (N, N_MIN, H, F)
    document = p.model_dump(mode="json")
    assert document["fake_tolerance"] == F and document["honest_users"] == H


def test_every_level_holds_when_f_of_the_users_withhold_their_blanket(honest_parameters,
                                                                      ignoring_parameters):
    """Acceptance: audited at the honest count h, every level's epsilon is within its level,
    and the accounting used h (at n_min the same parameters give less than was published)."""
    p = honest_parameters
    for level, lam, published in zip(p.levels, p.lambdas, p.epsilons, strict=True):
        at_honest = _audit(p, lam, H)
        assert at_honest <= level
        assert published is not None and math.isclose(at_honest, published, rel_tol=1e-6)
        assert _audit(p, lam, N_MIN) < published * (1 - 1e-6)
    # A server accounting with n_min breaks the promise once f of the users are fake.
    q = ignoring_parameters
    assert q.honest_users == N_MIN
    assert max(_audit(q, lam, H) - level
               for level, lam in zip(q.levels, q.lambdas, strict=True)) > 0


def test_a_simulated_round_with_f_fakes_keeps_exactly_the_accounted_blanket():
    """f of the n2 released participants send only null slots: the blanket of the honest rest
    is exactly what the accounting counted on in the smallest releasable batch."""
    rng = np.random.default_rng(5)
    d, s = DOMAIN, 2
    result = optimize([N / 2, N / 2], LEVELS, d, s, 5e-6, dropout_tolerance=TAU,
                      fake_tolerance=F)
    assert (result.accounting_users, result.honest_users, result.fake_tolerance) == (
        N_MIN, H, F)
    fraction = Fraction(repr(F))
    for n2 in (N_MIN, N_MIN + 7, N):
        fakes = math.floor(fraction * n2)
        honest = n2 - fakes
        assert honest >= result.honest_users
        items = np.array([rng.choice(d, size=s, replace=False) for _ in range(honest)])
        levels = rng.integers(0, len(LEVELS), size=honest)
        holders = item_holders(items, levels, len(LEVELS), d)
        counts = simulate_counts(holders, result.lambdas, result.m, rng, users=honest)
        # Honest data plus honest blanket only: the fakes' null slots decode to nothing.
        slots = math.ceil(result.m)
        assert int(counts.sum()) <= holders.sum() + honest * slots
        if n2 == N_MIN:
            assert honest == result.honest_users
    for level, lam, eps in zip(LEVELS, result.lambdas, result.epsilons, strict=True):
        assert accounting.user_level_holds(level, lam, s, 5e-6, result.honest_users, result.m,
                                           d)
        assert eps is not None and eps <= level


def test_the_privacy_report_states_f_and_h(honest_parameters):
    config = _config()
    report = decode_results(config, honest_parameters, {"level_counts": [N / 2, N / 2]},
                            [N_MIN // 2, N_MIN // 2],
                            [10] * config.privacy_domain_size)["privacy"]
    privacy = PrivacyReport.model_validate({**report, "levels": report["levels"]})
    assert (privacy.fake_tolerance, privacy.honest_users, privacy.accounting_users) == (
        F, H, N_MIN)


def test_a_legacy_parameters_document_means_no_fakes(honest_parameters):
    legacy = honest_parameters.model_dump(mode="json")
    del legacy["honest_users"], legacy["fake_tolerance"]
    parameters = PublishedParameters.model_validate(legacy)
    assert parameters.honest_users == parameters.accounting_users
    assert parameters.fake_tolerance == 0.0


# --- the client holds the server to it ------------------------------------------------------


class Campaign:
    def __init__(self, config: CampaignConfig, parameters: PublishedParameters) -> None:
        self.hpke = key_config(generate_private_key())
        self.config = config
        self.parameters = parameters.model_copy(update={"key_id": self.hpke.key_id})

    def view(self, **changes: Any) -> CampaignView:
        forged = self.parameters.model_copy(update=changes)
        return CampaignView.model_validate({
            "id": self.config.id, "phase": "round2",
            "config": self.config.model_dump(mode="json"),
            "config_hash": self.config.hash_hex(), "key_id": self.hpke.key_id,
            "hpke_config": self.hpke.model_dump(mode="json"),
            "parameters": forged.model_dump(mode="json"), "parameters_hash": forged.hash_hex()})

    def verify(self, view: CampaignView, level_index: int = 0, **options: Any):
        return verify_parameters(view, level_index=level_index, key_id=self.hpke.key_id,
                                 config_hash=self.config.hash_hex(), **options)


@pytest.fixture(scope="module")
def campaign(honest_parameters) -> Campaign:
    return Campaign(_config(), honest_parameters)


def test_the_client_accepts_the_honest_accounting(campaign):
    view = campaign.view()
    assert verify_campaign(view, campaign.hpke, view.id).key_id == campaign.hpke.key_id
    for level_index in range(len(LEVELS)):
        assert campaign.verify(view, level_index).honest_users == H
    assert campaign.verify(view, min_fake_tolerance=F).fake_tolerance == F


def test_the_client_refuses_parameters_accounted_with_n_min(campaign, ignoring_parameters):
    # The server says it counted all n_min users.
    with pytest.raises(VerificationError, match=r"honest users \(1800.*= 1440\)"):
        campaign.verify(campaign.view(honest_users=N_MIN))
    # ... or publishes the rates it chose for n_min under the right count.
    ignored = {name: getattr(ignoring_parameters, name)
               for name in ("m", "lambdas", "blanket_slots", "messages_per_user")}
    with pytest.raises(VerificationError, match=r"would not protect level 1 .*h=1440"):
        campaign.verify(campaign.view(**ignored))
    # ... or states no fake tolerance where the campaign has one.
    with pytest.raises(VerificationError, match="fake tolerance"):
        campaign.verify(campaign.view(fake_tolerance=0.0, honest_users=N_MIN))


def test_the_client_refuses_a_campaign_below_its_minimum_fake_tolerance(campaign):
    view = campaign.view()
    with pytest.raises(VerificationError, match=r"fake tolerance: .* 0.2 .* at least 0.3"):
        verify_campaign(view, campaign.hpke, view.id, min_fake_tolerance=0.3)
    with pytest.raises(VerificationError, match=r"fake tolerance: .* at least 0.3"):
        campaign.verify(view, min_fake_tolerance=0.3)
    session = UserSession(view.id, min_fake_tolerance=0.3)
    with pytest.raises(VerificationError, match="fake tolerance"):
        session.accept_campaign(view, campaign.hpke)
    assert UserSession(view.id, min_fake_tolerance=0.2).accept_campaign(view, campaign.hpke)
    for bad in (1.0, -0.1, math.nan):
        with pytest.raises(ClientError, match="min_fake_tolerance"):
            UserSession(view.id, min_fake_tolerance=bad)


@pytest.mark.parametrize("bad", [1.5, -0.1])
def test_the_client_refuses_a_campaign_with_an_impossible_fake_tolerance(campaign, bad):
    """A view whose configuration (hash recomputed) states f outside [0, 1)."""
    config = campaign.config.model_copy(update={"fake_tolerance": bad})
    view = campaign.view().model_copy(update={"config": config,
                                              "config_hash": config.hash_hex()})
    with pytest.raises(VerificationError, match=r"fake_tolerance: must be") as refused:
        verify_campaign(view, campaign.hpke, view.id)
    assert refused.value.check == "fake_tolerance"


# --- configuration and command line ---------------------------------------------------------


@pytest.mark.parametrize("bad", [1.0, -0.1, math.inf, "0.2"])
def test_the_campaign_refuses_a_bad_fake_tolerance(bad):
    from pydantic import ValidationError

    assert _config(0.5).fake_tolerance == 0.5
    with pytest.raises(ValidationError, match=r"fake_tolerance\s+Input should be"):
        _config(bad)


def test_the_configuration_hash_covers_the_fake_tolerance():
    assert _config(0.0).hash_hex() != _config(F).hash_hex()
    assert _config(0.0).model_dump(mode="json")["fake_tolerance"] == 0.0


@pytest.mark.parametrize("bad", ["1", "-0.1", "nan"])
def test_optimize_refuses_a_bad_fake_tolerance_in_one_line(bad, capsys):
    status = cli_main(["optimize", "--users", "2000", "--domain-size", "20", "--set-size", "2",
                       "--levels", "1,2", "--shares", "0.5,0.5", "--delta", "1e-6",
                       "--no-compare", f"--fake-tolerance={bad}"])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "fake tolerance" in lines[0]


def test_optimize_reports_the_honest_count(capsys):
    status = cli_main(["optimize", "--users", "2000", "--domain-size", "20", "--set-size", "2",
                       "--levels", "1,2", "--shares", "0.5,0.5", "--delta", "1e-6",
                       "--no-compare", "--fake-tolerance", "0.2", "--json"])
    assert status == 0
    payload = json.loads(capsys.readouterr().out)
    # the default dropout tolerance is the campaigns' 0.1: n_min = 1800, h = ceil(0.8 n_min)
    assert (payload["accounting_users"], payload["honest_users"], payload["fake_tolerance"]) == (
        1800, 1440, 0.2)


# --- over the server's HTTP API ---------------------------------------------------------------


def test_the_server_publishes_and_reports_the_honest_accounting(tmp_path):
    from fastapi.testclient import TestClient

    from segshuffle.core.accounting import user_epsilon
    from segshuffle.services.server import create_app

    from .test_server_support import ADMIN, Sealer, deliver, make_settings

    app = create_app(make_settings(tmp_path, allow_insecure_parameters=True))
    n, lambdas, m = 40, [0.05, 0.1], 3.0
    with TestClient(app) as client:
        refused = client.post("/v1/campaigns", headers=ADMIN, json={
            "id": "bad", "domain_size": 4, "set_size": 1, "levels": [1, 2], "min_users": 4,
            "fake_tolerance": 1.0})
        assert refused.status_code == 422
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "fake_tolerance" in refused.text
        response = client.post("/v1/campaigns", headers=ADMIN, json={
            "id": "fk", "domain_size": 4, "set_size": 1, "levels": [1, 2], "min_users": 4,
            "padding": False, "dropout_tolerance": 0.0, "fake_tolerance": 0.25,
            "insecure_parameters": {"m": m, "lambdas": lambdas}})
        assert response.status_code == 201, response.text
        view = response.json()
        assert view["config"]["fake_tolerance"] == 0.25
        deliver(client, "fk", 1, "a", {"levels": Sealer(view, 1).levels([0, 1] * (n // 2))})
        view = client.get("/v1/campaigns/fk").json()
        parameters = view["parameters"]
        assert (parameters["accounting_users"], parameters["honest_users"]) == (40, 30)
        assert parameters["fake_tolerance"] == 0.25
        for lam, eps in zip(lambdas, parameters["epsilons"], strict=True):
            assert eps == user_epsilon(lam, 1, parameters["delta"], 30, m, 4)
            assert eps < user_epsilon(lam, 1, parameters["delta"], 29, m, 4)
        sealer = Sealer(view, 2)
        values = [j % 4 for j in range(n * 2)]
        deliver(client, "fk", 2, "b", {"levels": sealer.levels([0, 1] * (n // 2)),
                                       "data": sealer.slots(values)})
        privacy = client.get("/v1/campaigns/fk/results", headers=ADMIN).json()["privacy"]
    assert (privacy["fake_tolerance"], privacy["honest_users"]) == (0.25, 30)
    assert privacy["accounting_users"] == 40


# --- real processes ---------------------------------------------------------------------------


@pytest.mark.slow  # both services as real processes, the CLI as a subprocess
def test_live_campaign_states_its_tolerance_and_clients_hold_it(tmp_path):
    import subprocess
    import sys

    from segshuffle.client import Client
    from segshuffle.testing.localstack import LocalStack
    from segshuffle.testing.population import Population

    from .test_e2e_support import run_rounds

    users, f = 60, 0.25
    rng = np.random.default_rng(8)
    sets = [list(rng.choice(DOMAIN, size=2, replace=False)) for _ in range(users)]
    with LocalStack(tmp_path, min_users=2) as stack:
        stack.create_campaign({"id": "live", "domain_size": DOMAIN, "set_size": 2,
                               "levels": LEVELS, "min_users": 20, "delta": 1e-4,
                               "dropout_tolerance": 0.0, "fake_tolerance": f})
        population = Population.with_shares(stack.shuffler_url, "live",
                                            sets, [0.5, 0.5], seed=3, server_key=stack.server_key,
                                            invitations=stack.invitations("live", users))
        run_rounds(population, 1)
        stack.release("live", 1)
        p = stack.campaign("live").parameters
        assert p is not None
        assert (p.accounting_users, p.honest_users, p.fake_tolerance) == (60, 45, f)
        for level, lam, eps in zip(p.levels, p.lambdas, p.epsilons, strict=True):
            audited = subprocess.run(
                [sys.executable, "-m", "segshuffle.cli.main", "audit", "--users", "45",
                 "--domain-size", str(p.privacy_domain_size), "--set-size", "2",
                 "--blanket", repr(p.m), "--lam", repr(lam), "--delta", repr(p.delta),
                 "--json"], capture_output=True, text=True, check=True, timeout=120)
            upper = json.loads(audited.stdout)["epsilon_upper"]
            # The guarantee itself: delta_user(E_k) <= delta at h = 45.  The audit's search
            # lands within EPSILON_RTOL above its threshold, which a lambda at its level's
            # constraint puts at the level itself.
            assert accounting.user_level_holds(level, lam, 2, p.delta, 45, p.m,
                                               p.privacy_domain_size)
            assert upper <= level * (1 + accounting.EPSILON_RTOL) and eps is not None
            assert math.isclose(upper, eps, rel_tol=1e-6)
        with (Client(stack.shuffler_url, "live", server_key=stack.server_key,
                     min_fake_tolerance=0.3) as strict,
              pytest.raises(VerificationError, match=r"requires at least 0\.3")):
            strict.campaign()
        with Client(stack.shuffler_url, "live", server_key=stack.server_key,
                    min_fake_tolerance=f) as content:
            assert content.campaign().config.fake_tolerance == f
        run_rounds(population, 2)
        stack.release("live", 2)
        privacy = stack.results("live").privacy
    assert (privacy.fake_tolerance, privacy.honest_users, privacy.accounting_users) == (f, 45, 60)
