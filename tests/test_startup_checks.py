"""Readiness that means it, and stores that are refused when damaged (R5, R6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from segshuffle.services.server import create_app
from segshuffle.services.server import storage as server_storage
from segshuffle.services.shuffler import storage as shuffler_storage
from segshuffle.services.sqlite_base import CorruptDatabaseError

from .test_server_support import ADMIN, make_settings, run_serve_server

FACTORIES: dict[str, Any] = {"server": server_storage.Repository,
                             "shuffler": shuffler_storage.Storage}
CAMPAIGN = {"id": "c1", "domain_size": 4, "set_size": 1, "levels": [1, 2], "min_users": 3}


def _populated(tmp_path: Path, service: str) -> Path:
    path = tmp_path / f"{service}.sqlite3"
    store = FACTORIES[service](path)
    if service == "server":
        for i in range(200):
            store.create_campaign(f"c{i}", {"id": f"c{i}", "pad": "x" * 400}, "h", "k", b"pk")
    else:
        for i in range(200):
            store.add_token("c", i.to_bytes(32, "big"))
    store.close()
    return path


@pytest.mark.parametrize("service", sorted(FACTORIES))
def test_a_truncated_database_is_refused(tmp_path: Path, service: str) -> None:
    path = _populated(tmp_path, service)
    size = path.stat().st_size
    assert size > 8192
    with path.open("r+b") as handle:
        handle.truncate(size // 2)
    with pytest.raises(CorruptDatabaseError, match="refusing to start"):
        FACTORIES[service](path)


@pytest.mark.parametrize("service", sorted(FACTORIES))
def test_a_database_with_damaged_pages_is_refused(tmp_path: Path, service: str) -> None:
    path = _populated(tmp_path, service)
    with path.open("r+b") as handle:
        handle.seek(4096)  # the b-tree page header of page 2
        handle.write(b"\xff" * 2000)
    with pytest.raises(CorruptDatabaseError):
        FACTORIES[service](path)


@pytest.mark.parametrize("service", sorted(FACTORIES))
def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path, service: str) -> None:
    path = tmp_path / "x.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(CorruptDatabaseError, match="cannot be read"):
        FACTORIES[service](path)


def test_server_is_not_ready_when_a_campaign_key_is_lost(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/campaigns", json=CAMPAIGN, headers=ADMIN).status_code == 201
        assert client.get("/readyz").status_code == 200
    key_files = list(Path(settings.key_directory).glob("*.pem"))
    assert len(key_files) == 1
    key_files[0].unlink()
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        answer = client.get("/readyz")
        assert answer.status_code == 503
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert "c1" in answer.json()["detail"] and answer.json()["campaigns"] == ["c1"]


@pytest.mark.slow  # a subprocess importing the service stack
def test_serve_refuses_a_damaged_database_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "server.sqlite3"
    path.write_bytes(b"\x00garbage" * 1000)
    done = run_serve_server(tmp_path, "--database", str(path), "--port", "0")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be read" in lines[0], done.stderr
