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

Above the transport, httpx's client cost the users about as much again (a profile of
bench_client.py: a fifth of the generator's CPU in building requests, merging headers,
the cookie jar, the auth and redirect machinery and the response's decoders).
:class:`LeanClient` is an ``httpx.AsyncClient`` over this transport whose ``request``
takes a short path for what the SDK sends (a URL string, optional ``json=`` and
``headers=``): the same bytes httpx would write (its default headers, in its order, and
its JSON encoding) from a head prepared once per URL, and an ``httpx.Response`` built
from the answer without a second pass.  Any other call, and every call once a service
has set a cookie, goes through httpx's own path.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json as jsonlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import httpx

MAX_HEADER_BYTES = 64 << 10
MAX_BODY_BYTES = 16 << 20
READ_BYTES = 64 << 10
"""Bytes a connection reads at once (its answers are documents of a few KiB)."""
MAX_PREPARED_URLS = 1024
"""URLs whose prepared head a :class:`LeanClient` keeps (the SDK uses a handful)."""
_CRLF = b"\r\n"
_HTTP11 = {"http_version": b"HTTP/1.1"}


class Answer(NamedTuple):
    """A whole answer as received."""

    status: int
    headers: list[tuple[bytes, bytes]]
    """The header pairs, names and values as they came."""
    body: bytes
    fields: dict[bytes, bytes]
    """Lower-case header name -> value (the values of a repeated name joined by ", "):
    the transport's and the client's own questions (length, chunking, closing, cookies,
    encoding) answered from one pass over the head."""

    def says(self, name: bytes, token: bytes) -> bool:
        """Whether header ``name`` lists ``token`` (case-insensitively)."""
        value = self.fields.get(name)
        return value is not None and token in (part.strip() for part
                                               in value.lower().split(b","))


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive connection, as an asyncio protocol: the bytes of the answer in flight
    are gathered as they arrive and the answer is handed over once whole (a profile had
    asyncio's ``StreamReader`` line and length reads cost more than the parsing).

    A buffered protocol: the transport reads into this connection's own buffer
    (``recv_into``).  A plain protocol gets a new ``bytes`` per read, which asyncio's
    selector loop allocates at 256 KiB and then shrinks: in a micro-benchmark here 15 us
    per read instead of 2 (how much depends on the allocator's state).
    """

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._landing = memoryview(bytearray(READ_BYTES))
        self._method = "GET"
        self._waiter: asyncio.Future[Answer] | None = None
        self._open = False
        self._loop = asyncio.get_running_loop()
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._deadline = math.inf
        """When the answer in flight times out (loop time)."""
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.bind(transport)

    def bind(self, transport: asyncio.BaseTransport) -> None:
        """Take ``transport`` (from ``connection_made``, or from ``create_connection``:
        uvloop may call ``connection_made`` only after that returns)."""
        if self._transport is None:  # uvloop's transports do not subclass asyncio's
            self._transport = cast(asyncio.Transport, transport)
            self._open = not transport.is_closing()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._landing

    def buffer_updated(self, nbytes: int) -> None:
        # Usually a whole answer in one read: parsed from one copy of it.
        data: bytes | bytearray = bytes(self._landing[:nbytes])
        if self._buffer:
            self._buffer += data
            data = self._buffer
        waiter = self._waiter
        if waiter is None or waiter.done():
            self._buffer = bytearray(data)  # nobody asked: the connection is not reused
            return
        try:
            whole = _answer_in(data, self._method)
        except (httpx.RemoteProtocolError, ValueError) as exc:
            waiter.set_exception(exc)
            return
        if whole is None:
            self._buffer = bytearray(data)
        else:
            answer, used = whole
            self._buffer = bytearray(data[used:])
            waiter.set_result(answer)

    def eof_received(self) -> bool:
        self._lose(asyncio.IncompleteReadError(bytes(self._buffer), None))
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lose(exc or ConnectionResetError("the connection closed"))
        self._disarm()
        if not self._closed.done():
            self._closed.set_result(None)

    # -- use -------------------------------------------------------------------------------
    def _lose(self, exc: BaseException) -> None:
        self._open = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    def usable(self) -> bool:
        """Open, and nothing left over from an earlier answer."""
        return (self._open and self._transport is not None
                and not self._transport.is_closing() and not self._buffer)

    async def exchange(self, message: bytes, method: str, timeout: float | None) -> Answer:
        """Write a whole request and wait for its whole answer: ``TimeoutError`` after
        ``timeout`` seconds (:meth:`_arm`)."""
        assert self._transport is not None
        self._method = method
        self._waiter = waiter = self._loop.create_future()
        self._arm(timeout)
        try:
            self._transport.write(message)
            return await waiter
        finally:
            self._waiter = None

    # -- timeouts --------------------------------------------------------------------------
    def _arm(self, timeout: float | None) -> None:
        """Time the answer in flight out after ``timeout`` seconds.

        One timer per connection, kept from request to request: a request only moves the
        deadline, and the timer, when it fires early, waits for the deadline again.  (A
        timer per request, armed and cancelled, cost the simulated users a few per cent
        of their CPU; their answers take milliseconds, their timeout is a minute.)
        """
        self._deadline = math.inf if timeout is None else self._loop.time() + timeout
        timer = self._timer
        if timer is not None and timer.when() > self._deadline:
            timer.cancel()  # armed for a longer timeout than this one
            timer = self._timer = None
        if timer is None and timeout is not None:
            self._timer = self._loop.call_at(self._deadline, self._check_deadline)

    def _check_deadline(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # idle: the next request arms a timer again
        if self._loop.time() >= self._deadline:
            waiter.set_exception(TimeoutError())
        elif self._deadline != math.inf:
            self._timer = self._loop.call_at(self._deadline, self._check_deadline)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        self._open = False
        self._disarm()
        if self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        await self._closed


def _head(request: httpx.Request, body: bytes) -> bytes:
    """The request line and headers (httpx has set Host, and Content-Length for a body)."""
    target = request.url.raw_path
    lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
    lines.extend(name + b": " + value for name, value in request.headers.raw)
    if body and "content-length" not in request.headers:
        lines.append(b"Content-Length: " + str(len(body)).encode("ascii"))
    return _CRLF.join(lines) + _CRLF + _CRLF


def _parse_head(head: bytes) -> tuple[int, list[tuple[bytes, bytes]], dict[bytes, bytes]]:
    """(status, header pairs, lower-case fields: :attr:`Answer.fields`) of an answer head."""
    lines = head.split(_CRLF)
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers = []
    fields: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            if not line:
                continue
            raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
        pair = (name.strip(), value.strip())
        headers.append(pair)
        key = pair[0].lower()
        fields[key] = fields[key] + b", " + pair[1] if key in fields else pair[1]
    return int(parts[1]), headers, fields


def _answer_in(buffer: bytes | bytearray, method: str) -> tuple[Answer, int] | None:
    """The whole answer at the start of ``buffer`` and the bytes it spans, or None while it
    is incomplete; :class:`httpx.RemoteProtocolError` (or ``ValueError`` for a bad number)
    for one that is not HTTP/1.1 or is over the limits."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > MAX_HEADER_BYTES:
            raise httpx.RemoteProtocolError("an answer head over the transport's limit")
        return None
    status, headers, fields = _parse_head(bytes(buffer[:end]))
    start = end + 4
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return Answer(status, headers, b"", fields), start
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        whole = _chunked_in(buffer, start)
        if whole is None:
            return None
        return Answer(status, headers, whole[0], fields), whole[1]
    length = fields.get(b"content-length")
    if length is None:
        raise httpx.RemoteProtocolError("an answer without Content-Length or chunking")
    size = int(length)
    if not 0 <= size <= MAX_BODY_BYTES:
        raise httpx.RemoteProtocolError(f"answer body of {size} bytes")
    if len(buffer) < start + size:
        return None
    return Answer(status, headers, bytes(buffer[start:start + size]), fields), start + size


def _chunked_in(buffer: bytes | bytearray, position: int) -> tuple[bytes, int] | None:
    """(the body, where it ends) of a chunked body from ``position``, or None while it is
    incomplete (errors as :func:`_answer_in`)."""
    chunks = []
    total = 0
    while True:
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            return None
        size = int(bytes(buffer[position:line_end]).split(b";", 1)[0].strip(), 16)
        total += size
        if total > MAX_BODY_BYTES:
            raise httpx.RemoteProtocolError("answer body over the transport's limit")
        position = line_end + 2
        if size == 0:  # then trailer lines, up to an empty one
            if buffer[position:position + 2] == b"\r\n":
                return b"".join(chunks), position + 2
            trailers_end = buffer.find(b"\r\n\r\n", position)
            if trailers_end < 0:
                return None
            return b"".join(chunks), trailers_end + 4
        if len(buffer) < position + size + 2:
            return None
        chunks.append(bytes(buffer[position:position + size]))
        position += size + 2


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
            async with asyncio.timeout(timeout):
                transport, connection = await asyncio.get_running_loop().create_connection(
                    _Connection, host, port, local_addr=local)
                connection.bind(transport)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(f"connecting to {host}:{port}: {exc}") from None
        return connection

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol("the lean transport speaks plain http only")
        body = await request.aread()
        try:
            answer = await self.exchange(
                request.url.host, request.url.port or 80, _head(request, body) + body,
                request.method, request.extensions.get("timeout", {}))
        except httpx.RequestError as exc:
            exc.request = request
            raise
        return httpx.Response(answer.status, headers=answer.headers, content=answer.body,
                              request=request, extensions=_HTTP11)

    async def exchange(self, host: str, port: int, message: bytes, method: str,
                       timeouts: Mapping[str, float | None]) -> Answer:
        """Send ``message`` (a whole request: head and body) to ``host:port`` over a pooled
        connection and read the whole answer; httpx's errors for a failed exchange."""
        async with self._slots:
            idle = self._idle.get((host, port))
            if idle is None:
                idle = self._idle[host, port] = []
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
                answer = await connection.exchange(message, method, timeouts.get("read"))
            except TimeoutError:
                connection.close()
                raise httpx.ReadTimeout("no whole answer in time") from None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ValueError) as exc:
                connection.close()
                raise httpx.ReadError(f"connection to {host}:{port}: {exc!r}") from None
            except BaseException:
                connection.close()
                raise
            if answer.says(b"connection", b"close"):
                connection.close()
            else:
                idle.append(connection)
        return answer

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
                with contextlib.suppress(Exception):
                    await connection.wait_closed()
        self._idle.clear()


@functools.cache
def _httpx_json() -> Callable[[Any], bytes] | None:
    """The encoder that turns ``json=`` into the bytes the installed httpx sends (compact
    UTF-8 since httpx 0.28, ``json.dumps``'s defaults before), found once by asking httpx;
    None if it is neither (the lean client then leaves ``json=`` requests to httpx)."""
    probe = {"a": [1, 2.5, "\u00e9"], "b": None}
    sent = httpx.Request("POST", "http://localhost/", json=probe).content
    for options in ({"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False},
                    {}):
        encode = jsonlib.JSONEncoder(**options).encode  # what json.dumps(**options) builds
        if encode(probe).encode("utf-8") == sent:
            return lambda value: encode(value).encode("utf-8")
    return None


@dataclass(frozen=True)
class _Target:
    """A URL as httpx parses it, and the head lines every request to it starts with."""

    url: httpx.URL
    host: str
    port: int
    path: bytes
    """The request target (path and query), as httpx writes it."""
    defaults: bytes
    """``Host`` and the client's default headers, each line ending in CRLF."""


class _LeanResponse(httpx.Response):
    """An ``httpx.Response`` whose ``request`` and ``headers`` are built on first use: the
    SDK reads neither on success (only an error report needs them), and building them
    for every answer cost a simulated user's requests a fifth of their Python time."""

    _rebuild: Callable[[], httpx.Request] | None = None
    _raw_headers: list[tuple[bytes, bytes]] | None = None
    _header_map: httpx.Headers

    @property
    def request(self) -> httpx.Request:
        if self._request is None and self._rebuild is not None:
            self._request = self._rebuild()
        return super().request

    @request.setter
    def request(self, value: httpx.Request) -> None:
        self._request = value

    @property  # type: ignore[override]  # httpx's is a plain attribute
    def headers(self) -> httpx.Headers:
        if self._raw_headers is not None:
            self._header_map, self._raw_headers = httpx.Headers(self._raw_headers), None
        return self._header_map

    @headers.setter
    def headers(self, value: httpx.Headers) -> None:
        self._header_map, self._raw_headers = value, None

    def defer_headers(self, raw: list[tuple[bytes, bytes]]) -> None:
        """Take the answer's header pairs, to be made ``httpx.Headers`` when first read."""
        self._raw_headers = raw


def _answer(answer: Answer, default_encoding: Any) -> _LeanResponse:
    """The answer as a read and closed ``httpx.Response``.

    httpx's ``read()`` passes the body through its decoder chain, a tenth of a simulated
    user's HTTP CPU; an answer without ``Content-Encoding`` is its body as it came, set
    directly (as ``read()`` would leave it).  An encoded one is read by httpx.
    """
    response = _LeanResponse(answer.status, stream=httpx.ByteStream(answer.body),
                             extensions=_HTTP11, default_encoding=default_encoding)
    response.defer_headers(answer.headers)
    if b"content-encoding" in answer.fields:
        response.read()
    else:
        response._content = answer.body
        response.is_stream_consumed = response.is_closed = True
    return response


def _extra_lines(headers: Any, taken: frozenset[bytes]) -> bytes | None:
    """The request's own headers as head lines, or None when the short path cannot write
    them as httpx would (not a dict of str, not printable ASCII, or a header httpx merges
    with its defaults or content headers)."""
    if not headers:
        return b""
    if type(headers) is not dict:  # what the SDK passes (an ABC check costs more)
        return None
    lines = []
    for name, value in headers.items():
        if not (isinstance(name, str) and isinstance(value, str)):
            return None
        if not (name.isascii() and value.isascii() and name.isprintable()
                and value.isprintable()) or name.lower().encode() in taken:
            return None
        lines.append(f"{name}: {value}\r\n".encode("ascii"))
    return b"".join(lines)


class LeanClient(httpx.AsyncClient):
    """``httpx.AsyncClient`` over a :class:`LeanTransport`, with a short path for the SDK's
    requests (module docstring).

    The short path writes what httpx would: the request line, ``Host``, the client's
    default headers (read from ``self.headers`` and prepared again if they change), the
    request's headers, then ``Content-Length`` and ``Content-Type`` for a ``json=`` body
    encoded as httpx encodes it.  Its answers are ``httpx.Response`` objects with the
    same status, headers, body and ``http_version``, and its failures the transport's
    httpx errors carrying their request.  A client given auth, event hooks, a base URL or
    query parameters, and every request once the cookie jar holds a cookie, takes httpx's
    path.  Differences from httpx's path: no ``HTTP Request`` log line, no ``elapsed``
    on the answer, and a redirect's ``next_request`` is not prepared (the client does not
    follow redirects either way).
    Proxies from the environment are not used (``trust_env=False``): the simulated users
    talk to the services directly.
    """

    _CONTENT_HEADERS = frozenset({b"host", b"content-length", b"content-type",
                                  b"transfer-encoding"})

    def __init__(self, transport: LeanTransport, *, timeout: float | httpx.Timeout) -> None:
        super().__init__(transport=transport, timeout=timeout, trust_env=False)
        self._lean = transport
        self._targets: dict[str, _Target] = {}
        self._defaults_seen: list[tuple[bytes, bytes]] = []
        self._taken: frozenset[bytes] = self._CONTENT_HEADERS
        self._base_checked: httpx.URL | None = None
        self._timeout_seen: httpx.Timeout | None = None
        self._timeout_dict: dict[str, float | None] = {}
        self._base_empty = False

    async def request(  # type: ignore[override]  # the same signature, spelled loosely
            self, method: str, url: httpx.URL | str, *, json: Any = None,
            headers: Any = None, **options: Any) -> httpx.Response:
        """httpx's ``request``, by the short path when it applies (class docstring)."""
        message = None
        if isinstance(url, str) and self._plain() and not _custom(options):
            message = self._message(method, url, json, headers)
        if message is None:
            return await super().request(method, url, json=json, headers=headers, **options)
        target, head, body = message
        try:
            answer = await self._lean.exchange(
                target.host, target.port, head + body, method, self._timeouts())
        except httpx.RequestError as exc:
            exc.request = self._rebuild(method, target, head, body)
            raise
        response = _answer(answer, self._default_encoding)
        response._rebuild = functools.partial(self._rebuild, method, target, head, body)
        if b"set-cookie" in answer.fields:
            self.cookies.extract_cookies(response)
        return response

    def _timeouts(self) -> dict[str, float | None]:
        """The client's timeouts as httpx hands them to a transport (kept while the
        client's ``Timeout``, an immutable value, is the same object)."""
        timeout = self.timeout
        if timeout is not self._timeout_seen:
            self._timeout_seen, self._timeout_dict = timeout, timeout.as_dict()
        return self._timeout_dict

    def _plain(self) -> bool:
        """No client-level setting that the short path would have to apply."""
        hooks = self.event_hooks
        return (self.auth is None and not self.params and self._no_base_url()
                and not hooks["request"] and not hooks["response"] and not self.cookies)

    def _no_base_url(self) -> bool:
        """Whether the client has no base URL (httpx's URLs are immutable: the answer is
        kept for the same object)."""
        base = self.base_url
        if base is not self._base_checked:
            self._base_checked = base
            self._base_empty = not base.host and not base.raw_path.strip(b"/")
        return self._base_empty

    def _message(self, method: str, url: str, json: Any,
                 headers: Any) -> tuple[_Target, bytes, bytes] | None:
        """(the target, the request's head, its body) as httpx would write them, or None
        when only httpx's path can (class docstring)."""
        target = self._target(url)
        extra = _extra_lines(headers, self._taken)
        if target is None or extra is None or not method.isalpha() or not method.isupper():
            return None
        body = b""
        if json is not None:
            encode = _httpx_json()
            if encode is None:
                return None
            try:
                body = encode(json)
            except (TypeError, ValueError):
                return None  # httpx raises its own error for it
            extra += b"Content-Length: %d\r\nContent-Type: application/json\r\n" % len(body)
        elif method in ("POST", "PUT", "PATCH"):
            return None  # httpx adds "Content-Length: 0"; rare enough to leave to it
        head = b"%s %s HTTP/1.1\r\n%s%s\r\n" % (method.encode("ascii"), target.path,
                                                  target.defaults, extra)
        return target, head, body

    def _target(self, url: str) -> _Target | None:
        """``url`` parsed by httpx and its head prefix, prepared once (None for a URL the
        transport does not take: httpx's path then raises what it raises)."""
        defaults = self.headers.raw
        if defaults != self._defaults_seen:  # the client's headers changed: prepare again
            self._targets.clear()
            self._defaults_seen = defaults
            self._taken = self._CONTENT_HEADERS | {name.lower() for name, _ in defaults}
        target = self._targets.get(url)
        if target is None:
            parsed = httpx.URL(url)
            if parsed.scheme != "http" or not parsed.host or parsed.is_relative_url:
                return None
            lines = [b"Host: " + parsed.netloc]
            lines.extend(name + b": " + value for name, value in defaults)
            target = _Target(url=parsed, host=parsed.host, port=parsed.port or 80,
                             path=parsed.raw_path, defaults=_CRLF.join(lines) + _CRLF)
            if len(self._targets) >= MAX_PREPARED_URLS:
                self._targets.clear()
            self._targets[url] = target
        return target

    def _rebuild(self, method: str, target: _Target, head: bytes, body: bytes) -> httpx.Request:
        """The ``httpx.Request`` of what the short path sent (for errors and redirects)."""
        headers = [tuple(line.split(b": ", 1)) for line in head.split(_CRLF)[1:] if line]
        return httpx.Request(method, target.url, headers=headers, content=body,
                             extensions={"timeout": self.timeout.as_dict()})


def _custom(options: Mapping[str, Any]) -> bool:
    """Whether a ``request`` call asks for more than the short path does: any argument
    other than ``json``/``headers`` that is not httpx's default."""
    for name, value in options.items():
        default = httpx.USE_CLIENT_DEFAULT if name in _CLIENT_DEFAULTED else None
        if value is not default:
            return True
    return False


_CLIENT_DEFAULTED = frozenset({"auth", "follow_redirects", "timeout"})
