"""Reading HTTP/1.1 requests in the tests' small loopback servers
(tests/test_lean_client.py, tests/test_lean_transport.py)."""

from __future__ import annotations

import asyncio


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The next request on a connection: its head (through the blank line) and its body
    (``Content-Length`` bytes).  Raises :class:`asyncio.IncompleteReadError` when the
    client closes the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, (await reader.readexactly(length) if length else b"")
