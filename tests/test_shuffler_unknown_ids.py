"""Unknown campaign ids do not fan out to the server: the answer "unknown" is remembered,
and lookups of campaigns the shuffler holds nothing for pass one hard cap, whatever the
route and the source (``SEGSHUFFLE_SHUFFLER_UNKNOWN_LOOKUPS_PER_MINUTE`` in any 60 s).

Time is a fake clock handed to the link, so the windows are exact and nothing depends on
how fast the machine runs the requests.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from segshuffle.services.shuffler import upstream
from segshuffle.services.shuffler.app import create_app
from segshuffle.services.shuffler.settings import Settings
from segshuffle.services.shuffler.upstream import UNKNOWN_SECONDS, ServerLink

from .test_client_messages import _view

PROBLEM = "application/problem+json"
CAP = 120
"""The cap these tests set (the default's order of magnitude)."""
KNOWN = "c1"  # the campaign of _view()
KNOWN_VIEW, _ = _view()


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class CountingServer:
    """The server, scripted: knows campaign ``KNOWN`` only, records when each request
    arrived (by the fake clock) and what it asked for."""

    clock: Clock
    arrivals: list[float] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrivals.append(self.clock.now)
        self.paths.append(request.url.path)
        if request.url.path == f"/v1/campaigns/{KNOWN}":
            return httpx.Response(200, json=KNOWN_VIEW.model_dump(mode="json"))
        if request.url.path == f"/v1/campaigns/{KNOWN}/hpke-config":
            return httpx.Response(200, json=KNOWN_VIEW.hpke_config.model_dump(mode="json"))
        return httpx.Response(404, json={"type": "urn:segshuffle:error:unknown-campaign",
                                         "title": "Unknown campaign", "status": 404})


def _link(server: CountingServer, cap: int = CAP) -> ServerLink:
    return ServerLink("http://server", "shuffler-credential",
                      transport=httpx.MockTransport(server), clock=server.clock,
                      unknown_lookups_per_minute=cap)


def most_in_any_window(arrivals: list[float], window: float) -> int:
    """The most arrivals in any half-open interval of ``window`` seconds (the interval
    with the most starts at an arrival)."""
    times = sorted(arrivals)
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


# -- the link ---------------------------------------------------------------------------

def test_one_unknown_id_asked_many_times_costs_one_request_per_remembered_answer() -> None:
    server = CountingServer(Clock())

    async def run() -> list[object]:
        link = _link(server)
        try:
            answers = [await link.document("view", "nobody") for _ in range(200)]
            server.clock.now += UNKNOWN_SECONDS  # the answer "unknown" has expired
            answers.append(await link.document("view", "nobody"))
            return answers
        finally:
            await link.aclose()

    assert asyncio.run(run()) == [None] * 201
    assert server.paths == ["/v1/campaigns/nobody"] * 2


def test_the_cap_holds_over_any_window_and_recovers_after_it() -> None:
    """Made-up ids one after another for three simulated minutes: never more than the cap
    reaches the server in any 60 s, refusals say when the cap has room again, and a
    refusal costs nothing (the next minute admits a full cap again)."""
    server = CountingServer(Clock())
    refusals: list[int] = []

    async def run() -> None:
        link = _link(server)
        try:
            for i in range(3000):
                server.clock.now += 180.0 / 3000
                try:
                    assert await link.document("view", f"made-up-{i}") is None
                except upstream.LookupBudgetError as exc:
                    assert exc.status == 503 and exc.transient
                    refusals.append(exc.seconds)
        finally:
            await link.aclose()

    asyncio.run(run())
    assert most_in_any_window(server.arrivals, 60.0) == CAP
    assert len(server.arrivals) == CAP * 3  # the cap is used whole in each minute, no more
    assert len(refusals) == 3000 - CAP * 3
    assert min(refusals) >= 1 and max(refusals) <= 60


def test_a_held_campaign_is_not_counted_and_served_while_the_cap_is_spent() -> None:
    server = CountingServer(Clock())

    async def run() -> None:
        link = _link(server, cap=2)
        try:
            assert await link.document("view", KNOWN) is not None  # one of the cap
            assert await link.document("view", "made-up") is None  # the other
            with pytest.raises(upstream.LookupBudgetError):
                await link.document("view", "made-up-too")
            # the key config of a campaign whose view is held is not a lookup of an
            # unknown campaign, and the held view is refreshed after its TTL outside it
            assert await link.document("hpke-config", KNOWN) is not None
            server.clock.now += 5.0
            assert await link.document("view", KNOWN, fresh=True) is not None
        finally:
            await link.aclose()

    asyncio.run(run())
    assert server.paths == [f"/v1/campaigns/{KNOWN}", "/v1/campaigns/made-up",
                            f"/v1/campaigns/{KNOWN}/hpke-config", f"/v1/campaigns/{KNOWN}"]


# -- the shuffler over HTTP -------------------------------------------------------------

ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/v1/campaigns/{cid}", {}),
    ("GET", "/v1/campaigns/{cid}/hpke-config", {}),
    ("GET", "/v1/campaigns/{cid}/rounds/1", {}),
    ("POST", "/v1/campaigns/{cid}/enrollments", {"json": {}}),
    ("POST", "/v1/campaigns/{cid}/rounds/1/submissions",
     {"json": {"level": "A" * 107}, "headers": {"Authorization": "Bearer " + "t" * 43}}),
]
SOURCES = 44
SIMULATED_SECONDS = 147.0


@pytest.fixture
def shuffler(tmp_path: Path) -> Iterator[tuple[TestClient, CountingServer]]:
    """A shuffler with open enrollment and no per-source limits (the cap alone is on
    trial), its link to a counting server on a fake clock."""
    settings = Settings(database=str(tmp_path / "shuffler.sqlite3"),
                        server_url="http://server", server_token="s", operator_token="o",
                        enrollment="open", enroll_rate=0, submit_rate=0, read_rate=0,
                        unknown_lookups_per_minute=CAP)
    server = CountingServer(Clock())
    with TestClient(create_app(settings, link=_link(server)),
                    raise_server_exceptions=False) as client:
        yield client, server


@pytest.mark.parametrize("ids", [1320, pytest.param(4400, marks=pytest.mark.slow)])
def test_a_flood_over_routes_and_sources_costs_the_server_at_most_the_cap(
        shuffler: tuple[TestClient, CountingServer], ids: int) -> None:
    """Distinct made-up ids over 5 routes from 44 sources in 147 simulated seconds (44
    requests at a time, one per source; 1,320 ids in the fast tier, 4,400 in the slow
    one): measured, 360 requests reach the server either way, 120 in any 60 s (CAP *
    ceil(147 / 60)), where a rate budget of 20 per second with bursts of 100 lets 3,039
    of the 4,400 through, 1,299 of them in one minute.  Every other answer is
    ``unavailable`` (503) with ``Retry-After``, and the metrics count each refusal."""
    client, server = shuffler
    app = client.app
    step = SIMULATED_SECONDS / ids

    async def flood() -> list[httpx.Response]:
        http = [httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app, client=(f"10.0.{n}.1", 40000)),
                    base_url="http://shuffler") for n in range(SOURCES)]
        answers: list[httpx.Response] = []
        try:
            for first in range(0, ids, SOURCES):
                calls = []
                for n in range(SOURCES):
                    i = first + n
                    server.clock.now += step
                    method, path, options = ROUTES[i % len(ROUTES)]
                    calls.append(http[n].request(method, path.format(cid=f"made-up-{i}"),
                                                 **options))
                answers += await asyncio.gather(*calls)
        finally:
            for one in http:
                await one.aclose()
        return answers

    answers = asyncio.run(flood())
    statuses = [a.status_code for a in answers]
    refused = [a for a in answers if a.status_code == 503]
    elapsed = server.arrivals[-1] - server.arrivals[0]
    print(f"unknown-id flood: {ids} ids, {len(ROUTES)} routes, {SOURCES} sources, "
          f"{SIMULATED_SECONDS:.0f} simulated s: {len(server.arrivals)} requests reached the "
          f"server (most in any 60 s: {most_in_any_window(server.arrivals, 60.0)}), "
          f"{len(refused)} answered 503")

    assert set(statuses) == {404, 503}
    assert all(a.headers["content-type"].startswith(PROBLEM) for a in answers)
    assert {a.json()["type"] for a in answers} == {"urn:segshuffle:error:unknown-campaign",
                                                   "urn:segshuffle:error:unavailable"}
    # every lookup the server answered became a 404; nothing else reached it
    assert statuses.count(404) == len(server.arrivals)
    assert all(p.startswith("/v1/campaigns/made-up-") for p in server.paths)
    assert most_in_any_window(server.arrivals, 60.0) <= CAP
    assert len(server.arrivals) <= CAP * math.ceil(SIMULATED_SECONDS / 60.0)
    assert len(server.arrivals) >= CAP and elapsed >= 120.0  # the cap did admit, each minute
    assert all(1 <= int(a.headers["retry-after"]) <= 60 for a in refused)
    metrics = client.get("/metrics").text
    assert f"segshuffle_shuffler_unknown_lookups_refused_total {float(len(refused))}" in metrics


def test_a_refusal_names_the_cap_and_when_to_come_back(
        shuffler: tuple[TestClient, CountingServer]) -> None:
    client, server = shuffler
    for i in range(CAP):
        assert client.get(f"/v1/campaigns/made-up-{i}").status_code == 404
    server.clock.now += 20.0
    answer = client.get("/v1/campaigns/one-more")
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "40"
    assert "too many lookups of campaigns this shuffler does not know" in answer.json()["detail"]
    assert len(server.arrivals) == CAP
    server.clock.now += 40.0
    assert client.get("/v1/campaigns/one-more").status_code == 404  # room again
    assert client.get(f"/v1/campaigns/{KNOWN}").status_code == 200


def test_the_setting_sets_the_cap(tmp_path: Path) -> None:
    settings = Settings(database=str(tmp_path / "s.sqlite3"), server_token="s",
                        operator_token="o", enrollment="open", unknown_lookups_per_minute=7)
    app = create_app(settings)
    assert app.state.service.server.unknown_lookups.limit == 7
    assert Settings.model_fields["unknown_lookups_per_minute"].default == 120
    with pytest.raises(ValueError):
        Settings(database=str(tmp_path / "s.sqlite3"), server_token="s", operator_token="o",
                 enrollment="open", unknown_lookups_per_minute=0)
