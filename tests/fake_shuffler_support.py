"""An in-memory shuffler behind ``httpx.MockTransport``, for the SDK's tests of waits and
submission outcomes (tests/test_client_waits.py, tests/test_client_outcomes.py).

It serves the honest slots campaign of docs/test-vectors.json (the view, signed with a key
of its own, the key config and, once round 1 is released, the parameters), enrolls the
tokens clients propose, stores one submission per token and round as the shuffler does
(``already-submitted`` for a second one, ``wrong-phase`` outside the round), and answers
round status.  Two clocks are involved: ``clock`` (the test's, which the clients are given
too) decides when the round-1 status says released and when an outage ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from segshuffle.crypto.documents import sign_view
from segshuffle.wire.models import CampaignView, HpkeConfig, b64url_encode

VECTORS = json.loads((Path(__file__).parents[1] / "docs" / "test-vectors.json").read_text())
HONEST = VECTORS["parameters"][0]  # slots blanket, s = 2, d = 8, n = 1000, 3 levels
CID = HONEST["config"]["id"]
URL = "http://shuffler.test"
_KEY = VECTORS["hpke"][0]
KEY_CONFIG = HpkeConfig(key_id=_KEY["key_id"], kem_id=32, kdf_id=1, aead_id=1,
                        public_key=b64url_encode(bytes.fromhex(_KEY["public_key"])))


class FakeClock:
    """A clock the clients sleep on: ``sleep`` moves it on at once."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


def _problem(status: int, name: str, detail: str = "",
             headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, headers={"content-type": "application/problem+json",
                                           **(headers or {})},
                          json={"type": f"urn:segshuffle:error:{name}", "title": name,
                                "status": status, "detail": detail})


class FakeShuffler:
    """The campaign of :data:`HONEST` behind a mock transport (see the module docstring).

    Faults, per route (``view``, ``key``, ``enroll``, ``submit1``, ``submit2``,
    ``status1``, ``status2``), apply to the next requests in turn: ``"lost"`` (handled,
    then the connection drops before the answer), ``"stored-503"`` (handled, then a 503
    instead of the answer, as a proxy that timed out would say), ``"refused"`` (the
    connection is refused: nothing arrives), ``"reset"`` (nothing handled, the connection
    drops), or an ``httpx.Response`` to answer instead.  ``outage(route, until)`` answers
    every request on ``route`` with 503 until ``clock()`` reaches ``until``.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.signing_key = Ed25519PrivateKey.generate()
        self.server_key = b64url_encode(self.signing_key.public_key().public_bytes_raw())
        self.published_at: float | None = None
        self.round1_released_at: float | None = None
        self.round1_participants: int | None = None
        self.tokens: set[str] = set()
        self.submissions: dict[int, dict[str, dict[str, Any]]] = {1: {}, 2: {}}
        self.requests: list[tuple[str, str, Any]] = []
        self.faults: dict[str, list[Any]] = {}
        self.outages: dict[str, float] = {}
        self.parameters: dict[str, Any] = dict(HONEST["parameters"])

    # -- the test's controls -----------------------------------------------------------
    def fault(self, route: str, *faults: Any) -> None:
        self.faults.setdefault(route, []).extend(faults)

    def outage(self, route: str, until: float) -> None:
        self.outages[route] = until

    @property
    def phase(self) -> str:
        published = self.published_at is not None and self.clock() >= self.published_at
        return "round2" if published else "round1"

    def release1(self, *, status_lag: float = 0.0, after: float = 0.0) -> None:
        """Round 1 released: the view says round 2, with the parameters, ``after`` seconds
        from now; the round-1 status says released ``status_lag`` seconds after that, as
        a shuffler still recording the server's acknowledgement does."""
        self.published_at = self.clock() + after
        self.round1_released_at = self.published_at + status_lag

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def posts(self, round_number: int) -> list[Any]:
        """The bodies of every submission request of a round that reached the shuffler."""
        path = f"/v1/campaigns/{CID}/rounds/{round_number}/submissions"
        return [body for method, where, body in self.requests
                if method == "POST" and where == path]

    # -- serving -----------------------------------------------------------------------
    def view(self) -> CampaignView:
        published = self.phase != "round1"
        view = CampaignView.model_validate({
            "id": CID, "phase": self.phase, "config": HONEST["config"],
            "config_hash": HONEST["config_hash"], "key_id": KEY_CONFIG.key_id,
            "hpke_config": KEY_CONFIG.model_dump(mode="json"),
            "parameters": self.parameters if published else None,
            "parameters_hash": HONEST["parameters_hash"] if published else None})
        return view.model_copy(update={"signatures": sign_view(self.signing_key, view)})

    def _route(self, request: httpx.Request) -> str:
        prefix = f"/v1/campaigns/{CID}"
        routes = {
            f"GET {prefix}": "view", f"GET {prefix}/hpke-config": "key",
            f"POST {prefix}/enrollments": "enroll",
            f"POST {prefix}/rounds/1/submissions": "submit1",
            f"POST {prefix}/rounds/2/submissions": "submit2",
            f"GET {prefix}/rounds/1": "status1", f"GET {prefix}/rounds/2": "status2",
        }
        return routes.get(f"{request.method} {request.url.path}", "unknown")

    def handle(self, request: httpx.Request) -> httpx.Response:
        route = self._route(request)
        queued = self.faults.get(route)
        fault = queued.pop(0) if queued else None
        if fault == "refused":
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        if fault == "reset":
            raise httpx.RemoteProtocolError("connection reset", request=request)
        if isinstance(fault, httpx.Response):
            return fault
        if self.clock() < self.outages.get(route, float("-inf")):
            return _problem(503, "unavailable", "restarting", {"retry-after": "1"})
        response = self._answer(route, request, body)
        if fault == "lost":
            raise httpx.ReadError("the connection dropped before the answer", request=request)
        if fault == "stored-503":
            return _problem(503, "unavailable", "the answer timed out at a proxy")
        return response

    def _answer(self, route: str, request: httpx.Request, body: Any) -> httpx.Response:
        if route == "view":
            return httpx.Response(200, json=self.view().model_dump(mode="json"))
        if route == "key":
            return httpx.Response(200, json=KEY_CONFIG.model_dump(mode="json"))
        if route == "enroll":
            self.tokens.add(body["token"])
            return httpx.Response(201, json={"campaign_id": CID, "token": body["token"]})
        if route in ("submit1", "submit2"):
            return self._submit(int(route[-1]), request, body)
        if route == "status1":
            released = (self.round1_released_at is not None
                        and self.clock() >= self.round1_released_at)
            participants = self.round1_participants
            if participants is None:
                participants = max(len(self.submissions[1]), self.parameters["users"])
            return httpx.Response(200, json={
                "campaign_id": CID, "round": 1, "participants": participants,
                "required": HONEST["config"]["min_users"], "released": released,
                "state": "released" if released else "releasing"})
        if route == "status2":
            return httpx.Response(200, json={
                "campaign_id": CID, "round": 2, "participants": len(self.submissions[2]),
                "required": self.parameters["accounting_users"], "released": False,
                "state": "open"})
        return _problem(404, "not-found", "no such route")

    def _submit(self, round_number: int, request: httpx.Request, body: Any) -> httpx.Response:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if token not in self.tokens:
            return _problem(401, "unauthorized", "unknown token")
        if (round_number == 1) != (self.phase == "round1"):
            return _problem(409, "wrong-phase", f"round {round_number} is not open")
        if token in self.submissions[round_number]:
            return _problem(409, "already-submitted", "this token has already submitted")
        self.submissions[round_number][token] = body
        return httpx.Response(201, json={"campaign_id": CID, "round": round_number,
                                         "accepted": True})
