"""The default client policy: a fixed delta ceiling and the shuffler's floor on min_users,
whatever the server puts in the campaign.

The old default ceiling was 1 / min_users, and min_users is the server's choice: a campaign
with min_users = 2 and delta = 0.4 passed every check of the default client.
"""

from __future__ import annotations

import pytest

from segshuffle.client import ClientError
from segshuffle.client.policy import ClientPolicy
from segshuffle.client.verify import configuration_problems
from segshuffle.core import rules
from segshuffle.wire.models import CampaignCreate

BASE = {"id": "c", "domain_size": 20, "set_size": 2, "levels": [0.5, 1, 2]}


def _checks(policy: ClientPolicy | None = None, **fields: object) -> list[str]:
    config = CampaignCreate.model_validate({**BASE, **fields}).to_config()
    return [check for check, _ in configuration_problems(config, policy or ClientPolicy())]


def test_the_default_client_refuses_two_users_and_delta_0_4() -> None:
    assert _checks(min_users=2, delta=0.4) == ["min_users", "delta"]


def test_the_default_delta_ceiling_is_fixed_whatever_min_users_the_campaign_names() -> None:
    assert rules.CLIENT_DELTA_CEILING == 1e-3
    assert ClientPolicy().delta_limit() == 1e-3
    for min_users in (10, 100, 10**6):
        assert _checks(min_users=min_users, delta=1e-3) == []
        assert _checks(min_users=min_users, delta=1.01e-3) == ["delta"]
    # the ceiling is the default delta rule at the shuffler's default floor
    assert rules.default_delta(rules.SHUFFLER_MIN_USERS) == rules.CLIENT_DELTA_CEILING


def test_the_default_client_refuses_min_users_below_the_shufflers_default_floor() -> None:
    assert rules.SHUFFLER_MIN_USERS == 10
    assert _checks(min_users=9) == ["min_users"]
    assert _checks(min_users=10) == []
    config = CampaignCreate.model_validate({**BASE, "min_users": 3}).to_config()
    (problem,) = configuration_problems(config, ClientPolicy())
    assert "at least 10" in problem[1] and "ClientPolicy(min_users=" in problem[1]


def test_an_app_sets_its_own_floor_and_ceiling() -> None:
    lower = ClientPolicy(min_users=2)
    assert _checks(lower, min_users=2, delta=1e-3) == []
    assert _checks(lower, min_users=2, delta=0.4) == ["delta"]
    wide = ClientPolicy(min_users=2, delta_ceiling=0.5)
    assert _checks(wide, min_users=2, delta=0.4) == []
    assert ClientPolicy(delta_ceiling=1e-6).delta_limit() == 1e-6
    with pytest.raises(ClientError):
        ClientPolicy(min_users=0)


def test_the_shuffler_defaults_to_the_floor_clients_expect() -> None:
    from segshuffle.services.shuffler.settings import Settings

    assert Settings.model_fields["min_users"].default == rules.SHUFFLER_MIN_USERS
