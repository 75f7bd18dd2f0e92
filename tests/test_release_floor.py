"""A campaign no deployment could release as asked is refused at creation, and a round held
by the shuffler's floor says so."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from segshuffle.services.server import create_app
from segshuffle.services.shuffler.release import required_participants, threshold_reason
from segshuffle.wire.models import CampaignCreate, CampaignView

from .test_server_support import ADMIN, make_settings

CAMPAIGN = {"id": "floor", "domain_size": 4, "set_size": 1, "levels": [1.0, 2.0]}


def test_the_server_refuses_min_users_below_the_shufflers_floor(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, shuffler_min_users=10))
    with TestClient(app) as client:
        refused = client.post("/v1/campaigns", headers=ADMIN,
                              json={**CAMPAIGN, "min_users": 3})
        assert refused.status_code == 422, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "below the shuffler's floor of 10" in refused.json()["detail"]
        assert client.post("/v1/campaigns", headers=ADMIN,
                           json={**CAMPAIGN, "min_users": 10}).status_code == 201


def test_without_the_floor_the_server_creates_the_campaign(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        assert client.post("/v1/campaigns", headers=ADMIN,
                           json={**CAMPAIGN, "min_users": 3}).status_code == 201


def _view(min_users: int) -> CampaignView:
    from segshuffle.crypto import generate_private_key, key_config

    config = CampaignCreate.model_validate({**CAMPAIGN, "min_users": min_users}).to_config()
    hpke = key_config(generate_private_key())
    return CampaignView(id="floor", phase="round1", config=config,
                        config_hash=config.hash_hex(), key_id=hpke.key_id, hpke_config=hpke)


def test_the_round_status_names_what_sets_the_threshold() -> None:
    view = _view(3)
    required = required_participants(view, 1, 10, None)
    assert required == 10
    assert "the shuffler's own floor of 10" in threshold_reason(view, 1, 10, required)
    assert "min_users of 3" in threshold_reason(view, 1, 2, required_participants(view, 1, 2,
                                                                                 None))
    required = required_participants(view, 2, 2, 100)
    assert required == 90 and "n_min = 90" in threshold_reason(view, 2, 2, required)
