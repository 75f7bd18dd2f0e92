"""The simulated users' lean HTTP/1.1 transport (segshuffle/testing/lean_transport.py):
what it reads, what it refuses, how it reuses and drops connections, and that the
load generator's users use it against plain-HTTP services."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from segshuffle.testing.lean_transport import LeanTransport
from segshuffle.testing.population import Population

from .loopback_http import read_request

Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
"""Given a request's head, writes an answer; returns whether to keep the connection."""


async def _serve(handler: Handler) -> tuple[asyncio.AbstractServer, int, list[int]]:
    """A loopback server answering each request with ``handler``; the list counts the
    connections it accepted."""
    connections: list[int] = []

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head, _ = await read_request(reader)
                if not await handler(head, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], connections


async def _json(head: bytes, writer: asyncio.StreamWriter) -> bool:
    body = b'{"path": "%s"}' % head.split(b" ")[1]
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    return True


def test_answers_are_read_and_connections_kept_alive() -> None:
    async def run() -> None:
        server, port, connections = await _serve(_json)
        async with httpx.AsyncClient(transport=LeanTransport(max_connections=2)) as client:
            for index in range(20):
                answer = await client.post(f"http://127.0.0.1:{port}/a/{index}?q=1",
                                           json={"x": index})
                assert answer.status_code == 200
                assert answer.json() == {"path": f"/a/{index}?q=1"}
            answers = await asyncio.gather(*(client.get(f"http://127.0.0.1:{port}/b")
                                             for _ in range(10)))
            assert {a.json()["path"] for a in answers} == {"/b"}
        assert len(connections) <= 2  # never more than max_connections, all reused
        server.close()
    asyncio.run(run())


def test_chunked_answers_and_connection_close() -> None:
    async def chunked(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n"
                     b"connection: close\r\n\r\n4\r\n{\"a\"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n")
        await writer.drain()
        return False

    async def run() -> None:
        server, port, connections = await _serve(chunked)
        async with httpx.AsyncClient(transport=LeanTransport()) as client:
            for _ in range(3):
                answer = await client.get(f"http://127.0.0.1:{port}/")
                assert (answer.status_code, answer.json()) == (201, {"a": 1})
        assert len(connections) == 3  # each closed by the server: a new one each time
        server.close()
    asyncio.run(run())


def test_a_connection_the_server_closed_is_not_reused() -> None:
    served = []

    async def once(head: bytes, writer: asyncio.StreamWriter) -> bool:
        served.append(head)
        await _json(head, writer)
        return False  # closes without saying so (an idle keep-alive timeout)

    async def run() -> None:
        server, port, connections = await _serve(once)
        async with httpx.AsyncClient(transport=LeanTransport()) as client:
            assert (await client.get(f"http://127.0.0.1:{port}/1")).status_code == 200
            await asyncio.sleep(0.05)
            assert (await client.get(f"http://127.0.0.1:{port}/2")).status_code == 200
        assert len(connections) == 2 and len(served) == 2
        server.close()
    asyncio.run(run())


def test_refusals_are_httpx_errors() -> None:
    async def silent(head: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(5)
        return False

    async def garbage(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SSH-2.0-nothing\r\n\r\n")
        await writer.drain()
        return False

    async def no_length(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nbody until close")
        await writer.drain()
        return False

    async def run() -> None:
        transport = LeanTransport()
        async with httpx.AsyncClient(transport=transport, timeout=0.3) as client:
            with pytest.raises(httpx.UnsupportedProtocol):
                await client.get("https://127.0.0.1:1/")
            server, port, _ = await _serve(silent)
            with pytest.raises(httpx.ReadTimeout):
                await client.get(f"http://127.0.0.1:{port}/")
            server.close()
            for handler in (garbage, no_length):
                server, port, _ = await _serve(handler)
                with pytest.raises(httpx.RemoteProtocolError):
                    await client.get(f"http://127.0.0.1:{port}/")
                server.close()
            server, port, _ = await _serve(_json)
            server.close()
            await server.wait_closed()
            with pytest.raises(httpx.ConnectError):
                await client.get(f"http://127.0.0.1:{port}/")
    asyncio.run(run())


def test_the_simulated_users_use_it_for_plain_http_only() -> None:
    async def pools(url: str) -> list[type]:
        population = Population(url, "c", [[0]], [0], concurrency=4)
        async with population:
            return [type(pool._transport) for pool in population._pools]

    assert set(asyncio.run(pools("http://127.0.0.1:1"))) == {LeanTransport}
    assert set(asyncio.run(pools("https://127.0.0.1:1"))) == {httpx.AsyncHTTPTransport}
