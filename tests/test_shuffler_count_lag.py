"""Automatic release with a store whose submission counts may leave out submissions in
flight (PostgreSQL's counts in shards, ``count_lag``): where those could complete the
threshold, the service reads the committed count again after its own commit, so the
last submission to commit never misses the release."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from segshuffle.services.shuffler.app import create_app
from segshuffle.services.shuffler.service import ShufflerService
from segshuffle.services.shuffler.settings import Settings
from segshuffle.services.shuffler.upstream import ServerLink

from .vector_documents import VECTORS, vector_view


def _service(tmp_path: Path) -> ShufflerService:
    settings = Settings(database=str(tmp_path / "shuffler.sqlite3"),
                        key_directory=str(tmp_path / "keys"), server_url="http://x",
                        server_token="s" * 32, operator_token="o" * 32, enrollment="open",
                        auto_release=10)
    link = ServerLink("http://x", "s" * 32,
                      transport=httpx.MockTransport(lambda _: httpx.Response(503)))
    service: ShufflerService = create_app(settings, link=link).state.service
    return service


@pytest.mark.parametrize(("answered", "lag", "committed", "reads", "released"), [
    (7, 3, 10, 1, True),    # three in flight could complete it, and did
    (7, 3, 9, 1, False),    # could have, did not
    (6, 3, 10, 0, False),   # three in flight cannot reach 10: no read (another one will)
    (10, 3, 10, 0, True),   # reached on its own answer
    (9, 0, 10, 0, False),   # an exact store (SQLite) is taken at its word
])
def test_a_short_count_is_read_again_where_it_could_reach_the_threshold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answered: int, lag: int,
        committed: int, reads: int, released: bool) -> None:
    service = _service(tmp_path)
    try:
        read: list[tuple[str, int]] = []
        started: list[int] = []

        def participants(campaign_id: str, round_number: int) -> int:
            read.append((campaign_id, round_number))
            return committed

        async def auto_release(view: object, round_number: int) -> None:
            started.append(round_number)

        monkeypatch.setattr(service.storage, "count_lag", lag)
        monkeypatch.setattr(service.storage, "participants", participants)
        monkeypatch.setattr(service, "_auto_release", auto_release)
        view = vector_view(VECTORS["parameters"][0], phase="round1")
        asyncio.run(service._stored(view, 1, answered))
        assert len(read) == reads and all(r == (view.id, 1) for r in read)
        assert started == ([1] if released else [])
    finally:
        service.storage.close()
