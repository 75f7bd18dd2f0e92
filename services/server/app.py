"""The server's HTTP API (docs/architecture.md, "Server"): :func:`create_app`.

Every request is authenticated before its body is read, bodies are parsed by the
strict models of :mod:`segshuffle.wire.models`, and every error is an RFC 9457
problem (:mod:`segshuffle.services.http_edge`).  The operations themselves live in
:class:`~segshuffle.services.server.service.ServerService` and run in the thread
pool, so decryption and optimization never block the event loop.

The public documents (campaign view, key config) carry a strong ``ETag`` and
``Cache-Control`` and answer ``If-None-Match`` with ``304`` (:mod:`..http_cache`).

A delivered chunk is validated and queued by its request, which answers ``202`` with a
receipt in ``state: "queued"``; the application's decode workers (:mod:`.decoding`,
started and stopped with it) decrypt and count it in the background, and
``GET .../batches/{batch_id}/chunks/{stream}/{chunk_index}`` returns its receipt, decoded
or still queued.

Observability (:mod:`..observability`): one log line per request with method, route
template, status, duration and request id; never a client address, a header, a token or a
ciphertext (uvicorn's access log is off).  ``GET /metrics`` counts requests, chunks queued
and stored (decoded), messages accepted and dropped (by reason) and batches completed;
``GET /docs`` serves Swagger UI from local assets (:mod:`..api_docs`).
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from segshuffle import __version__
from segshuffle.services import errors
from segshuffle.services.api_docs import install_docs
from segshuffle.services.http_cache import document_response
from segshuffle.services.http_edge import (
    bearer_token,
    document_problems,
    health_router,
    install_edge,
    read_json,
)
from segshuffle.services.http_edge import campaign_id as parse_campaign_id
from segshuffle.services.http_edge import round_number as parse_round
from segshuffle.services.observability import Metrics, install_observability
from segshuffle.wire.models import (
    ID_PATTERN,
    MAX_CHUNK_COUNT,
    BatchChunk,
    BatchCompletion,
    CampaignAbort,
    CampaignCreate,
    CampaignList,
    CampaignView,
    ChunkReceipt,
    CompletionPending,
    HpkeConfig,
    Results,
    SigningKey,
)

from ..storage_calls import storage_call as call_storage
from .backends import open_repository
from .completion import CompletionWorkers
from .decoding import DecodeWorkers
from .decrypt import Decryptor
from .keys import KeyStore
from .service import ServerService
from .settings import Settings
from .signing import load_or_create
from .storage_api import ClaimedChunk, CompletionJob

log = logging.getLogger("segshuffle.server")
Role = Literal["admin", "shuffler"]
_ID = re.compile(ID_PATTERN)
_CAMPAIGN = "/v1/campaigns/{campaign_id}"
_BATCH = _CAMPAIGN + "/rounds/{round_number}/batches/{batch_id}"
_CHUNK = _BATCH + "/chunks/{stream}/{chunk_index}"
SECURITY: dict[tuple[str, str], str] = {
    ("GET", "/v1/campaigns"): "adminToken",
    ("POST", "/v1/campaigns"): "adminToken",
    ("POST", _CAMPAIGN + "/abort"): "adminToken",
    ("GET", _CAMPAIGN + "/results"): "adminToken",
    ("GET", "/v1/signing-key"): "adminToken",
    ("PUT", _BATCH): "shufflerToken",
    ("POST", _BATCH + "/complete"): "shufflerToken",
    ("GET", _CHUNK): "shufflerToken",
}
"""The bearer token each authenticated route needs (documented in the OpenAPI schema)."""
LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000
"""Campaigns per page of ``GET /v1/campaigns`` (default, largest)."""
COMPLETION_RETRY_AFTER = 2
"""Seconds the shuffler is asked to wait before it asks again for a round being completed."""
_BODIES: dict[str, type[BaseModel]] = {}
VIEW_MAX_AGE = 1
"""Seconds a client or cache may keep a campaign view that can still change (the key
config and a finished campaign's view are immutable: services/http_cache.py)."""


def _body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI ``requestBody`` of a body parsed by hand (after authentication)."""
    _BODIES[model.__name__] = model
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def authorize(settings: Settings, request: Request, role: Role) -> None:
    """Require the bearer token of ``role``; the other role's token is ``forbidden``.

    Both tokens are compared in constant time, whatever the outcome.
    """
    token = (bearer_token(request.headers.get("authorization")) or "").encode()
    is_admin = hmac.compare_digest(token, settings.admin_token.encode())
    is_shuffler = hmac.compare_digest(token, settings.shuffler_token.encode())
    if (role == "admin" and is_admin) or (role == "shuffler" and is_shuffler):
        return
    if is_admin or is_shuffler:
        raise errors.ForbiddenError(f"this operation needs the {role} credential")
    raise errors.UnauthorizedError(
        "missing or invalid bearer token",
        headers={"WWW-Authenticate": 'Bearer realm="segshuffle-server"'})


def authorize_either(settings: Settings, request: Request) -> None:
    """Require the shuffler's or the admin's bearer token (reads both may make)."""
    token = (bearer_token(request.headers.get("authorization")) or "").encode()
    is_admin = hmac.compare_digest(token, settings.admin_token.encode())
    is_shuffler = hmac.compare_digest(token, settings.shuffler_token.encode())
    if not (is_admin or is_shuffler):
        authorize(settings, request, "shuffler")  # raises unauthorized


def _chunk_identity(stream: str, chunk_index: str) -> tuple[str, int]:
    """The checked (stream, chunk index) of a chunk route's path."""
    if stream not in ("levels", "data"):
        raise errors.InvalidRequestError("stream must be levels or data")
    if not (chunk_index.isascii() and chunk_index.isdigit() and len(chunk_index) <= 7
            and int(chunk_index) < MAX_CHUNK_COUNT):
        raise errors.InvalidRequestError(f"chunk_index must be an integer from 0 to "
                                         f"{MAX_CHUNK_COUNT - 1}")
    return stream, int(chunk_index)


def _batch(campaign_id: str, round_number: str, batch_id: str) -> tuple[str, int, str]:
    """The checked (campaign id, round, batch id) of a batch route's path, in that order."""
    checked = parse_campaign_id(campaign_id), parse_round(round_number)
    if not _ID.fullmatch(batch_id):
        raise errors.InvalidRequestError("batch_id must be 1-64 characters [A-Za-z0-9._-]")
    return *checked, batch_id


class ServerCounters:
    """The server's own metrics (labels: round number, stream, drop reason; never a campaign
    id, so the label set stays bounded)."""

    def __init__(self, metrics: Metrics) -> None:
        self.queued = metrics.counter("chunks_queued", "Batch chunks accepted into the decode "
                                      "queue (retries not counted)", ["round", "stream"])
        self.chunks = metrics.counter("chunks_stored", "Batch chunks decoded and counted by "
                                      "this process (retries of a stored chunk not "
                                      "counted)", ["round", "stream"])
        self.accepted = metrics.counter("messages_accepted", "Messages kept for decoding "
                                        "(null messages included)", ["round", "stream"])
        self.dropped = metrics.counter("messages_dropped", "Messages dropped, by reason",
                                       ["round", "stream", "reason"])
        self.decode_failures = metrics.counter(
            "decode_failures", "Attempts at decoding a queued chunk that failed in this "
            "process (the chunk is retried later; the log says why)", ["round", "stream"])
        self.completions = metrics.counter("batches_completed", "Batch completions answered "
                                           "with the finished round (a repeated request "
                                           "counts again)", ["round"])
        self.pending = metrics.counter("completions_pending", "Batch completion requests "
                                       "answered 202: the round's job is waiting or being "
                                       "computed", ["round"])
        self.computations = metrics.counter(
            "completion_computations", "Round completions computed by this process (round "
            "1: optimizer runs; round 2: decodings), counted as each begins", ["round"])
        self.computation_failures = metrics.counter(
            "completion_failures", "Round completions that failed in this process (retried "
            "later; the log says why)", ["round"])

    def computation(self, job: CompletionJob) -> None:
        """Count a completion job's computation as it begins."""
        self.computations.labels(str(job.round)).inc()

    def computation_failure(self, job: CompletionJob, _: BaseException) -> None:
        """Count a completion job's computation that failed."""
        self.computation_failures.labels(str(job.round)).inc()

    def decode_failure(self, claimed: ClaimedChunk) -> None:
        """Count a failed attempt at decoding a queued chunk."""
        self.decode_failures.labels(str(claimed.round), str(claimed.stream)).inc()

    def chunk(self, receipt: ChunkReceipt) -> None:
        """Count a chunk from its receipt: queued (by the request that delivered it) or
        stored (by the decode worker that counted it)."""
        if receipt.duplicate:
            return
        if receipt.state == "queued":
            self.queued.labels(str(receipt.round), str(receipt.stream)).inc()
            return
        round_, stream = str(receipt.round), str(receipt.stream)
        self.chunks.labels(round_, stream).inc()
        self.accepted.labels(round_, stream).inc(receipt.accepted)
        for reason, count in receipt.failure_counts.items():
            self.dropped.labels(round_, stream, reason[:40]).inc(count)


def create_app(settings: Settings) -> FastAPI:
    """The server application; state lives in ``settings.database``, ``settings.key_dir``
    and the document-signing key file.

    Raises :class:`~.signing.SigningKeyError` if that file exists but is unusable.
    """
    signing_key, created = load_or_create(settings.signing_key_path)
    keys = KeyStore(settings.key_directory)
    repository = open_repository(settings.database, synchronous=settings.synchronous,
                                 pool_size=settings.database_pool_size)
    decryptor = Decryptor(settings.decrypt_workers, settings.parallel_threshold)
    service = ServerService(repository, keys, decryptor, signing_key=signing_key,
                            allow_insecure_parameters=settings.allow_insecure_parameters,
                            shuffler_min_users=settings.shuffler_min_users)

    async def storage_call(function: Callable[..., Any], *args: Any) -> Any:
        return await call_storage(repository, function, *args)

    metrics = Metrics("server")
    counted = ServerCounters(metrics)
    workers = DecodeWorkers(service, concurrency=settings.decode_concurrency,
                            lease_seconds=settings.decode_lease_seconds,
                            idle_seconds=settings.decode_idle_seconds,
                            on_decoded=counted.chunk, on_failed=counted.decode_failure)

    completions = CompletionWorkers(service, lease_seconds=settings.completion_lease_seconds,
                                    idle_seconds=settings.completion_idle_seconds,
                                    on_started=counted.computation,
                                    on_failed=counted.computation_failure)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        workers.start()
        completions.start()
        try:
            yield
        finally:
            await completions.stop()  # a job being computed is given back
            await workers.stop()  # each finishes the chunk it is decoding
            decryptor.close()
            repository.close()

    app = FastAPI(
        title="segshuffle server (analyzer)",
        version=__version__,
        description="Campaigns, HPKE keys, batch intake, parameter optimization and decoding "
                    "for segmented private aggregation in the shuffle model.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    app.state.decode_workers = workers
    app.state.completion_workers = completions
    log.info("document-signing key %s%s", service.signing_public_key,
             " (created)" if created else "")
    app.state.settings = settings
    install_edge(app, settings.max_body_bytes, "server")
    install_observability(app, metrics)
    install_docs(app)

    async def ready() -> None:
        """Ready: the database answers, keys can be written, and every collecting campaign's
        private key loads (a lost key file would make every chunk of it fail)."""
        try:
            ready = await run_in_threadpool(repository.ping) and keys.writable()
        except Exception:  # the database is gone or locked: not ready
            ready = False
        if not ready:
            raise errors.UnavailableError("storage is not available")
        missing = await run_in_threadpool(service.missing_keys)
        if missing:
            listed = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more"
                                                if len(missing) > 5 else "")
            raise errors.UnavailableError(f"the private key of campaign {listed} is missing "
                                          "or unreadable", extra={"campaigns": missing[:100]})

    app.include_router(health_router(ready))

    @app.post("/v1/campaigns", status_code=201, response_model=CampaignView,
              tags=["campaigns"], openapi_extra=_body(CampaignCreate))
    async def create_campaign(request: Request, response: Response) -> CampaignView:
        authorize(settings, request, "admin")
        body = await read_json(request, CampaignCreate)
        view = await run_in_threadpool(service.create_campaign, body)
        response.headers["Location"] = f"/v1/campaigns/{view.id}"
        return view

    @app.get("/v1/campaigns", response_model=CampaignList, tags=["campaigns"],
             openapi_extra={"parameters": [
                 {"name": "after", "in": "query", "required": False,
                  "schema": {"type": "string", "pattern": ID_PATTERN}},
                 {"name": "limit", "in": "query", "required": False,
                  "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIST_LIMIT,
                             "default": LIST_LIMIT}}]})
    async def list_campaigns(request: Request) -> CampaignList:
        """Campaign ids with their phase, sorted by id, at most ``limit`` (1..1000) per page;
        pass the answer's ``next`` as ``after`` for the following page.  The query is read
        after authentication, so a stranger learns nothing from its validation."""
        authorize(settings, request, "admin")
        after = request.query_params.get("after")
        limit_text = request.query_params.get("limit", str(LIST_LIMIT))
        if after is not None and not _ID.fullmatch(after):
            raise errors.InvalidRequestError("after must be a campaign id (1-64 characters "
                                             "[A-Za-z0-9._-])")
        if not (limit_text.isascii() and limit_text.isdigit() and len(limit_text) <= 4
                and 1 <= int(limit_text) <= MAX_LIST_LIMIT):
            raise errors.InvalidRequestError(f"limit must be an integer from 1 to "
                                             f"{MAX_LIST_LIMIT}")
        return await run_in_threadpool(service.list_campaigns, after, int(limit_text))

    conditional = {304: {"description": "not modified (If-None-Match names the ETag)"}}

    @app.get("/v1/campaigns/{campaign_id}", response_model=CampaignView, tags=["campaigns"],
             responses=conditional)
    async def get_campaign(request: Request, campaign_id: str) -> Response:
        cid = parse_campaign_id(campaign_id)
        final = service.final_view(cid)
        if final is not None:
            return document_response(request, final, immutable=True)
        body, done = await storage_call(service.view_document, cid)
        return document_response(request, body, immutable=done, max_age=VIEW_MAX_AGE)

    @app.get("/v1/campaigns/{campaign_id}/hpke-config", response_model=HpkeConfig,
             tags=["campaigns"], responses=conditional)
    async def hpke_config(request: Request, campaign_id: str) -> Response:
        cid = parse_campaign_id(campaign_id)
        body = service.cached_key_config(cid)
        if body is None:
            body = await storage_call(service.key_config_document, cid)
        return document_response(request, body, immutable=True)

    @app.put("/v1/campaigns/{campaign_id}/rounds/{round_number}/batches/{batch_id}",
             response_model=ChunkReceipt, status_code=202, tags=["batches"],
             openapi_extra=_body(BatchChunk),
             responses={200: {"model": ChunkReceipt,
                              "description": "a repeat of a chunk already decoded: its "
                                             "stored receipt (duplicate: true)"}})
    async def put_chunk(request: Request, response: Response, campaign_id: str,
                        round_number: str, batch_id: str) -> ChunkReceipt:
        """Accept a chunk for decoding: ``202`` and a queued receipt (a repeat of a queued
        chunk too, ``duplicate: true``); a repeat of a decoded chunk is ``200`` with its
        stored receipt."""
        authorize(settings, request, "shuffler")
        cid, round_, bid = _batch(campaign_id, round_number, batch_id)
        chunk = await read_json(request, BatchChunk)
        receipt = await run_in_threadpool(service.store_chunk, cid, round_, bid, chunk)
        if receipt.state == "queued" and not receipt.duplicate:
            workers.wake()
        counted.chunk(receipt)
        response.status_code = 202 if receipt.state == "queued" else 200
        return receipt

    @app.get(_CHUNK, response_model=ChunkReceipt, tags=["batches"])
    async def chunk_receipt(request: Request, campaign_id: str, round_number: str,
                            batch_id: str, stream: str, chunk_index: str) -> ChunkReceipt:
        """A chunk's receipt: ``state: "decoded"`` with what was accepted and dropped, or
        ``queued`` while it waits to be decoded; ``not-found`` if the batch has no such
        chunk.  The shuffler's or the admin's token."""
        authorize_either(settings, request)
        cid, round_, bid = _batch(campaign_id, round_number, batch_id)
        name, index = _chunk_identity(stream, chunk_index)
        return await storage_call(service.chunk_receipt, cid, round_, bid, name, index)

    @app.post("/v1/campaigns/{campaign_id}/rounds/{round_number}/batches/{batch_id}/complete",
              response_model=BatchCompletion, tags=["batches"],
              responses={202: {"model": CompletionPending,
                               "description": "The round's completion is being computed: "
                                              "ask again after Retry-After"}})
    async def complete(request: Request, campaign_id: str, round_number: str,
                       batch_id: str) -> Response:
        """Finish a round (the shuffler's token): ``200`` with the completion once it is
        computed, ``202`` with the job's state while it is (the optimizer or the decoding
        runs once, in the background, whatever the number of requests)."""
        authorize(settings, request, "shuffler")
        cid, round_, bid = _batch(campaign_id, round_number, batch_id)
        answer = await storage_call(service.complete, cid, round_, bid)
        if isinstance(answer, CompletionPending):
            completions.wake()
            counted.pending.labels(str(round_)).inc()
            return JSONResponse(answer.model_dump(mode="json"), status_code=202,
                                headers={"Retry-After": str(COMPLETION_RETRY_AFTER)})
        counted.completions.labels(str(round_)).inc()
        return JSONResponse(answer.model_dump(mode="json"))

    @app.post("/v1/campaigns/{campaign_id}/abort", response_model=CampaignView,
              tags=["campaigns"], openapi_extra=_body(CampaignAbort))
    async def abort(request: Request, campaign_id: str) -> CampaignView:
        authorize(settings, request, "admin")
        cid = parse_campaign_id(campaign_id)
        raw = await request.body()
        body = await read_json(request, CampaignAbort) if raw.strip() else CampaignAbort()
        return await run_in_threadpool(service.abort, cid, body.reason)

    @app.get("/v1/campaigns/{campaign_id}/results", response_model=Results, tags=["results"])
    async def results(request: Request, campaign_id: str) -> Results:
        authorize(settings, request, "admin")
        return await run_in_threadpool(service.results, parse_campaign_id(campaign_id))

    @app.get("/v1/signing-key", response_model=SigningKey, tags=["campaigns"])
    async def signing_key_document(request: Request) -> SigningKey:
        """The public key that signs every campaign view; apps ship it (``server_key``).
        Admin only: operators fetch it from the server itself, never through a relay."""
        authorize(settings, request, "admin")
        return SigningKey(public_key=service.signing_public_key)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, model in _BODIES.items():
                body_schema = model.model_json_schema(
                    ref_template="#/components/schemas/{model}")
                components.update(body_schema.pop("$defs", {}))
                components[name] = body_schema
            app.openapi_schema = document_problems(schema, SECURITY)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
