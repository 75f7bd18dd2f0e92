"""The simulated users' lean HTTP client (LeanClient in segshuffle/testing/lean_transport.py):
it writes the bytes httpx writes, answers as httpx answers, leaves to httpx what it does
not do itself, and times answers out like the transport under httpx; and the population
keeps at most ``concurrency`` users in flight without a task per user."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from segshuffle.client import accountant
from segshuffle.testing import population as population_module
from segshuffle.testing.lean_transport import LeanClient, LeanTransport
from segshuffle.testing.population import Population

from .loopback_http import read_request

Answer = Callable[[bytes], Awaitable[bytes | None]]
"""Given a whole request, the whole answer to write (None: say nothing)."""


async def _serve(answer: Answer) -> tuple[asyncio.AbstractServer, int, list[bytes]]:
    """A loopback server that records every request (head and body) and answers it."""
    requests: list[bytes] = []

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head, body = await read_request(reader)
                request = head + body
                requests.append(request)
                reply = await answer(request)
                if reply is not None:
                    writer.write(reply)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], requests


def _http(body: bytes, *headers: bytes, status: bytes = b"200 OK") -> bytes:
    lines = [b"HTTP/1.1 " + status, b"content-length: %d" % len(body), *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def _ok(request: bytes) -> bytes:
    return _http(b'{"ok": true}', b"content-type: application/json", b"x-Twice: a",
                 b"x-twice: b")


CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/v1/campaigns/c", {}),
    ("GET", "/v1/campaigns/c%2Fd/rounds/1?x=1", {}),
    ("POST", "/v1/campaigns/c/enrollments", {"json": {"token": "t", "invitation": "i"}}),
    ("POST", "/v1/campaigns/c/rounds/2/submissions",
     {"json": {"level": "abc", "data": ["x", "y"], "n": 1.5, "name": "Zürich 東京"},
      "headers": {"Authorization": "Bearer token"}}),
]


def test_it_writes_the_bytes_httpx_writes(monkeypatch) -> None:
    async def run() -> None:
        server, port, requests = await _serve(_ok)
        base = f"http://127.0.0.1:{port}"
        for client in (httpx.AsyncClient(transport=LeanTransport()),
                       LeanClient(LeanTransport(), timeout=5)):
            if isinstance(client, LeanClient):  # the short path, not httpx's
                monkeypatch.setattr(httpx.AsyncClient, "send", _unexpected)
            async with client:
                for method, path, options in CALLS:
                    assert (await client.request(method, base + path, **options)).json() \
                        == {"ok": True}
        server.close()
        half = len(CALLS)
        assert requests[half:] == requests[:half]  # byte for byte, in the same order
    asyncio.run(run())


async def _unexpected(*args: Any, **kwargs: Any) -> httpx.Response:
    raise AssertionError("the request went through httpx's client")


def test_its_answers_are_httpx_answers() -> None:
    async def run() -> None:
        server, port, _ = await _serve(_ok)
        url = f"http://127.0.0.1:{port}/v1/campaigns/c/rounds/2/submissions"
        options = {"json": {"a": 1}, "headers": {"Authorization": "Bearer t"}}
        async with httpx.AsyncClient(transport=LeanTransport()) as plain, \
                LeanClient(LeanTransport(), timeout=5) as lean:
            expected = await plain.post(url, **options)
            answer = await lean.post(url, **options)
        server.close()
        assert (answer.status_code, answer.content, answer.json(), answer.http_version,
                answer.reason_phrase, answer.is_success, answer.is_closed) == \
            (expected.status_code, expected.content, expected.json(), expected.http_version,
             expected.reason_phrase, expected.is_success, expected.is_closed)
        assert answer.headers.multi_items() == expected.headers.multi_items()
        assert answer.headers["x-twice"] == "a, b"
        assert (answer.request.method, answer.request.url, answer.request.content) == \
            (expected.request.method, expected.request.url, expected.request.content)
        assert answer.request.headers.multi_items() == expected.request.headers.multi_items()
        answer.raise_for_status()
    asyncio.run(run())


def test_encoded_and_chunked_answers_are_decoded() -> None:
    async def encoded(request: bytes) -> bytes:
        if b" /chunked " in request:
            return (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                    b"3\r\n{\"a\r\n4;x=y\r\n\": 1\r\n1\r\n}\r\n0\r\nx-trailer: 1\r\n\r\n")
        return _http(gzip.compress(b'{"zipped": 1}'), b"content-encoding: gzip")

    async def run() -> None:
        server, port, _ = await _serve(encoded)
        async with LeanClient(LeanTransport(), timeout=5) as client:
            assert (await client.get(f"http://127.0.0.1:{port}/gz")).json() == {"zipped": 1}
            assert (await client.get(f"http://127.0.0.1:{port}/chunked")).json() == {"a": 1}
            assert (await client.get(f"http://127.0.0.1:{port}/gz")).json() == {"zipped": 1}
        server.close()
    asyncio.run(run())


def test_what_it_does_not_do_itself_goes_through_httpx() -> None:
    async def cookie(request: bytes) -> bytes:
        if b" /login " in request:
            return _http(b"{}", b"set-cookie: session=s1; Path=/")
        return _http(b"{}")

    async def run() -> None:
        server, port, requests = await _serve(cookie)
        base = f"http://127.0.0.1:{port}"
        async with LeanClient(LeanTransport(), timeout=5) as client:
            await client.get(base + "/a", params={"q": "1 2"})
            await client.post(base + "/b", content=b"raw")
            await client.get(base + "/c", headers=[("X-List", "1")])
            await client.get(base + "/d", headers={"Accept": "text/plain"})
            client.headers["User-Agent"] = "simulated"
            await client.get(base + "/agent")  # the short path, with the new default
            await client.get(base + "/login")
            await client.get(base + "/after")
        server.close()
        heads = [request.split(b"\r\n\r\n")[0] for request in requests]
        assert heads[0].startswith(b"GET /a?q=1+2 HTTP/1.1")
        assert requests[1].endswith(b"\r\n\r\nraw")
        assert b"\r\nX-List: 1" in heads[2]
        assert b"\r\nAccept: text/plain" in heads[3] and b"*/*" not in heads[3]
        assert b"\r\nUser-Agent: simulated" in heads[4] and b"python-httpx" not in heads[4]
        assert b"Cookie: session=s1" not in heads[5]
        assert b"\r\nCookie: session=s1" in heads[6]  # the cookie jar, as httpx keeps it
    asyncio.run(run())


def test_failures_are_httpx_errors_with_their_request() -> None:
    async def silent(request: bytes) -> None:
        return None

    async def run() -> None:
        server, port, _ = await _serve(silent)
        url = f"http://127.0.0.1:{port}/slow"
        async with LeanClient(LeanTransport(), timeout=0.2) as client:
            with pytest.raises(httpx.ReadTimeout) as timed_out:
                await client.post(url, json={"a": 1})
            assert timed_out.value.request.url == url
            assert timed_out.value.request.content == b'{"a":1}'
        server.close()
        await server.wait_closed()
        async with LeanClient(LeanTransport(), timeout=0.2) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(url)
    asyncio.run(run())


def test_a_connection_times_each_answer_out_with_its_own_timeout() -> None:
    """One timer per connection: a later, shorter timeout is not held up by the timer an
    earlier, longer one left; a later, longer one is not cut short by a shorter one."""
    delays = iter([0.0, 0.0, 5.0, 0.0, 0.5])

    async def slow(request: bytes) -> bytes:
        await asyncio.sleep(next(delays))
        return _http(b"{}")

    async def run() -> None:
        server, port, _ = await _serve(slow)
        url = f"http://127.0.0.1:{port}/"
        loop = asyncio.get_running_loop()
        async with LeanClient(LeanTransport(max_connections=1), timeout=30) as client:
            await client.get(url)  # arms the connection's timer for 30 s
            await client.get(url, timeout=0.1)
            started = loop.time()
            with pytest.raises(httpx.ReadTimeout):
                await client.get(url, timeout=0.2)  # the answer takes 5 s
            assert loop.time() - started < 2
            await client.get(url, timeout=0.05)  # a new connection, with a short timer
            answer = await client.get(url, timeout=2)  # answered after 0.5 s
            assert answer.status_code == 200
        server.close()
    asyncio.run(run())


def test_the_users_keep_at_most_concurrency_in_flight_in_order() -> None:
    async def run() -> tuple[list[int], int]:
        population = Population("http://127.0.0.1:1", "c", [[0]] * 40, [0] * 40,
                                concurrency=4)
        started: list[int] = []
        flight = peak = 0

        async def job(i: int) -> None:
            nonlocal flight, peak
            started.append(i)
            flight += 1
            peak = max(peak, flight)
            await asyncio.sleep(0.001 * (i % 3))
            flight -= 1

        async with population:
            timing = await population._run("test", list(range(40)), job)
        assert timing.users == 40 and timing.failures == 0
        return started, peak

    started, peak = asyncio.run(run())
    assert started == list(range(40)) and peak == 4


def test_the_population_loads_the_accountant_before_the_users(monkeypatch) -> None:
    loaded: list[str | None] = []
    imported: list[str] = []
    monkeypatch.setattr(accountant, "implementation", lambda name=None: loaded.append(name))
    monkeypatch.setattr(population_module.importlib, "import_module", imported.append)

    async def enter() -> None:
        async with Population("http://127.0.0.1:1", "c", [[0]], [0]):
            pass

    asyncio.run(enter())
    assert loaded == [None]
    assert imported == list(population_module.ACCOUNTANT_MODULES)

    def misspelt(name: str | None = None) -> None:
        raise ValueError("SEGSHUFFLE_ACCOUNTANT must be one of ...")

    monkeypatch.setattr(accountant, "implementation", misspelt)
    asyncio.run(enter())  # left for the users' own checks to report
