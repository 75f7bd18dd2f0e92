"""Connections that cannot be held open by a client that sends slowly.

uvicorn's HTTP/1.1 protocol waits as long as a client takes to send its request line and
headers, and for the body as long as the application waits: 1,500 connections that each
send one byte every few seconds tie up a service indefinitely.  :func:`bounded_protocol`
returns uvicorn's h11 protocol with two deadlines per request:

- **headers**: from the first byte of a request (or the connection's opening) until its
  headers are complete, at most ``header_timeout`` seconds;
- **body**: from the end of the headers until the whole body has arrived, at most
  ``body_timeout`` seconds.

A connection that misses a deadline is closed.  An idle keep-alive connection is
closed by uvicorn's own keep-alive timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def bounded_protocol(header_timeout: float, body_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with the two deadlines of the module docstring."""
    if header_timeout <= 0 or body_timeout <= 0:
        raise ValueError("header and body timeouts must be positive")

    class BoundedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _waiting_for: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm(h11.IDLE, header_timeout)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
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
            if state is h11.IDLE and self.conn.trailing_data[0]:
                self._arm(h11.IDLE, header_timeout)  # part of the next request is here
            elif state is h11.SEND_BODY:
                self._arm(h11.SEND_BODY, body_timeout)

        def _arm(self, state: Any, seconds: float) -> None:
            self._waiting_for = state
            self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = None
            self._waiting_for = None

        def _expired(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol
