"""Unknown campaign ids do not fan out to the server (issue 23, finding 7): the answer
"unknown" is remembered, and ids the shuffler holds nothing for share one lookup budget."""

from __future__ import annotations

import asyncio

import httpx

from segshuffle.services.shuffler import upstream
from segshuffle.services.shuffler.upstream import ServerLink, UpstreamError


def _link(seen: list[str]) -> ServerLink:
    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(404, json={"type": "about:blank", "title": "not found"})
    return ServerLink("http://server", "shuffler-credential",
                      transport=httpx.MockTransport(server))


def test_one_unknown_id_asked_many_times_costs_one_request() -> None:
    seen: list[str] = []

    async def run() -> list[object]:
        link = _link(seen)
        try:
            return [await link.document("view", "nobody") for _ in range(200)]
        finally:
            await link.aclose()

    assert asyncio.run(run()) == [None] * 200
    assert seen == ["/v1/campaigns/nobody"]


def test_a_flood_of_new_unknown_ids_is_bounded_by_the_lookup_budget() -> None:
    """4,400 distinct made-up ids (the finding): at most the burst reaches the server."""
    seen: list[str] = []

    async def run() -> tuple[int, int]:
        link = _link(seen)
        unknown = refused = 0
        try:
            for i in range(4400):
                try:
                    unknown += await link.document("view", f"made-up-{i}") is None
                except UpstreamError as exc:
                    assert exc.status == 503 and exc.transient
                    refused += 1
        finally:
            await link.aclose()
        return unknown, refused

    unknown, refused = asyncio.run(run())
    assert unknown + refused == 4400
    # the burst plus what the budget refills while the loop runs (well under a second)
    assert len(seen) == unknown <= upstream.UNKNOWN_LOOKUP_BURST + 2 * upstream.UNKNOWN_LOOKUP_RATE
    assert refused >= 4000
