"""The services' HTTP/1.1 protocol: deadlines against slow clients, one write per response.

uvicorn's HTTP/1.1 protocols wait as long as a client takes to send its request line and
headers, and for the body as long as the application waits: 1,500 connections that each
send one byte every few seconds tie up a service indefinitely. :func:`bounded_protocol`
returns uvicorn's protocol class (httptools when installed, the fast C parser; h11
otherwise) with two deadlines per request:

- **headers**: from the first byte of a request (or the connection's opening) until its
  headers are complete, at most ``header_timeout`` seconds;
- **body**: from the end of the headers until the whole body has arrived, at most
  ``body_timeout`` seconds.

A connection that misses a deadline is closed. An idle keep-alive connection is closed
by uvicorn's own keep-alive timeout.

It also corks the connection: uvicorn writes a response's status line and headers, then
its body, as separate socket writes (two system calls, often two TCP segments, for every
small JSON answer). :class:`CorkedTransport` collects the writes made within one turn of
the event loop and sends them as one, at the end of that turn.

With httptools it also tells the application when a request's whole body has arrived
(the ASGI extension :data:`.arrival.BODY_ARRIVAL`), which it knows as it parses the last
byte.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from segshuffle.services.arrival import BODY_ARRIVAL, BodyArrival

try:  # the C parser (uvicorn[standard]); the h11 protocol is the fallback
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is a dependency of the server extra
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


def event_loop() -> str:
    """uvicorn's ``loop`` setting: ``uvloop`` when installed, else ``asyncio``."""
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - uvloop is a dependency of the server extra
        return "asyncio"
    return "uvloop"


class CorkedTransport:
    """A transport proxy that sends everything written in one event-loop turn as one write.

    Reads, flow control and extra info go to the real transport. ``close`` and
    ``write_eof`` flush first, so nothing written is lost; a connection already closing
    drops what is pending, as the real transport would.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Send what is pending (one write)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Deadlines:
    """The two deadlines of the module docstring, armed and disarmed by the protocol."""

    _deadline: asyncio.TimerHandle | None = None
    loop: asyncio.AbstractEventLoop
    transport: Any

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def bounded_protocol(header_timeout: float, body_timeout: float, *,
                     parser: str = "auto") -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol class with the deadlines and the corked writes of the
    module docstring; ``parser`` is ``httptools``, ``h11`` or ``auto`` (httptools when
    installed)."""
    if header_timeout <= 0 or body_timeout <= 0:
        raise ValueError("header and body timeouts must be positive")
    if parser not in ("auto", "httptools", "h11"):
        raise ValueError(f"parser must be auto, httptools or h11, got {parser!r}")
    if parser == "httptools" and HttpToolsProtocol is None:
        raise ValueError("the httptools parser is not installed")
    if parser == "h11" or HttpToolsProtocol is None:
        return _h11_protocol(header_timeout, body_timeout)
    return _httptools_protocol(header_timeout, body_timeout)


def _httptools_protocol(header_timeout: float, body_timeout: float) -> type[asyncio.Protocol]:
    assert HttpToolsProtocol is not None

    class BoundedHttpToolsProtocol(_Deadlines, HttpToolsProtocol):  # type: ignore[misc,valid-type]
        _arrival: BodyArrival

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]
            self._arm(header_timeout)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arrival = BodyArrival()
            self.scope.setdefault("extensions", {})[BODY_ARRIVAL] = self._arrival
            if self._deadline is None:
                self._arm(header_timeout)

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._arm(body_timeout)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._arrival.complete = True
            self._disarm()

    return BoundedHttpToolsProtocol


def _h11_protocol(header_timeout: float, body_timeout: float) -> type[asyncio.Protocol]:
    import h11

    class BoundedH11Protocol(_Deadlines, H11Protocol):
        _waiting_for: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]
            self._arm_for(h11.IDLE, header_timeout)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._waiting_for = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def _follow(self) -> None:
            """Arm the deadline of the phase the client is in, once per phase."""
            state = self.conn.their_state
            if state is self._waiting_for:
                return
            self._disarm()
            self._waiting_for = None
            if state is h11.IDLE and self.conn.trailing_data[0]:
                self._arm_for(h11.IDLE, header_timeout)  # part of the next request is here
            elif state is h11.SEND_BODY:
                self._arm_for(h11.SEND_BODY, body_timeout)

        def _arm_for(self, state: Any, seconds: float) -> None:
            self._arm(seconds)
            self._waiting_for = state

    return BoundedH11Protocol
