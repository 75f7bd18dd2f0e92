"""The shuffler's HTTP link to the server (analyzer): campaign views and batch delivery.

Only three kinds of request leave the shuffler (docs/architecture.md, "Server"):

- ``GET /v1/campaigns/{cid}``: the public campaign view (phase, min_users,
  dropout tolerance, published parameters), cached briefly because submissions
  consult it on every request; the configuration and the parameters are
  immutable, only the phase moves forward, so a cached view is refreshed
  whenever it would refuse a request, and a stale one is used while the server
  cannot be reached (the storage, not the view, closes a released round).
- ``PUT .../rounds/{round}/batches/{batch_id}``: one chunk of a released batch.
- ``POST .../batches/{batch_id}/complete``.

Requests carry the shuffler's bearer credential and nothing about users: no
forwarding headers, no timing (chunks leave after the round is closed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from segshuffle.wire.models import BatchChunk, BatchCompletion, CampaignView, ChunkReceipt


class UpstreamError(Exception):
    """A request to the server failed (network error or a non-2xx answer).

    ``status`` is ``None`` for network errors; ``problem`` is the name of the
    server's RFC 9457 problem type when it sent one (``wrong-phase``...).
    """

    def __init__(self, message: str, *, status: int | None = None,
                 problem: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem = problem

    @property
    def transient(self) -> bool:
        """Worth retrying soon: network errors, 5xx and 429."""
        return self.status is None or self.status >= 500 or self.status == 429


def _problem_name(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    kind = body.get("type") if isinstance(body, dict) else None
    if isinstance(kind, str) and kind.startswith("urn:segshuffle:error:"):
        return kind.removeprefix("urn:segshuffle:error:")
    return None


@dataclass
class _Cached:
    view: CampaignView
    fetched: float


class ServerLink:
    """Async client of the server for the shuffler."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 120.0,
        cache_seconds: float = 1.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=httpx.Timeout(timeout, connect=5.0),
            transport=transport,
            headers={"User-Agent": "segshuffle-shuffler"},
        )
        self._auth = {"Authorization": f"Bearer {token}"}
        self._cache_seconds = cache_seconds
        self._views: dict[str, _Cached] = {}

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"server unreachable: {type(exc).__name__}") from None
        if response.status_code >= 400:
            problem = _problem_name(response)
            raise UpstreamError(
                f"server answered {response.status_code}"
                + (f" ({problem})" if problem else ""),
                status=response.status_code,
                problem=problem,
            )
        return response

    async def campaign(self, campaign_id: str, *, fresh: bool = False) -> CampaignView | None:
        """The public view of a campaign, ``None`` if the server does not know it."""
        cached = self._views.get(campaign_id)
        if (not fresh and cached is not None
                and time.monotonic() - cached.fetched < self._cache_seconds):
            return cached.view
        try:
            response = await self._request("GET", f"/v1/campaigns/{campaign_id}")
        except UpstreamError as exc:
            if exc.status == 404:
                self._views.pop(campaign_id, None)
                return None
            if exc.transient and cached is not None:
                return cached.view  # stale but immutable apart from the phase
            raise
        try:
            view = CampaignView.model_validate(response.json())
        except (ValueError, ValidationError):
            raise UpstreamError("server sent an invalid campaign view") from None
        self._views[campaign_id] = _Cached(view, time.monotonic())
        return view

    async def put_chunk(self, campaign_id: str, round_number: int, batch_id: str,
                        chunk: BatchChunk) -> ChunkReceipt:
        response = await self._request(
            "PUT", f"/v1/campaigns/{campaign_id}/rounds/{round_number}/batches/{batch_id}",
            json=chunk.model_dump(mode="json"), headers=self._auth,
        )
        try:
            return ChunkReceipt.model_validate(response.json())
        except (ValueError, ValidationError):
            raise UpstreamError("server sent an invalid chunk receipt") from None

    async def complete(self, campaign_id: str, round_number: int,
                       batch_id: str) -> BatchCompletion:
        response = await self._request(
            "POST",
            f"/v1/campaigns/{campaign_id}/rounds/{round_number}/batches/{batch_id}/complete",
            headers=self._auth,
        )
        self._views.pop(campaign_id, None)  # the phase has moved on
        try:
            return BatchCompletion.model_validate(response.json())
        except (ValueError, ValidationError):
            raise UpstreamError("server sent an invalid completion") from None

    async def alive(self) -> bool:
        try:
            await self._request("GET", "/livez")
        except UpstreamError:
            return False
        return True
