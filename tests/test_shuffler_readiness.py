"""The shuffler is not ready while a round holding messages has lost its key:
``/readyz`` answers 503 naming the campaign and round, and the round's status
says why."""

from __future__ import annotations

from pathlib import Path

from .observability_support import CID, USERS, running_services, submit_levels


def test_a_missing_round_key_makes_the_shuffler_unready(tmp_path: Path) -> None:
    with running_services(tmp_path) as services:
        submit_levels(services)
        assert services.shuffler.get("/readyz").status_code == 200
        status = services.shuffler.get(f"/v1/campaigns/{CID}/rounds/1").json()
        assert status["participants"] == USERS and status["key_missing"] is False
        keys = list((tmp_path / "shuffler.sqlite3.keys").glob("round-*.key")) or \
            list(tmp_path.rglob("round-*.key"))
        assert len(keys) == 1
        keys[0].unlink()
        answer = services.shuffler.get("/readyz")
        assert answer.status_code == 503
        assert answer.headers["content-type"].startswith("application/problem+json")
        problem = answer.json()
        assert f"campaign {CID!r} round 1" in problem["detail"]
        assert problem["missing_round_keys"] == [{"campaign_id": CID, "round": 1}]
        status = services.shuffler.get(f"/v1/campaigns/{CID}/rounds/1").json()
        assert status["key_missing"] is True and "round key is missing" in status["last_error"]
