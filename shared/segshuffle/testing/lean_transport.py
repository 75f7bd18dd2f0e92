"""A lean HTTP/1.1 transport for many simulated users on plain-HTTP services.

httpx's default transport (httpcore over AnyIO) costs the load generator more CPU per
request than the services spend answering it: a profile of 1,000 simulated users
(benchmarks/bench_client.py) put 60 % of the generator's CPU in the transport, and its
connection pool checks every pooled connection's socket on each request.  The users'
requests are small and their answers are short JSON bodies, so this transport speaks
just enough HTTP/1.1 for them, under httpx's client (the SDK code is unchanged):

- plain ``http://`` only (``https`` raises :class:`httpx.UnsupportedProtocol`: use
  httpx's own transport with TLS);
- keep-alive connections, at most ``max_connections`` per transport, reused last in
  first out; a connection the peer closed is noticed before reuse and dropped;
- the answer's body by ``Content-Length`` or ``Transfer-Encoding: chunked`` (read whole:
  these answers are documents of a few KiB), at most :data:`MAX_BODY_BYTES`;
- the request's httpx timeouts (connect, and read for the whole answer) raise httpx's
  timeout errors, a broken connection :class:`httpx.ReadError` / :class:`httpx.WriteError`,
  so the SDK's retry policy sees the errors it knows.  A request is never resent here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import httpx

MAX_HEADER_BYTES = 64 << 10
MAX_BODY_BYTES = 16 << 20
_CRLF = b"\r\n"


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


def _head(request: httpx.Request, body: bytes) -> bytes:
    """The request line and headers (httpx has set Host, and Content-Length for a body)."""
    target = request.url.raw_path
    lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
    lines.extend(name + b": " + value for name, value in request.headers.raw)
    if body and "content-length" not in request.headers:
        lines.append(b"Content-Length: " + str(len(body)).encode("ascii"))
    return _CRLF.join(lines) + _CRLF + _CRLF


def _parse_head(head: bytes) -> tuple[int, list[tuple[bytes, bytes]]]:
    lines = head.split(_CRLF)
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    return int(parts[1]), headers


async def _read_body(reader: asyncio.StreamReader, headers: Sequence[tuple[bytes, bytes]],
                     status: int, method: str) -> bytes:
    lowered = {name.lower(): value for name, value in headers}
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return b""
    if lowered.get(b"transfer-encoding", b"").lower() == b"chunked":
        chunks = []
        total = 0
        while True:
            size_line = await reader.readuntil(_CRLF)
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            total += size
            if total > MAX_BODY_BYTES:
                raise httpx.RemoteProtocolError("answer body over the transport's limit")
            if size == 0:
                while await reader.readuntil(_CRLF) != _CRLF:  # trailers
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = lowered.get(b"content-length")
    if length is None:
        raise httpx.RemoteProtocolError("an answer without Content-Length or chunking")
    size = int(length)
    if not 0 <= size <= MAX_BODY_BYTES:
        raise httpx.RemoteProtocolError(f"answer body of {size} bytes")
    return await reader.readexactly(size) if size else b""


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive over plain TCP (module docstring)."""

    def __init__(self, *, max_connections: int = 8, local_address: str | None = None) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._local_address = local_address

    async def _connect(self, host: str, port: int, timeout: float | None) -> _Connection:
        local = (self._local_address, 0) if self._local_address else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, local_addr=local, limit=MAX_HEADER_BYTES),
                timeout)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(f"connecting to {host}:{port}: {exc}") from None
        return _Connection(reader, writer)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol("the lean transport speaks plain http only")
        timeouts = request.extensions.get("timeout", {})
        host, port = request.url.host, request.url.port or 80
        body = await request.aread()
        message = _head(request, body) + body
        async with self._slots:
            idle = self._idle.setdefault((host, port), [])
            connection = None
            while idle and connection is None:
                candidate = idle.pop()
                if candidate.usable():
                    connection = candidate
                else:
                    candidate.close()
            if connection is None:
                connection = await self._connect(host, port, timeouts.get("connect"))
            try:
                status, headers, content = await asyncio.wait_for(
                    self._exchange(connection, message, request.method), timeouts.get("read"))
            except TimeoutError:
                connection.close()
                raise httpx.ReadTimeout("no whole answer in time", request=request) from None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ValueError) as exc:
                connection.close()
                raise httpx.ReadError(f"connection to {host}:{port}: {exc!r}",
                                      request=request) from None
            except BaseException:
                connection.close()
                raise
            closing = any(name.lower() == b"connection" and value.lower() == b"close"
                          for name, value in headers)
            if closing:
                connection.close()
            else:
                idle.append(connection)
        return httpx.Response(status, headers=headers, content=content, request=request,
                              extensions={"http_version": b"HTTP/1.1"})

    @staticmethod
    async def _exchange(connection: _Connection, message: bytes,
                        method: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        connection.writer.write(message)
        await connection.writer.drain()
        head = await connection.reader.readuntil(_CRLF + _CRLF)
        status, headers = _parse_head(head[:-4])
        return status, headers, await _read_body(connection.reader, headers, status, method)

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
                with contextlib.suppress(Exception):
                    await connection.writer.wait_closed()
        self._idle.clear()
