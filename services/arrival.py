"""A request body read in two steps: first what has already arrived, then the rest.

Some routes may do less work when the whole body is at hand before they decide anything
(the shuffler authenticates a plain submission inside the statement that stores it), but
must not wait for a body to decide: a client with a bad token that declares a large body
and withholds it is refused at once, not when the body deadline closes its connection.
:meth:`ArrivingBody.arrived` takes the chunks the HTTP server already holds without
waiting for any other, and says whether they are the whole body; :meth:`ArrivingBody.whole`
waits for the rest, after the route has decided it may.

"Without waiting" is exact: the chunks are taken under :func:`asyncio.timeout` with a
deadline already past, which fires at the event loop's next turn, so it cancels a
``receive`` only if that ``receive`` had to suspend, i.e. if no chunk was there. An ASGI
``receive`` that suspends has taken nothing yet, so the cancelled call loses no bytes
(uvicorn's protocols set the chunk aside only after their wait returns), and
:meth:`ArrivingBody.whole` carries on where it stopped.

The services' own HTTP protocol (:mod:`.timeouts`) does better: it knows when a request's
last byte was parsed, and says so in the request's scope (:data:`BODY_ARRIVAL`, an ASGI
extension holding a :class:`BodyArrival`), so :meth:`ArrivingBody.arrived` reads a flag
instead of probing (the probe's timeout costs about 3 microseconds of CPU, 1-2% of a
submission). The probe serves every other server, in-process test transports included.
"""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope

BODY_ARRIVAL = "segshuffle.body_arrival"
"""The ASGI extension (``scope["extensions"]``) of a server that tells when the whole body
of the request has arrived: a :class:`BodyArrival`."""


class BodyArrival:
    """Set by the HTTP protocol once the request's last byte is parsed, when every chunk
    is in the server's hands and a ``receive`` returns them without waiting."""

    __slots__ = ("complete",)

    def __init__(self) -> None:
        self.complete = False


class ArrivingBody:
    """The body of one request, read through its ASGI ``receive`` (read it only here)."""

    __slots__ = ("_arrival", "_chunks", "_receive", "complete")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self._receive = receive
        extensions = scope.get("extensions")
        self._arrival: BodyArrival | None = (None if extensions is None
                                             else extensions.get(BODY_ARRIVAL))
        self._chunks: list[bytes] = []
        self.complete = False
        """Whether every chunk has been taken."""

    async def _take(self) -> None:
        message = await self._receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        if chunk:
            self._chunks.append(chunk)
        self.complete = not message.get("more_body", False)

    async def arrived(self) -> bool:
        """Take every chunk already here, waiting for none; whether that is the whole body.

        A client that disconnected raises :class:`~starlette.requests.ClientDisconnect`,
        as Starlette's own body reading does.  Where the server tells
        (:data:`BODY_ARRIVAL`), nothing is read yet and its word is the answer."""
        if self._arrival is not None:
            return self._arrival.complete
        try:
            async with asyncio.timeout(0):
                while not self.complete:
                    await self._take()
        except TimeoutError:
            pass
        return self.complete

    async def whole(self) -> bytes:
        """The whole body, waiting for whatever has not arrived (the HTTP server's body
        deadline bounds the wait)."""
        while not self.complete:
            await self._take()
        if len(self._chunks) == 1:
            return self._chunks[0]
        joined = b"".join(self._chunks)
        self._chunks = [joined]
        return joined
