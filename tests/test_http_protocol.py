"""The services' HTTP/1.1 protocol (:mod:`segshuffle.services.timeouts`) under both parsers:
deadlines cut slow clients off, keep-alive and pipelining still work, and a response
leaves in one socket write."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from segshuffle.services.arrival import BODY_ARRIVAL
from segshuffle.services.timeouts import CorkedTransport, bounded_protocol, event_loop

PARSERS = ["h11", "httptools"]


def _arrived(scope: dict[str, Any]) -> str:
    """What the protocol says of the body's arrival (:data:`BODY_ARRIVAL`), if anything."""
    arrival = scope.get("extensions", {}).get(BODY_ARRIVAL)
    return "untold" if arrival is None else str(arrival.complete)


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echoes the body; on ``/arrival``, what the protocol said of the body's arrival when
    the request started and once it was read."""
    if scope["type"] != "http":
        return
    at_start = _arrived(scope)
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = f"{at_start}/{_arrived(scope)}:".encode() if scope["path"] == "/arrival" else b""
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": answer + b"echo:" + body})


@pytest.fixture(params=PARSERS)
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app, log_level="error", access_log=False, lifespan="off",
                            http=bounded_protocol(0.5, 0.5, parser=request.param))
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not instance.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert instance.started
    yield "127.0.0.1", sock.getsockname()[1]
    instance.should_exit = True
    thread.join(10)


def _read_all(conn: socket.socket, until: bytes, timeout: float = 5.0) -> bytes:
    conn.settimeout(timeout)
    data = b""
    while until not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_requests_pipelined_on_one_connection(server: tuple[str, int]) -> None:
    with socket.create_connection(server) as conn:
        request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n"
        conn.sendall(request + b"one" + request + b"two")
        data = _read_all(conn, b"echo:two")
    assert data.count(b"HTTP/1.1 200") == 2 and b"echo:one" in data and b"echo:two" in data


def test_trickled_headers_are_cut_off(server: tuple[str, int]) -> None:
    with socket.create_connection(server) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\n")
        started = time.monotonic()
        conn.settimeout(5)
        try:
            while time.monotonic() - started < 4:
                conn.sendall(b"X-Slow: 1\r\n")  # never finishes the headers
                time.sleep(0.1)
            closed = False
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        if not closed:
            closed = conn.recv(100) == b""
    assert closed and time.monotonic() - started < 3


def test_a_trickled_body_is_cut_off(server: tuple[str, int]) -> None:
    with socket.create_connection(server) as conn:
        conn.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
        started = time.monotonic()
        conn.settimeout(5)
        assert conn.recv(100) == b""  # closed by the body deadline, no answer
    assert time.monotonic() - started < 3


def test_an_idle_keep_alive_connection_is_not_cut_by_the_header_deadline(
        server: tuple[str, int]) -> None:
    with socket.create_connection(server) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"echo:" in _read_all(conn, b"echo:")
        time.sleep(0.8)  # longer than the header deadline, shorter than keep-alive (5 s)
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"HTTP/1.1 200" in _read_all(conn, b"echo:")


def test_the_protocol_tells_when_the_whole_body_has_arrived(server: tuple[str, int],
                                                              request: pytest.FixtureRequest
                                                              ) -> None:
    """httptools tells the application whether the body is all there (a route may then
    decide before reading it) and h11 tells nothing (the application probes instead)."""
    parser = request.node.callspec.params["server"]
    head = b"POST /arrival HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
    with socket.create_connection(server) as conn:
        conn.sendall(head + b"whole" + head + b"again")  # arrived with the headers, twice
        data = _read_all(conn, b"echo:again")
        assert data.count(b"HTTP/1.1 200") == 2
        conn.sendall(head + b"pa")  # then withheld, then the rest
        time.sleep(0.2)
        conn.sendall(b"rt")
        time.sleep(0.1)
        conn.sendall(b"s")
        late = _read_all(conn, b"echo:parts")
    if parser == "httptools":
        assert b"True/True:echo:whole" in data and b"True/True:echo:again" in data
        assert b"False/True:echo:parts" in late
    else:
        assert b"untold/untold:echo:whole" in data and b"untold/untold:echo:parts" in late


class _Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_writes_of_one_loop_turn_leave_as_one() -> None:
    async def scenario() -> _Recorder:
        real = _Recorder()
        corked = CorkedTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        corked.write(b"HTTP/1.1 200 OK\r\n\r\n")
        corked.write(b"body")
        assert real.writes == []  # nothing sent before the turn ends
        await asyncio.sleep(0)
        assert real.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
        corked.write(b"last")
        corked.close()  # flushes before closing
        assert real.writes[-1] == b"last" and real.closing
        assert corked.get_extra_info("peername") == "info:peername"
        return real

    asyncio.run(scenario())


def test_the_parser_and_loop_choices() -> None:
    with pytest.raises(ValueError, match="positive"):
        bounded_protocol(0, 1)
    with pytest.raises(ValueError, match="parser"):
        bounded_protocol(1, 1, parser="quic")
    assert "HttpTools" in bounded_protocol(1, 1).__name__  # httptools is installed
    assert event_loop() == "uvloop"
