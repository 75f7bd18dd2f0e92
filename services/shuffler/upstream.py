"""The shuffler's HTTP link to the server (analyzer): public documents and batch delivery.

Only these requests leave the shuffler (docs/architecture.md, "Server"), every one with
the shuffler's bearer credential, so the server can tell them from anything else:

- ``GET /v1/campaigns/{cid}`` and ``GET /v1/campaigns/{cid}/hpke-config``: the public
  documents the shuffler serves to clients and consults for submissions, through one
  bounded single-flight cache (:mod:`.cache`).  The key config is immutable; the view
  is immutable once the campaign has ended (``done``, ``failed``, ``aborted``) and
  otherwise kept ``cache_seconds``.  An unknown campaign (404) is remembered for
  ``UNKNOWN_SECONDS`` in a table of its own, and lookups of campaigns the shuffler
  holds no document of share one hard cap, whatever the route and the source:
  at most ``unknown_lookups_per_minute`` in any 60 seconds (beyond it a 503 with
  ``Retry-After``, :class:`LookupBudgetError`), so a flood of made-up ids costs the
  server at most that many requests a minute per shuffler process and evicts no real
  campaign.
  A burst of requests costs at most one upstream request per document and TTL; while
  the server cannot be reached an expired document is served (configuration, key and
  published parameters never change, only the phase moves forward, and the storage,
  not the view, closes a round).
- ``GET /livez`` (readiness).
- ``PUT .../rounds/{round}/batches/{batch_id}``: one chunk of a released batch; the
  server queues it for decoding (``202``, a receipt in ``state: "queued"``) or answers
  a repeat with its receipt, either way an acknowledgement.
- ``POST .../batches/{batch_id}/complete``: ``unavailable`` (503, with the number of
  ``queued_chunks``) while the server is still decoding chunks of the round, retried;
  then ``202`` while the server computes the round's completion in the background (its
  job's state, :class:`PendingCompletion`), asked again after ``Retry-After``, until the
  completion itself.

The connection pool is bounded (``max_connections``) and waiting for a connection is
bounded too (``pool_timeout``): a dead or saturated server makes requests fail fast
with :class:`UpstreamError` (a 503 problem to clients), never a queue of waiting
requests.  Every path segment is percent-escaped (:func:`server_path`), although the
HTTP edge only lets identifiers of ``ID_PATTERN`` through.

Requests carry nothing about users: no forwarding headers, no timing (chunks leave
after the round is closed; document fetches are shared by everyone who asks).

For an ``https://`` server URL the link verifies the server's certificate against the
system's trust store, or only against ``ca_file`` (``SERVER_CA_FILE``) when a private CA
signed it (deploy/tls/); a refused certificate is reported as such in the round's
``last_error``.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from segshuffle.client.retry import retry_after_seconds
from segshuffle.client.tls import certificate_error, trust
from segshuffle.wire.models import (
    BatchChunk,
    BatchCompletion,
    CampaignView,
    ChunkReceipt,
    CompletionPending,
    HpkeConfig,
)

from ..http_cache import strong_etag
from ..rate_limit import WindowCap
from .cache import Fetched, SingleFlightCache


def server_path(*segments: str | int) -> str:
    """``/v1/campaigns/...`` from raw segments, each percent-escaped (no ``/ ? # %``)."""
    return "/v1/campaigns/" + "/".join(quote(str(s), safe="") for s in segments)


@dataclass(frozen=True)
class PendingCompletion:
    """A ``202`` answer to a completion request: the server's job is waiting or being
    computed (``job``), and the server asked for ``retry_after`` seconds (``None``: no
    usable header) before the next request."""

    job: CompletionPending
    retry_after: float | None

    def describe(self) -> str:
        """The round's ``last_error`` meanwhile: what the server is doing, for how long."""
        job = self.job
        what = "optimizing round 2's parameters" if job.round == 1 else "decoding the round"
        if job.state == "computing":
            text = f"the server is {what} ({job.computing_seconds or 0.0:.0f} s so far"
        else:
            text = f"the server has queued the round's completion ({job.waiting_seconds:.0f} s"
        text += f", attempt {job.attempts})" if job.attempts > 1 else ")"
        if job.last_error:
            text += f"; the last attempt failed: {job.last_error}"
        return text


class UpstreamError(Exception):
    """A request to the server failed (network error or a non-2xx answer).

    ``status`` is ``None`` for network errors; ``problem`` is the name of the
    server's RFC 9457 problem type when it sent one (``wrong-phase``...); ``members``
    are the problem's extension members with number values (``queued_chunks``...);
    ``retry_after`` the seconds of the answer's ``Retry-After`` header, if it had one
    in delay-seconds form (:func:`retry_after_seconds`).
    """

    def __init__(self, message: str, *, status: int | None = None,
                 problem: str | None = None, members: dict[str, int] | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem = problem
        self.members = dict(members or {})
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """Worth retrying soon: network errors, 5xx and 429."""
        return self.status is None or self.status >= 500 or self.status == 429


class LookupBudgetError(UpstreamError):
    """A lookup of a campaign the shuffler holds nothing for, refused without a request
    to the server: the cap on such lookups (:data:`UNKNOWN_LOOKUPS_PER_MINUTE`) is spent
    for ``retry_after`` more seconds.  A transient 503, like a saturated server."""

    def __init__(self, retry_after: float) -> None:
        self.seconds = max(1, math.ceil(retry_after))
        """``retry_after`` in whole seconds, at least 1 (the ``Retry-After`` header)."""
        super().__init__(UNKNOWN_LOOKUPS_REFUSED.format(seconds=self.seconds), status=503,
                         retry_after=self.seconds)


MAX_PROBLEM_MEMBERS = 16
"""Number members of a problem document kept in :attr:`UpstreamError.members`."""


def _problem(response: httpx.Response) -> tuple[str | None, dict[str, int]]:
    """The name of a problem answer's type (``None`` if it is not one of ours) and its
    integer extension members (at most :data:`MAX_PROBLEM_MEMBERS`)."""
    try:
        body = response.json()
    except ValueError:
        return None, {}
    if not isinstance(body, dict):
        return None, {}
    kind = body.get("type")
    if not (isinstance(kind, str) and kind.startswith("urn:segshuffle:error:")):
        return None, {}
    members = {key: value for key, value in list(body.items())[:MAX_PROBLEM_MEMBERS + 4]
               if key != "status" and isinstance(value, int) and not isinstance(value, bool)}
    return kind.removeprefix("urn:segshuffle:error:"), members


@dataclass(frozen=True)
class Document:
    """A public document exactly as the server sent it, with its parsed form and ETag."""

    body: bytes
    value: BaseModel
    immutable: bool
    etag: str


KEY_CONFIG = "hpke-config"
VIEW = "view"
FINAL_PHASES = frozenset({"done", "failed", "aborted"})
"""Phases a campaign never leaves: its view is immutable from then on."""

UNKNOWN_SECONDS = 2.0
"""How long the server's "no such campaign" is believed (a campaign created meanwhile is
seen at most this late)."""
UNKNOWN_ENTRIES = 4096
"""Unknown campaign ids remembered at most (least recently seen forgotten first)."""
UNKNOWN_LOOKUPS_PER_MINUTE = 120
"""The default cap: lookups, all routes and sources together, of campaigns the shuffler
holds no document of, in any 60 seconds.  A real campaign costs one when the shuffler
first serves it (its other document is then fetched as a known campaign's), and an id
polled before its campaign exists one per :data:`UNKNOWN_SECONDS`."""
UNKNOWN_LOOKUP_WINDOW = 60.0
"""The window of the cap, in seconds."""
UNKNOWN_LOOKUPS_REFUSED = ("too many lookups of campaigns this shuffler does not know; "
                           "retry in {seconds} s")


class LinkObserver:
    """What a :class:`ServerLink` reports (for metrics); this base class ignores it all."""

    def upstream_error(self, status: int | None, problem: str | None) -> None:
        """A request to the server failed (``status`` None: unreachable)."""

    def chunk_forwarded(self) -> None:
        """A chunk was sent to the server (retries count again)."""

    def chunk_acknowledged(self, receipt: ChunkReceipt) -> None:
        """The server answered a chunk with a valid receipt."""

    def unknown_lookup_refused(self) -> None:
        """A lookup of a campaign the shuffler holds nothing for was refused (the cap)."""


class ServerLink:
    """Async client of the server for the shuffler (see the module docstring)."""

    observer: LinkObserver = LinkObserver()

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 120.0,
        cache_seconds: float = 1.0,
        cache_entries: int = 1024,
        max_connections: int = 16,
        pool_timeout: float = 2.0,
        document_timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: str | None = None,
        unknown_lookups_per_minute: int = UNKNOWN_LOOKUPS_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``ca_file``: PEM certificates of the CA trusted for an ``https://`` server URL
        instead of the system's store (``SEGSHUFFLE_SHUFFLER_SERVER_CA_FILE``); a file
        that cannot be read or holds no certificate is a ``ValueError`` here, at startup.
        ``unknown_lookups_per_minute``: the cap of :meth:`document`
        (``SEGSHUFFLE_SHUFFLER_UNKNOWN_LOOKUPS_PER_MINUTE``).  ``clock``: the monotonic
        clock of the document cache, the unknown ids' table and the cap."""
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            verify=trust(ca_file),
            timeout=httpx.Timeout(timeout, connect=min(5.0, timeout), pool=pool_timeout),
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections),
            transport=transport,
            headers={"User-Agent": "segshuffle-shuffler", "Authorization": f"Bearer {token}"},
        )
        self._document_timeout = httpx.Timeout(document_timeout,
                                               connect=min(5.0, document_timeout),
                                               pool=pool_timeout)
        self.cache_seconds = cache_seconds
        self._clock = clock
        self.documents: SingleFlightCache[Document | None] = SingleFlightCache(
            max_entries=cache_entries, ttl=cache_seconds,
            min_refresh=min(0.25, cache_seconds), clock=clock)
        self._unknown: OrderedDict[str, float] = OrderedDict()
        """Campaign ids the server did not know, and until when that answer holds."""
        self.unknown_lookups = WindowCap(unknown_lookups_per_minute, UNKNOWN_LOOKUP_WINDOW,
                                         clock=clock)
        """The cap on lookups of campaigns the shuffler holds no document of."""

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            self.observer.upstream_error(None, None)
            refused = certificate_error(exc)
            if refused is not None:  # kept transient: the operator may fix the CA and resume
                raise UpstreamError(f"server certificate not trusted: {refused}") from None
            raise UpstreamError(f"server unreachable: {type(exc).__name__}") from None
        if response.status_code >= 400:
            problem, members = _problem(response)
            self.observer.upstream_error(response.status_code, problem)
            raise UpstreamError(
                f"server answered {response.status_code}"
                + (f" ({problem})" if problem else ""),
                status=response.status_code,
                problem=problem,
                members=members,
                retry_after=retry_after_seconds(response.headers.get("retry-after")),
            )
        return response

    # -- public documents ----------------------------------------------------------------
    async def _fetch_document(self, kind: str, campaign_id: str) -> Fetched[Document | None]:
        path = server_path(campaign_id) + ("" if kind == VIEW else "/" + KEY_CONFIG)
        try:
            response = await self._request("GET", path, timeout=self._document_timeout)
        except UpstreamError as exc:
            if exc.status == 404:
                return Fetched(None)
            raise
        model: type[BaseModel] = CampaignView if kind == VIEW else HpkeConfig
        try:
            value = model.model_validate_json(response.content)
        except ValidationError:
            raise UpstreamError(f"server sent an invalid {kind} document") from None
        immutable = kind == KEY_CONFIG or getattr(value, "phase", None) in FINAL_PHASES
        document = Document(response.content, value, immutable, strong_etag(response.content))
        return Fetched(document, immutable)

    async def document(self, kind: str, campaign_id: str, *,
                       fresh: bool = False) -> Document | None:
        """The ``kind`` (``view`` or ``hpke-config``) document of a campaign, ``None`` if the
        server does not know the campaign (cached, single flight).

        Unknown ids cost the server little: the answer "unknown" is remembered for
        :data:`UNKNOWN_SECONDS` (at most :data:`UNKNOWN_ENTRIES` ids, apart from the
        documents so that a flood of unknown ids evicts no real campaign), and a lookup
        of a campaign the shuffler holds neither document of (nor a fetch of one in
        flight) passes the cap :attr:`unknown_lookups` first, one budget for every route
        and every source.  Beyond it the answer is :class:`LookupBudgetError` (a 503
        with ``Retry-After``) without a request to the server.

        The cap is this process's own, not counted in the shared database: a refusal
        must cost less than the lookup it saves, and a count in the database would make
        every made-up id a write to the store that every submission waits on.  The
        server's cost is therefore at most the cap times the number of replicas, which
        the operator sets the cap for.
        """
        if kind not in (VIEW, KEY_CONFIG):
            raise ValueError(f"unknown document kind {kind!r}")
        key = (kind, campaign_id)
        if not self._holds(campaign_id):
            if self._still_unknown(campaign_id):
                return None
            self._admit_lookup()
        fetched = await self.documents.get(
            key, lambda: self._fetch_document(kind, campaign_id),
            fresh=fresh, stale_on_error=_serve_stale)
        if fetched.value is None:
            self.documents.discard(key)
            self._remember_unknown(campaign_id)
        return fetched.value

    def _holds(self, campaign_id: str) -> bool:
        """Whether the cache holds a document of the campaign (fresh or not) or fetches
        one: then the campaign exists, and its documents are fetched outside the cap
        (at most one fetch per document and TTL, for at most ``cache_entries``)."""
        documents = self.documents
        return documents.knows((VIEW, campaign_id)) or documents.knows((KEY_CONFIG, campaign_id))

    def _admit_lookup(self) -> None:
        """Take one lookup of the cap, or raise :class:`LookupBudgetError`."""
        wait = self.unknown_lookups.acquire()
        if wait > 0:
            self.observer.unknown_lookup_refused()
            raise LookupBudgetError(wait)

    def _still_unknown(self, campaign_id: str) -> bool:
        until = self._unknown.get(campaign_id)
        if until is None:
            return False
        if self._clock() < until:
            return True
        del self._unknown[campaign_id]
        return False

    def _remember_unknown(self, campaign_id: str) -> None:
        self._unknown[campaign_id] = self._clock() + UNKNOWN_SECONDS
        self._unknown.move_to_end(campaign_id)
        while len(self._unknown) > UNKNOWN_ENTRIES:
            self._unknown.popitem(last=False)

    async def campaign(self, campaign_id: str, *, fresh: bool = False) -> CampaignView | None:
        """The public view of a campaign, ``None`` if the server does not know it."""
        document = await self.document(VIEW, campaign_id, fresh=fresh)
        if document is None:
            return None
        assert isinstance(document.value, CampaignView)
        return document.value

    def forget(self, campaign_id: str) -> None:
        """Drop the cached view (the phase has moved on)."""
        self.documents.discard((VIEW, campaign_id))

    # -- batches -------------------------------------------------------------------------
    async def put_chunk(self, campaign_id: str, round_number: int, batch_id: str,
                        chunk: BatchChunk) -> ChunkReceipt:
        self.observer.chunk_forwarded()
        response = await self._request(
            "PUT", server_path(campaign_id, "rounds", round_number, "batches", batch_id),
            json=chunk.model_dump(mode="json"),
        )
        try:
            receipt = ChunkReceipt.model_validate(response.json())
        except (ValueError, ValidationError):
            raise UpstreamError("server sent an invalid chunk receipt") from None
        self.observer.chunk_acknowledged(receipt)
        return receipt

    async def complete(self, campaign_id: str, round_number: int,
                       batch_id: str) -> BatchCompletion | PendingCompletion:
        """Ask the server to finish a round: its completion once computed, else (``202``)
        the state of the server's completion job and how long the server asked to wait."""
        response = await self._request(
            "POST",
            server_path(campaign_id, "rounds", round_number, "batches", batch_id, "complete"),
        )
        try:
            if response.status_code == 202:
                return PendingCompletion(
                    CompletionPending.model_validate(response.json()),
                    retry_after_seconds(response.headers.get("retry-after")))
            completion = BatchCompletion.model_validate(response.json())
        except (ValueError, ValidationError):
            raise UpstreamError("server sent an invalid completion") from None
        self.forget(campaign_id)  # the phase has moved on
        return completion

    async def alive(self) -> bool:
        try:
            await self._request("GET", "/livez", timeout=self._document_timeout)
        except UpstreamError:
            return False
        return True


def _serve_stale(exc: BaseException) -> bool:
    """An expired document is served instead of a transient upstream failure."""
    return isinstance(exc, UpstreamError) and exc.transient
