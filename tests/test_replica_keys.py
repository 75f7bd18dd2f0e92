"""Server campaign keys shared by replicas: one key directory, one database, several
processes' :class:`KeyStore` objects (docs/architecture.md, "Replicas")."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from segshuffle.crypto import generate_private_key, public_key_bytes, save_private_key
from segshuffle.crypto.hpke import key_id_for
from segshuffle.services import errors
from segshuffle.services.server.backends import open_repository
from segshuffle.services.server.decrypt import Decryptor
from segshuffle.services.server.keys import KeyStore
from segshuffle.services.server.service import ServerService
from segshuffle.services.server.storage_api import ServerStorage
from segshuffle.wire.models import CampaignCreate

BODY = {"id": "c1", "domain_size": 4, "set_size": 1, "levels": [1, 2], "min_users": 3}
SIGNING = Ed25519PrivateKey.generate()


def _replica(database: str, keys: Path) -> ServerService:
    """A server replica's service layer: its own storage handle and its own KeyStore."""
    repository: ServerStorage = open_repository(database, synchronous="NORMAL")
    return ServerService(repository, KeyStore(keys), Decryptor(workers=1),
                         signing_key=SIGNING)


def _matches_row(service: ServerService, keys: Path, campaign_id: str) -> bool:
    """Whether a fresh KeyStore (a restarted replica) loads the key the row publishes."""
    record = service.repository.campaign(campaign_id)
    assert record is not None
    private = KeyStore(keys).get(campaign_id, record.key_id)
    return public_key_bytes(private) == record.public_key


def test_a_losing_creation_leaves_the_winners_key_in_place(tmp_path: Path) -> None:
    """Replica B's key store writes a key for a campaign replica A has just created (B
    passed its existence check before A's row was inserted): A's key must survive."""
    keys = tmp_path / "keys"
    database = str(tmp_path / "server.sqlite3")
    first, second = _replica(database, keys), _replica(database, keys)
    first.create_campaign(CampaignCreate.model_validate(BODY))
    second.keys.create("c1")  # the loser's key file, written before its insert fails
    with pytest.raises(errors.AlreadyExistsError):
        second.create_campaign(CampaignCreate.model_validate(BODY))
    assert _matches_row(first, keys, "c1")
    assert _matches_row(second, keys, "c1")
    assert len(list(keys.glob("c1~*.pem"))) == 2  # the orphan is left, unused


def test_racing_replicas_create_one_campaign_whose_key_matches(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    database = str(tmp_path / "server.sqlite3")
    replicas = [_replica(database, keys) for _ in range(4)]
    for attempt in range(15):
        campaign_id = f"race{attempt}"
        barrier = threading.Barrier(len(replicas))
        outcomes: list[str] = []

        def create(service: ServerService, campaign_id: str = campaign_id,
                   barrier: threading.Barrier = barrier,
                   outcomes: list[str] = outcomes) -> None:
            barrier.wait(timeout=10)
            try:
                service.create_campaign(CampaignCreate.model_validate(
                    {**BODY, "id": campaign_id}))
                outcomes.append("created")
            except errors.AlreadyExistsError:
                outcomes.append("exists")

        threads = [threading.Thread(target=create, args=(r,)) for r in replicas]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert sorted(outcomes) == ["created"] + ["exists"] * (len(replicas) - 1)
        assert _matches_row(replicas[0], keys, campaign_id)


def test_an_orphan_key_file_is_harmless(tmp_path: Path) -> None:
    """A key file left by a crash between the key and the row (or by a losing racer)."""
    keys = tmp_path / "keys"
    orphan = KeyStore(keys).create("c1")
    service = _replica(str(tmp_path / "server.sqlite3"), keys)
    service.create_campaign(CampaignCreate.model_validate(BODY))
    record = service.repository.campaign("c1")
    assert record is not None and record.key_id != key_id_for(orphan)
    assert _matches_row(service, keys, "c1")
    assert service.missing_keys() == []


def test_the_legacy_layout_is_read_and_checked(tmp_path: Path) -> None:
    """Deployed key directories hold ``<campaign>.pem``: loaded by the row's key id."""
    keys = tmp_path / "keys"
    store = KeyStore(keys)
    key = generate_private_key()
    save_private_key(keys / "c1.pem", key)
    assert public_key_bytes(store.get("c1", key_id_for(key))) == public_key_bytes(key)
    other = generate_private_key()
    save_private_key(keys / "c2.pem", other)
    with pytest.raises(ValueError, match="does not hold"):
        store.get("c2", key_id_for(generate_private_key()))
    with pytest.raises(OSError):
        store.get("c3", key_id_for(other))
