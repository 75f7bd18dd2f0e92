"""Forwarding a release with several chunk deliveries in flight (the release window).

The server is an async scripted transport that holds each chunk request for a moment and
counts how many are open at once; the live server is exercised by the end-to-end tests.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from segshuffle.client.retry import retry_after_seconds
from segshuffle.services.shuffler.release import DEFAULT_WINDOW, Releaser
from segshuffle.services.shuffler.storage import RELEASED, Storage
from segshuffle.services.shuffler.upstream import ServerLink
from segshuffle.services.shuffler.vault import RoundKeys

from .test_shuffler_release import _filled

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]
CHUNKS = 10
"""Chunks of the round of :func:`_filled` (23 users, chunks of 10: 3 level + 7 data)."""


def _receipt(body: dict[str, object]) -> httpx.Response:
    return httpx.Response(202, json={
        "campaign_id": "c", "round": 2, "batch_id": "b", "stream": body["stream"],
        "chunk_index": body["chunk_index"], "chunk_count": body["chunk_count"],
        "received": 10, "accepted": 0, "replays": 0, "failures": [], "state": "queued"})


COMPLETED = {"campaign_id": "c", "round": 2, "batch_id": "b", "phase": "done",
             "streams": {}, "failures": []}


class SlowServer:
    """Answers each chunk after ``hold`` seconds and records how many were open at once;
    ``fail`` maps a (stream, index) to the number of 503 answers it gets first."""

    def __init__(self, hold: float = 0.02, fail: dict[tuple[str, int], int] | None = None,
                 decoding: int = 0, failing: int = 0, retry_after: str = "1") -> None:
        self.hold = hold
        self.fail = dict(fail or {})
        self.decoding = decoding
        self.failing = failing
        self.retry_after = retry_after
        self.open = 0
        self.most_open = 0
        self.puts: Counter[tuple[str, int]] = Counter()
        self.completes = 0
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.completes += 1
            if self.decoding:
                self.decoding -= 1
                return httpx.Response(503, headers={"Retry-After": self.retry_after}, json={
                    "type": "urn:segshuffle:error:unavailable", "status": 503,
                    "queued_chunks": 2, "failing_chunks": self.failing})
            return httpx.Response(200, json=COMPLETED)
        body = json.loads(request.content)
        key = (body["stream"], body["chunk_index"])
        self.puts[key] += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await self.release.wait()
            await asyncio.sleep(self.hold)
        finally:
            self.open -= 1
        if self.fail.get(key, 0):
            self.fail[key] -= 1
            return httpx.Response(503, json={"type": "urn:segshuffle:error:unavailable"})
        return _receipt(body)


def _releaser(storage: Storage, server: SlowServer, **options: float) -> tuple[Releaser,
                                                                             ServerLink]:
    link = ServerLink("http://server", "shuffler-credential",
                      transport=httpx.MockTransport(server))
    keys = RoundKeys(Path(storage.path).parent / "keys")
    releaser = Releaser(storage, link, keys, chunk_size=10, backoff_initial=0.001,
                        backoff_max=0.01, **options)  # type: ignore[arg-type]
    return releaser, link


def _release(storage: Storage, server: SlowServer, **options: float) -> Releaser:
    async def main() -> Releaser:
        releaser, link = _releaser(storage, server, **options)
        try:
            record = releaser.start("c", 2, required=23)
            done = await releaser.forward(record)
            assert done.state == RELEASED
        finally:
            await link.aclose()
        return releaser

    return asyncio.run(main())


@pytest.mark.parametrize("window", [1, 3, None])
def test_at_most_the_window_of_chunks_is_in_flight(tmp_path: Path, window: int | None
                                                   ) -> None:
    """Every chunk is delivered once, and the deliveries open at once reach the window
    (the default when none is given) and never exceed it."""
    storage, _ = _filled(tmp_path)
    server = SlowServer()
    options = {} if window is None else {"window": window}
    _release(storage, server, **options)
    expected = DEFAULT_WINDOW if window is None else window
    assert server.most_open == expected
    assert sum(server.puts.values()) == CHUNKS and set(server.puts.values()) == {1}
    assert server.completes == 1 and server.open == 0


def test_a_failing_chunk_is_retried_alone_while_the_others_go_on(tmp_path: Path) -> None:
    storage, _ = _filled(tmp_path)
    server = SlowServer(fail={("data", 2): 3})
    _release(storage, server, window=3)
    assert server.puts.pop(("data", 2)) == 4
    assert len(server.puts) == CHUNKS - 1 and set(server.puts.values()) == {1}
    assert storage.releasing() == []


@pytest.mark.parametrize(("failing", "shown"), [
    (0, "complete: the server is still decoding 2 chunk(s)"),
    (1, "complete: the server is still decoding 2 chunk(s), 1 of which failed to decode "
        "and are being retried (see the server's log)"),
])
def test_complete_waits_while_the_server_is_decoding(tmp_path: Path, failing: int,
                                                     shown: str) -> None:
    """``unavailable`` with ``queued_chunks`` is waited for with the backoff, and the
    round's ``last_error`` says the server is decoding, and how many chunks are failing
    there (``failing_chunks``)."""
    storage, _ = _filled(tmp_path)
    server = SlowServer(hold=0.0, decoding=3, failing=failing)
    seen: list[str] = []

    async def main() -> None:
        releaser, link = _releaser(storage, server)
        releaser.on_change = lambda cid, round_: seen.append(
            releaser.last_error.get((cid, round_), ""))
        try:
            record = releaser.start("c", 2, required=23)
            assert (await releaser.forward(record)).state == RELEASED
        finally:
            await link.aclose()

    asyncio.run(main())
    assert server.completes == 4
    assert shown in seen


def test_complete_is_retried_after_the_servers_retry_after(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """While the server decodes, the shuffler asks again after the server's ``Retry-After``
    (here 0 s, raised to the floor of 0.25 s, so no server can make it spin), not after
    its own backoff (here 20 to 40 s, cut short by the test's timeout), so a round ends as
    soon as its decoding does."""
    storage, _ = _filled(tmp_path)
    server = SlowServer(hold=0.0, decoding=3, retry_after="0")

    async def main() -> None:
        link = ServerLink("http://server", "shuffler-credential",
                          transport=httpx.MockTransport(server))
        releaser = Releaser(storage, link, RoundKeys(tmp_path / "keys"), chunk_size=10,
                            backoff_initial=20.0, backoff_max=40.0)
        try:
            record = releaser.start("c", 2, required=23)
            async with asyncio.timeout(15):
                assert (await releaser.forward(record)).state == RELEASED
        finally:
            await link.aclose()

    with caplog.at_level(logging.INFO, logger="segshuffle.shuffler"):
        asyncio.run(main())
    assert server.completes == 4
    waits = [r.getMessage() for r in caplog.records if "forwarding complete" in r.getMessage()]
    assert len(waits) == 3 and all(w.endswith("retry in 0.25s") for w in waits), waits


@pytest.mark.parametrize(("header", "seconds"), [
    ("1", 1.0), (" 30 ", 30.0), ("0", 0.0), ("99999999", 3600.0), (None, None), ("", None),
    ("-1", None), ("1.5", None), ("Wed, 21 Oct 2026 07:28:00 GMT", None), ("١", None),
])
def test_retry_after_is_read_in_delay_seconds_only(header: str | None,
                                                   seconds: float | None) -> None:
    assert retry_after_seconds(header) == seconds


def test_cancelling_a_forwarding_leaves_no_delivery_behind(tmp_path: Path) -> None:
    """Cancelled while a full window of deliveries waits for the server: every delivery
    ends with it, no task is left, and the lease is given back."""
    storage, _ = _filled(tmp_path)

    async def main() -> None:
        server = SlowServer()
        server.release.clear()  # every chunk request waits until cancelled
        releaser, link = _releaser(storage, server, window=3)
        try:
            record = releaser.start("c", 2, required=23)
            forwarding = asyncio.get_running_loop().create_task(releaser.forward(record))
            for _ in range(500):
                if server.open == 3:
                    break
                await asyncio.sleep(0.01)
            assert server.open == 3
            forwarding.cancel()
            with pytest.raises(asyncio.CancelledError):
                await forwarding
            assert server.open == 0 and server.most_open == 3
            assert asyncio.all_tasks() == {asyncio.current_task()}
            assert storage.take_release_lease("c", 2, "another replica", 10.0)
        finally:
            await link.aclose()

    asyncio.run(main())


def test_the_window_must_be_positive(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "s.sqlite3")
    with pytest.raises(ValueError, match="window"):
        _releaser(storage, SlowServer(), window=0)


def test_the_setting_reaches_the_releaser(tmp_path: Path) -> None:
    """``--forward-window`` / SEGSHUFFLE_SHUFFLER_FORWARD_WINDOW sets the releaser's window."""
    from segshuffle.services.shuffler.app import create_app
    from segshuffle.services.shuffler.settings import Settings

    settings = Settings(database=str(tmp_path / "shuffler.db"),
                        key_directory=str(tmp_path / "keys"), server_url="http://127.0.0.1:9",
                        server_token="s" * 32, operator_token="o" * 32, enrollment="open",
                        forward_window=7)
    app = create_app(settings)
    try:
        assert app.state.releaser.window == 7
    finally:
        app.state.releaser.storage.close()
