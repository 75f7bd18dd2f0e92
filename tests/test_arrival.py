"""A body read in two steps (services/arrival.py): what has arrived is taken without
waiting, and nothing is lost when the rest comes later."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import ClientDisconnect
from starlette.types import Message

from segshuffle.services.arrival import BODY_ARRIVAL, ArrivingBody, BodyArrival


class Delivery:
    """An ASGI ``receive`` over a queue that a test fills as the 'network' delivers."""

    def __init__(self, *messages: Message) -> None:
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self.calls = 0
        for message in messages:
            self.queue.put_nowait(message)

    async def __call__(self) -> Message:
        self.calls += 1
        return await self.queue.get()


def chunk(body: bytes, more: bool) -> Message:
    return {"type": "http.request", "body": body, "more_body": more}


def test_a_body_that_arrived_whole_is_taken_without_waiting() -> None:
    async def scenario() -> None:
        body = ArrivingBody({}, Delivery(chunk(b'{"a":', True), chunk(b" 1}", False)))
        assert await body.arrived()
        assert await body.whole() == b'{"a": 1}'
        assert await body.whole() == b'{"a": 1}'  # read once, kept

    asyncio.run(scenario())


def test_a_body_not_yet_here_is_not_waited_for_and_loses_nothing() -> None:
    async def scenario() -> None:
        delivery = Delivery(chunk(b"first ", True))
        body = ArrivingBody({}, delivery)
        started = asyncio.get_running_loop().time()
        assert not await body.arrived()
        assert asyncio.get_running_loop().time() - started < 0.5
        assert not body.complete
        assert not await body.arrived()  # asking again still does not wait
        delivery.queue.put_nowait(chunk(b"second ", True))
        delivery.queue.put_nowait(chunk(b"third", False))
        assert await body.whole() == b"first second third"
        assert delivery.calls >= 4  # the cancelled calls took nothing

    asyncio.run(scenario())


def test_nothing_arrived_then_everything() -> None:
    async def scenario() -> None:
        delivery = Delivery()
        body = ArrivingBody({}, delivery)
        assert not await body.arrived()
        later = asyncio.get_running_loop().call_later(
            0.01, delivery.queue.put_nowait, chunk(b"late", False))
        assert await body.whole() == b"late"
        later.cancel()

    asyncio.run(scenario())


def test_an_empty_body_has_arrived() -> None:
    async def scenario() -> None:
        body = ArrivingBody({}, Delivery(chunk(b"", False)))
        assert await body.arrived()
        assert await body.whole() == b""

    asyncio.run(scenario())


def test_a_disconnected_client_raises_as_starlette_does() -> None:
    async def scenario() -> None:
        body = ArrivingBody({}, Delivery(chunk(b"x", True), {"type": "http.disconnect"}))
        with pytest.raises(ClientDisconnect):
            await body.arrived()

    asyncio.run(scenario())


def test_the_caller_is_not_left_cancelled() -> None:
    """The cancellation that stops the wait is the helper's own: the task goes on, and a
    later sleep is not interrupted."""
    async def scenario() -> None:
        body = ArrivingBody({}, Delivery())
        assert not await body.arrived()
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0.01)

    asyncio.run(scenario())


def test_a_server_that_tells_is_taken_at_its_word() -> None:
    """With the protocol's extension nothing is read (nor probed) to answer
    :meth:`~ArrivingBody.arrived`; the body is read afterwards as usual."""
    async def scenario() -> None:
        for told in (False, True):
            arrival = BodyArrival()
            arrival.complete = told
            delivery = Delivery(chunk(b"body", False))
            body = ArrivingBody({"extensions": {BODY_ARRIVAL: arrival}}, delivery)
            assert await body.arrived() is told
            assert delivery.calls == 0
            assert await body.whole() == b"body"

    asyncio.run(scenario())
