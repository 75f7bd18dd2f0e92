"""Release forwarding: chunks, retries with backoff, resumption, idempotent completion.

The server side is a scripted httpx transport here (the live server is exercised by the
end-to-end tests); it fails on purpose to drive the retry paths."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path

import httpx
import pytest

from segshuffle.services import errors
from segshuffle.services.shuffler.enrollment import token_hash
from segshuffle.services.shuffler.release import DEFAULT_WINDOW, Backoff, Releaser
from segshuffle.services.shuffler.storage import RELEASED, RoundRecord, Storage
from segshuffle.services.shuffler.upstream import ServerLink
from segshuffle.services.shuffler.vault import RoundKeys, seal_submission
from segshuffle.wire.models import b64url_decode

from .test_client_messages import _view


class ScriptedServer:
    """Records chunks; fails the first ``failures`` requests, then answers as a server."""

    def __init__(self, failures: int = 0, incomplete_once: bool = False) -> None:
        self.failures = failures
        self.incomplete_once = incomplete_once
        self.chunks: dict[tuple[str, int], list[bytes]] = {}
        self.puts = 0
        self.completes = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer shuffler-credential"
        if self.failures:
            self.failures -= 1
            if self.failures % 2:
                raise httpx.ConnectError("down")
            return httpx.Response(503, json={"type": "urn:segshuffle:error:unavailable"})
        if request.method == "PUT":
            body = json.loads(request.content)
            self.puts += 1
            self.chunks[(body["stream"], body["chunk_index"])] = [
                b64url_decode(c) for c in body["ciphertexts"]]
            return httpx.Response(200, json={
                "campaign_id": "c", "round": 1, "batch_id": "b", "stream": body["stream"],
                "chunk_index": body["chunk_index"], "chunk_count": body["chunk_count"],
                "received": 0, "accepted": 0, "nulls": 0, "replays": 0, "failures": []})
        self.completes += 1
        if self.incomplete_once:
            self.incomplete_once = False
            self.chunks.clear()
            return httpx.Response(409, json={"type": "urn:segshuffle:error:incomplete-batch"})
        return httpx.Response(200, json={"campaign_id": "c", "round": 2, "batch_id": "b",
                                         "phase": "done", "streams": {}, "failures": []})


def _filled(tmp_path: Path, users: int = 23) -> tuple[Storage, list[bytes]]:
    storage = Storage(tmp_path / "s.sqlite3")
    key = RoundKeys(tmp_path / "keys").get("c", 2, create=True)
    sent = []
    for i in range(users):
        level = secrets.token_bytes(80)
        data = [secrets.token_bytes(80) for _ in range(3)]
        sent += [level, *data]
        storage.submit("c", 2, token_hash(f"u{i}"),
                       seal_submission(key, "c", 2, {"levels": [level], "data": data}))
    return storage, sent


def _releaser(storage: Storage, link: ServerLink, **kwargs: float) -> Releaser:
    keys = RoundKeys(Path(storage.path).parent / "keys")
    return Releaser(storage, link, keys, chunk_size=10, **kwargs)  # type: ignore[arg-type]


def _forward(storage: Storage, server: ScriptedServer) -> None:
    async def main() -> None:
        link = ServerLink("http://server", "shuffler-credential",
                          transport=httpx.MockTransport(server))
        releaser = _releaser(storage, link, backoff_initial=0.001, backoff_max=0.01)
        record = releaser.start("c", 2, required=23)
        done = await releaser.forward(record)
        assert done.state == RELEASED
        await link.aclose()

    asyncio.run(main())


def test_everything_arrives_once_in_chunks(tmp_path: Path) -> None:
    storage, sent = _filled(tmp_path)
    server = ScriptedServer()
    _forward(storage, server)
    assert sorted(server.chunks) == [("data", i) for i in range(7)] + \
        [("levels", i) for i in range(3)]
    received = [c for key in sorted(server.chunks) for c in server.chunks[key]]
    assert sorted(received) == sorted(sent)
    assert server.puts == 10 and server.completes == 1


def test_transient_failures_are_retried(tmp_path: Path) -> None:
    storage, sent = _filled(tmp_path)
    server = ScriptedServer(failures=9)
    _forward(storage, server)
    received = [c for chunk in server.chunks.values() for c in chunk]
    assert sorted(received) == sorted(sent)
    assert storage.releasing() == []


def test_incomplete_batch_is_sent_again(tmp_path: Path) -> None:
    storage, sent = _filled(tmp_path)
    server = ScriptedServer(incomplete_once=True)
    _forward(storage, server)
    assert server.puts == 20 and server.completes == 2
    assert sorted(c for chunk in server.chunks.values() for c in chunk) == sorted(sent)


def test_resume_skips_acknowledged_chunks(tmp_path: Path) -> None:
    storage, _ = _filled(tmp_path)
    record = storage.close_round("c", 2, minimum=1, batch_id="b", chunk_size=10,
                                 streams=["levels", "data"])
    for index in range(4):
        storage.acknowledge(record, "data", index)
    server = ScriptedServer()

    async def main() -> None:
        link = ServerLink("http://server", "shuffler-credential",
                          transport=httpx.MockTransport(server))
        releaser = _releaser(storage, link)
        assert releaser.resume_all() == 1
        await asyncio.gather(*releaser._tasks.values())
        await link.aclose()

    asyncio.run(main())
    assert server.puts == 6  # 3 data chunks left + 3 level chunks
    assert sorted(server.chunks) == [("data", 4), ("data", 5), ("data", 6),
                                     ("levels", 0), ("levels", 1), ("levels", 2)]
    assert storage.round_record("c", 2).state == RELEASED  # type: ignore[union-attr]


def test_backoff_grows_and_is_capped() -> None:
    backoff = Backoff(initial=0.1, maximum=1.0)
    delays = [backoff.next_delay() for _ in range(8)]
    for k, delay in enumerate(delays):
        ceiling = min(1.0, 0.1 * 2**k)
        assert ceiling / 2 <= delay <= ceiling
    backoff.reset()
    assert backoff.next_delay() <= 0.1


@pytest.mark.parametrize("round_number,phase,ended", [
    (1, "round2", ("released", None)), (2, "done", ("released", None)), (2, "round2", None),
    (1, "round1", None),
    (1, "failed", ("failed", "the campaign failed: too few")),
    (2, "aborted", ("failed", "the campaign aborted: too few"))])
def test_how_a_round_ended_is_read_from_the_campaign(tmp_path: Path, round_number: int,
                                                      phase: str, ended: object) -> None:
    """A ``wrong-phase`` answer means the round is over only if the campaign moved on."""
    view, _ = _view()
    body = view.model_copy(update={"phase": phase, "end_reason": "too few"}).model_dump(
        mode="json")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    async def main() -> object:
        link = ServerLink("http://server", "t", transport=httpx.MockTransport(handler))
        releaser = _releaser(Storage(tmp_path / "x.sqlite3"), link)
        record = RoundRecord("c1", round_number, "releasing", "b", 1, 10, {"levels": 1})
        try:
            return await releaser._ended(record)
        finally:
            await link.aclose()

    assert asyncio.run(main()) == ended


def _refusing(status: int, problem: str) -> httpx.MockTransport:
    calls: list[str] = []
    chunks: list[tuple[str, int]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if request.method == "PUT":
            body = json.loads(request.content)
            chunks.append((body["stream"], body["chunk_index"]))
        return httpx.Response(status, json={"type": f"urn:segshuffle:error:{problem}"})

    transport = httpx.MockTransport(handler)
    transport.calls = calls  # type: ignore[attr-defined]
    transport.chunks = chunks  # type: ignore[attr-defined]
    return transport


@pytest.mark.parametrize("status,problem", [(401, "unauthorized"), (403, "forbidden"),
                                            (422, "invalid-field"), (409, "conflict")])
def test_forwarding_stops_at_once_on_a_refusal(tmp_path: Path, status: int,
                                               problem: str) -> None:
    """R9: a 4xx is not retried; the round stays releasing and says why. The chunks
    already in flight when the refusal arrives (at most the window) are each sent once."""
    storage, _ = _filled(tmp_path)
    transport = _refusing(status, problem)

    async def main() -> None:
        link = ServerLink("http://server", "shuffler-credential", transport=transport)
        releaser = _releaser(storage, link, backoff_initial=0.001, backoff_max=0.01)
        record = releaser.start("c", 2, required=23)
        with pytest.raises(errors.UpstreamFailedError, match="not retried"):
            await releaser.forward(record)
        assert "stopped" in releaser.last_error[("c", 2)]
        assert releaser._orders == {}  # the order and its spill file went with it
        await link.aclose()

    asyncio.run(main())
    calls, chunks = transport.calls, transport.chunks  # type: ignore[attr-defined]
    assert 1 <= len(calls) <= DEFAULT_WINDOW and set(calls) == {"PUT"}
    assert len(set(chunks)) == len(chunks)  # nothing retried
    assert storage.round_record("c", 2).state == "releasing"  # type: ignore[union-attr]


def test_transient_failures_stop_after_the_retry_budget(tmp_path: Path) -> None:
    storage, _ = _filled(tmp_path)
    transport = _refusing(503, "unavailable")

    async def main() -> None:
        link = ServerLink("http://server", "shuffler-credential", transport=transport)
        releaser = _releaser(storage, link, backoff_initial=0.01, backoff_max=0.02,
                             retry_seconds=0.2)
        record = releaser.start("c", 2, required=23)
        with pytest.raises(errors.UpstreamFailedError, match=r"retried for 0\.2 s"):
            await releaser.forward(record)
        await link.aclose()

    asyncio.run(main())
    assert 3 <= len(transport.calls) <= 40 * DEFAULT_WINDOW  # type: ignore[attr-defined]


def test_a_failed_completion_finishes_the_round_as_failed(tmp_path: Path) -> None:
    storage, _ = _filled(tmp_path)
    server = ScriptedServer()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/complete"):
            return httpx.Response(200, json={
                "campaign_id": "c", "round": 2, "batch_id": "b", "phase": "failed",
                "streams": {}, "failures": [], "end_reason": "round 2: too few"})
        return server(request)

    async def main() -> None:
        link = ServerLink("http://server", "shuffler-credential",
                          transport=httpx.MockTransport(handler))
        releaser = _releaser(storage, link)
        record = releaser.start("c", 2, required=23)
        finished = await releaser.forward(record)
        assert (finished.state, finished.reason) == ("failed", "round 2: too few")
        await link.aclose()

    asyncio.run(main())
    assert storage.pending_count("c", 2, "data") == 0
    assert list((tmp_path / "keys").glob("round-*.key")) == []


def test_a_completion_being_computed_is_waited_for_at_the_servers_pace(tmp_path: Path
                                                                        ) -> None:
    """The server answers 202 while its completion job runs (the optimizer, the decoding):
    the shuffler asks again after Retry-After, shows the job as the round's last error
    meanwhile, and the round ends with the completion, however long the job took."""
    storage, _ = _filled(tmp_path)
    server = ScriptedServer()
    pending = iter(range(3))
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/complete") and next(pending, None) is not None:
            return httpx.Response(202, headers={"Retry-After": "0"}, json={
                "campaign_id": "c", "round": 2, "batch_id": "b", "state": "computing",
                "waiting_seconds": 12.0, "computing_seconds": 11.0, "attempts": 2,
                "last_error": "RuntimeError: the disk is full"})
        return server(request)

    async def main() -> None:
        link = ServerLink("http://server", "shuffler-credential",
                          transport=httpx.MockTransport(handler))
        releaser = _releaser(storage, link, backoff_initial=0.001, backoff_max=0.01)
        releaser.on_change = lambda cid, rnd: seen.append(
            releaser.last_error.get((cid, rnd), ""))
        record = releaser.start("c", 2, required=23)
        finished = await releaser.forward(record)
        assert finished.state == RELEASED
        await link.aclose()

    asyncio.run(main())
    assert server.completes == 1  # the three 202s were answered by the handler
    assert any("decoding the round (11 s so far, attempt 2)" in text
               and "the disk is full" in text for text in seen), seen
