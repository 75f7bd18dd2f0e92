"""The scale profile's balancer (deploy/scale/shuffler.conf) in front of two shuffler
replicas: the load is shared whatever the users' addresses, and a source's rate limits
hold across the replicas.

A real nginx runs the deployed files, rendered with loopback upstreams (tests/
nginx_support.py); the two replicas are small HTTP servers that count what they receive
(tests/test_proxy_keepalive.py).  Every user of these tests connects from one address,
as users behind one NAT or one proxy (or Docker's port forwarding) reach a balancer:
balancing on the client address sent all of them to one replica.  Fast: a few hundred
requests on loopback.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from segshuffle.wire.problems import PROBLEM_MEDIA_TYPE, ProblemType

from .nginx_support import free_ports, nginx_binary, render_balancer, running_nginx
from .test_proxy_keepalive import _Recorded, recording_upstream

USERS = 240
"""Distinct enrollment tokens sent through the balancer in the spread test."""
ENROLL_BURST, ENROLL_RATE = 10, 0.1
SUBMIT_BURST, SUBMIT_RATE = 30, 1.0
"""The budgets of deploy/scale/shuffler.conf (the shuffler's defaults): requests a source
may send at once, and per second after that."""


@dataclass
class Balancer:
    """nginx on ``url`` in front of two counting replicas."""

    url: str
    replicas: tuple[_Recorded, _Recorded]

    def counts(self) -> list[int]:
        return [len(replica.requests) for replica in self.replicas]

    def forwarded_for(self) -> set[str | None]:
        return {headers.get("x-forwarded-for") for replica in self.replicas
                for _, headers in replica.requests}


@contextmanager
def balancer(tmp_path: Path, **render: object) -> Iterator[Balancer]:
    """deploy/scale/ rendered and running, its shuffler upstream two counting replicas."""
    nginx_binary()
    server_port, shuffler_port, *unused = free_ports(4)
    with ExitStack() as stack:
        (port_1, recorded_1), (port_2, recorded_2) = (
            stack.enter_context(recording_upstream()) for _ in range(2))
        state = tmp_path / "nginx"
        conf = render_balancer(state, servers=unused, shufflers=[port_1, port_2],
                               server_port=server_port, shuffler_port=shuffler_port,
                               **render)  # type: ignore[arg-type]
        stack.enter_context(running_nginx(conf, state, (server_port, shuffler_port)))
        yield Balancer(f"http://127.0.0.1:{shuffler_port}", (recorded_1, recorded_2))


def client(source: str = "127.0.0.1") -> httpx.Client:
    """A client whose connections come from the loopback address ``source``."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30)


def submit(http: httpx.Client, url: str, token: str, **headers: str) -> httpx.Response:
    return http.post(f"{url}/v1/campaigns/c/rounds/1/submissions", content=b"{}",
                     headers={"authorization": f"Bearer {token}",
                              "content-type": "application/json", **headers})


def enroll(http: httpx.Client, url: str, **headers: str) -> httpx.Response:
    return http.post(f"{url}/v1/campaigns/c/enrollments", content=b"{}",
                     headers={"content-type": "application/json", **headers})


def assert_shared(counts: list[int], what: str) -> None:
    total = sum(counts)
    assert total > 0, what
    shares = [count / total for count in counts]
    assert all(0.4 <= share <= 0.6 for share in shares), (
        f"{what}: the replicas took {counts} of {total} requests")


def assert_rate_limited(answer: httpx.Response, retry_after: int, what: str) -> None:
    """The balancer's refusal is the shuffler's own ``rate-limited`` problem document."""
    assert answer.status_code == 429, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["retry-after"] == str(retry_after)
    assert answer.headers["segshuffle-service"] == "shuffler"
    assert answer.json() == {
        "type": "urn:segshuffle:error:rate-limited", "title": "Too many requests",
        "status": 429,
        "detail": f"too many {what} from this address; retry in {retry_after} s"}


def test_users_behind_one_address_reach_both_replicas(tmp_path: Path) -> None:
    """One source, many users (distinct tokens), one request after the other and eight at
    once: each replica takes 40-60% of them (the limits are off, as in a load test)."""
    with balancer(tmp_path, source_limits="off") as lb, client() as http:
        for index in range(USERS // 2):
            assert submit(http, lb.url, f"token-{index}").status_code == 200
        assert_shared(lb.counts(), "sequential submissions")
        before = lb.counts()
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: submit(http, lb.url, f"token-{i}"),
                                    range(USERS // 2, USERS)))
        assert {answer.status_code for answer in answers} == {200}
        assert_shared([now - then for now, then in zip(lb.counts(), before, strict=True)],
                      "concurrent submissions")
        before = lb.counts()
        for _ in range(40):
            assert enroll(http, lb.url).status_code == 200
            assert http.get(f"{lb.url}/v1/campaigns/c/hpke-config").status_code == 200
        assert_shared([now - then for now, then in zip(lb.counts(), before, strict=True)],
                      "enrollments and reads")
        assert lb.forwarded_for() == {"127.0.0.1"}


def test_a_sources_budget_holds_across_both_replicas(tmp_path: Path) -> None:
    """Enrollments and submissions from one source are counted once for both replicas: at
    most a burst plus what the rate refilled meanwhile passes, split over both; a new
    X-Forwarded-For on each request changes nothing; the operator's routes are not
    limited."""
    with balancer(tmp_path) as lb, client() as http:
        started = time.monotonic()
        answers = [enroll(http, lb.url, **{"x-forwarded-for": f"198.51.100.{i}"})
                   for i in range(ENROLL_BURST * 3)]
        elapsed = time.monotonic() - started
        passed = [a for a in answers if a.status_code == 200]
        assert ENROLL_BURST <= len(passed) <= ENROLL_BURST + math.ceil(elapsed * ENROLL_RATE)
        assert all(count > 0 for count in lb.counts()), lb.counts()
        for refused in (a for a in answers if a.status_code != 200):
            assert_rate_limited(refused, 10, "enrollments")

        before = sum(lb.counts())
        started = time.monotonic()
        answers = [submit(http, lb.url, f"token-{i}") for i in range(SUBMIT_BURST * 2)]
        elapsed = time.monotonic() - started
        passed = [a for a in answers if a.status_code == 200]
        assert SUBMIT_BURST <= len(passed) <= SUBMIT_BURST + math.ceil(elapsed * SUBMIT_RATE)
        assert sum(lb.counts()) - before == len(passed)
        for refused in (a for a in answers if a.status_code != 200):
            assert_rate_limited(refused, 1, "submissions")

        for _ in range(ENROLL_BURST * 2):  # releases and health checks take no budget
            assert http.post(f"{lb.url}/v1/campaigns/c/rounds/1/release").status_code == 200
            assert http.get(f"{lb.url}/readyz").status_code == 200
        assert lb.forwarded_for() == {"127.0.0.1"}


@pytest.mark.parametrize("trusted", [True, False])
def test_the_users_address_comes_from_a_trusted_proxy_only(tmp_path: Path,
                                                            trusted: bool) -> None:
    """Behind a trusted proxy (here 127.0.0.2) each user named in X-Forwarded-For has a
    budget of their own and is the address the replicas see; from any other address the
    header is ignored and the connection's address is the source."""
    with balancer(tmp_path, real_ip_from=["127.0.0.2/32"]) as lb, \
            client("127.0.0.2" if trusted else "127.0.0.3") as http:
        started = time.monotonic()
        passed = {user: sum(enroll(http, lb.url, **{"x-forwarded-for": user}).status_code
                            == 200 for _ in range(ENROLL_BURST))
                  for user in ("198.51.100.7", "198.51.100.8")}
        elapsed = time.monotonic() - started
        if trusted:
            assert list(passed.values()) == [ENROLL_BURST, ENROLL_BURST]
        else:  # one source, one budget
            assert ENROLL_BURST <= sum(passed.values()) <= (
                ENROLL_BURST + math.ceil(elapsed * ENROLL_RATE))
        expected = {"198.51.100.7", "198.51.100.8"} if trusted else {"127.0.0.3"}
        assert lb.forwarded_for() == expected


@pytest.mark.parametrize("service", ["server", "shuffler"])
def test_no_replica_answering_is_the_services_unavailable_problem(tmp_path: Path,
                                                                  service: str) -> None:
    """With every replica down, the balancer's own error is the catalogue's
    ``unavailable`` problem document with Retry-After (clients retry it), not an HTML
    page."""
    nginx_binary()
    server_port, shuffler_port, *down = free_ports(6)  # nothing listens on ``down``
    state = tmp_path / "nginx"
    conf = render_balancer(state, servers=down[:2], shufflers=down[2:],
                           server_port=server_port, shuffler_port=shuffler_port)
    port = server_port if service == "server" else shuffler_port
    with running_nginx(conf, state, (server_port, shuffler_port)), client() as http:
        answer = http.get(f"http://127.0.0.1:{port}/v1/campaigns/c")
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == PROBLEM_MEDIA_TYPE
    assert answer.headers["retry-after"] == "5"
    assert answer.headers["segshuffle-service"] == service
    kind = ProblemType.UNAVAILABLE
    assert answer.json() == {
        "type": kind.uri, "title": kind.title, "status": kind.status,
        "detail": f"no {service} replica answered; retry in 5 s"}
