"""The shuffler's HTTP service (docs/architecture.md, "Shuffler").

| method, path | who |
| --- | --- |
| ``GET /v1/campaigns/{cid}`` | anyone: the server's campaign view, relayed byte for byte |
| ``GET /v1/campaigns/{cid}/hpke-config`` | anyone: the server's key config, relayed |
| ``POST /v1/campaigns/{cid}/enrollments`` | user with an invitation (:class:`EnrollmentPolicy`) |
| ``POST /v1/campaigns/{cid}/rounds/{round}/submissions`` | user (Bearer user token) |
| ``GET /v1/campaigns/{cid}/rounds/{round}`` | anyone: participant count, threshold, state |
| ``POST /v1/campaigns/{cid}/rounds/{round}/release`` | operator (Bearer operator token) |
| ``GET /livez``, ``GET /readyz``, ``GET /docs``, ``GET /metrics`` | anyone |

Clients need no other service: the public documents come from the server through the
shuffler's bounded single-flight cache (:mod:`.upstream`), with a strong ``ETag``,
``Cache-Control`` and ``304`` answers to ``If-None-Match`` (:mod:`..http_cache`); the
client verifies their hashes, key pin and parameters (an app that knows the campaign's
key id out of band also pins the key itself: docs/architecture.md, "Relayed documents").
Every route first checks the campaign id against ``ID_PATTERN`` (``unknown-campaign``
otherwise), before any storage or upstream access.

The routes only authenticate (as dependencies), parse bodies and call the
:class:`~.service.ShufflerService`.  Every refusal is an RFC 9457 problem
(:mod:`segshuffle.services.http_edge`) and leaves the state unchanged: a
submission is stored in one transaction after every check has passed.  Enrollments and
submissions are rate-limited per source first (:mod:`.limits`).  Nothing about a request's
origin is kept or logged: the access log is off, the limiter holds keyed digests of
addresses in memory only, log lines carry campaign ids, rounds, counts, route templates and
request ids only (:mod:`..observability`).  ``GET /metrics`` counts, besides requests,
enrollments, accepted submissions (participants) and releases per round number, chunks
forwarded to and acknowledged by the server and upstream errors by problem type; no label
holds a campaign id.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

from segshuffle import __version__
from segshuffle.services.api_docs import install_docs
from segshuffle.services.arrival import ArrivingBody
from segshuffle.services.cors import ClientRouteCors, parse_origins, route_matcher
from segshuffle.services.http_cache import document_response
from segshuffle.services.http_edge import (
    Health,
    bearer_token,
    document_problems,
    health_router,
    install_edge,
    json_media,
    parse_json,
    read_json,
    require_json_media,
    route_path,
)
from segshuffle.services.http_edge import campaign_id as parse_campaign_id
from segshuffle.services.http_edge import round_number as parse_round
from segshuffle.services.observability import (
    Metrics,
    framework_telemetry_off,
    install_observability,
    problem_label,
    without_idle_framework_layers,
)
from segshuffle.wire.models import (
    CampaignView,
    ChunkReceipt,
    EnrollmentRequest,
    EnrollmentResponse,
    HpkeConfig,
    ReleaseResponse,
    Round1Submission,
    Round2Submission,
    SubmissionReceipt,
)
from segshuffle.wire.problems import PROBLEM_MEDIA_TYPE
from segshuffle.wire.submissions import DecodedSubmission, decode_submission, decoded

from .backends import open_storage
from .enrollment import EnrollmentPolicy, InvitationEnrollment, OpenEnrollment
from .limits import RouteLimits, enrollment_limit, read_limit, submission_limit
from .release import Releaser
from .service import PHASE_OF_ROUND, ShufflerRoundStatus, ShufflerService, unauthorized
from .settings import Settings
from .storage_api import ShufflerStorage
from .upstream import KEY_CONFIG, VIEW, LinkObserver, ServerLink
from .vault import RoundKeys

log = logging.getLogger("segshuffle.shuffler")

__all__ = ["PHASE_OF_ROUND", "Health", "ShufflerRoundStatus", "create_app"]


# -- request parsing and authentication (dependencies) ---------------------------------
async def valid_campaign_id(campaign_id: str) -> str:
    """The ``campaign_id`` path parameter, which must match ``ID_PATTERN``; checked first
    on every route, so no other id reaches storage, the enrollment policy or a URL."""
    return parse_campaign_id(campaign_id)


async def round_number_of(round_number: str) -> int:
    """The ``round_number`` path parameter, 1 or 2."""
    return parse_round(round_number)


async def user_token(authorization: Annotated[str | None, Header()] = None) -> str:
    """The user's bearer token (not yet checked against the campaign)."""
    token = bearer_token(authorization)
    if token is None:
        raise unauthorized("a user token is required (Authorization: Bearer ...)")
    return token


class ShufflerCounters(LinkObserver):
    """The shuffler's own metrics; labels are round numbers and problem names only."""

    def __init__(self, metrics: Metrics) -> None:
        self.enrollments = metrics.counter("enrollments", "Users enrolled")
        self.submissions = metrics.counter("submissions", "Submissions accepted (participants), "
                                           "by round number", ["round"])
        self.submissions_of_round = {number: self.submissions.labels(str(number))
                                     for number in PHASE_OF_ROUND}
        """The child of :attr:`submissions` of each round number (no label lookup per
        submission)."""
        self.releases = metrics.counter("releases", "Rounds released by the operator",
                                        ["round"])
        self.forwarded = metrics.counter("chunks_forwarded", "Chunks sent to the server "
                                         "(retries included)")
        self.acknowledged = metrics.counter("chunks_acknowledged", "Chunks the server "
                                            "acknowledged, by round number", ["round"])
        self.upstream_errors = metrics.counter("upstream_errors", "Failed requests to the "
                                               "server, by problem type (unreachable: none)",
                                               ["status", "problem"])
        self.unknown_lookups_refused = metrics.counter(
            "unknown_lookups_refused", "Lookups of campaigns the shuffler holds nothing for, "
            "refused by the cap (SEGSHUFFLE_SHUFFLER_UNKNOWN_LOOKUPS_PER_MINUTE)")

    def upstream_error(self, status: int | None, problem: str | None) -> None:
        self.upstream_errors.labels(str(status) if status else "unreachable",
                                    problem_label(problem)).inc()

    def chunk_forwarded(self) -> None:
        self.forwarded.inc()

    def chunk_acknowledged(self, receipt: ChunkReceipt) -> None:
        self.acknowledged.labels(str(receipt.round)).inc()

    def unknown_lookup_refused(self) -> None:
        self.unknown_lookups_refused.inc()


def counters_of(request: Request) -> ShufflerCounters:
    """The application's :class:`ShufflerCounters`."""
    counters: ShufflerCounters = request.app.state.counters
    return counters


async def service_of(request: Request) -> ShufflerService:
    """The application's :class:`ShufflerService`."""
    service: ShufflerService = request.app.state.service
    return service


async def operator(request: Request,
             authorization: Annotated[str | None, Header()] = None) -> None:
    """Require the operator's bearer token."""
    service: ShufflerService = request.app.state.service
    service.check_operator(bearer_token(authorization))


Round = Annotated[int, Depends(round_number_of)]
Service = Annotated[ShufflerService, Depends(service_of)]


def _openapi_body(*models: type[BaseModel]) -> dict[str, Any]:
    schemas = [m.model_json_schema() for m in models]
    schema = schemas[0] if len(schemas) == 1 else {"oneOf": schemas}
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}


def _problem(description: str) -> dict[str, Any]:
    """An OpenAPI response of problem documents (:func:`document_problems` adds the rest)."""
    return {"description": description, "content": {
        PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}


# -- routes ----------------------------------------------------------------------------
SECURITY: dict[tuple[str, str], str] = {
    ("POST", "/v1/campaigns/{campaign_id}/rounds/{round_number}/submissions"): "userToken",
    ("POST", "/v1/campaigns/{campaign_id}/rounds/{round_number}/release"): "operatorToken",
}
"""The bearer token each authenticated route needs (documented in the OpenAPI schema)."""
USER_ROUTES = frozenset({"/v1/campaigns/{campaign_id}/enrollments",
                         "/v1/campaigns/{campaign_id}/rounds/{round_number}/submissions"})
"""Successful requests on these are logged at DEBUG: no per-user timeline on the disk."""

CLIENT_ROUTES = USER_ROUTES | {"/v1/campaigns/{campaign_id}",
                               "/v1/campaigns/{campaign_id}/hpke-config",
                               "/v1/campaigns/{campaign_id}/rounds/{round_number}"}
"""What a client calls (the web pages of SEGSHUFFLE_SHUFFLER_CORS_ORIGINS may too); not the
operator's release, the metrics or the API documents."""

_CHECKED = [Depends(valid_campaign_id)]
documents = APIRouter(prefix="/v1/campaigns/{campaign_id}", tags=["documents"],
                      dependencies=_CHECKED)
users = APIRouter(prefix="/v1/campaigns/{campaign_id}", tags=["users"], dependencies=_CHECKED)
rounds = APIRouter(prefix="/v1/campaigns/{campaign_id}/rounds/{round_number}", tags=["rounds"],
                   dependencies=_CHECKED)
_CONDITIONAL = {304: {"description": "not modified (If-None-Match names the current ETag)"}}


def _document(request: Request, service: ShufflerService, body: bytes, immutable: bool,
              etag: str) -> Response:
    max_age = max(1, int(service.settings.campaign_cache_seconds))
    return document_response(request, body, immutable=immutable, max_age=max_age, etag=etag)


@documents.get("", response_model=CampaignView, responses=_CONDITIONAL,
               dependencies=[Depends(read_limit)])
async def campaign_view(campaign_id: str, request: Request, service: Service) -> Response:
    document = await service.document(VIEW, campaign_id)
    return _document(request, service, document.body, document.immutable, document.etag)


@documents.get("/hpke-config", response_model=HpkeConfig, responses=_CONDITIONAL,
               dependencies=[Depends(read_limit)])
async def key_config(campaign_id: str, request: Request, service: Service) -> Response:
    document = await service.document(KEY_CONFIG, campaign_id)
    return _document(request, service, document.body, document.immutable, document.etag)


@users.post("/enrollments", status_code=201, response_model=EnrollmentResponse,
            dependencies=[Depends(enrollment_limit)],
            responses={401: _problem("invitation-required"),
                       403: _problem("invalid-invitation, invitation-wrong-campaign, "
                                     "invitation-expired or invitation-used")},
            openapi_extra={"requestBody": {"required": False, "content": {
                "application/json": {"schema": EnrollmentRequest.model_json_schema()}}}})
async def enroll(campaign_id: str, request: Request, service: Service) -> Response:
    return await _enroll(campaign_id, request, service)


async def _enroll(campaign_id: str, request: Request, service: ShufflerService) -> Response:
    """The enrollment endpoint, once the campaign id and the rate limit are checked."""
    raw = await request.body()
    body = (await read_json(request, EnrollmentRequest)) if raw.strip() else \
        EnrollmentRequest()
    token = await service.enroll(campaign_id, body.invitation, body.token)
    counters_of(request).enrollments.inc()
    answer = EnrollmentResponse(campaign_id=campaign_id, token=token)
    return Response(answer.model_dump_json(), status_code=201, media_type="application/json")


@users.post("/rounds/{round_number}/submissions", status_code=201,
            response_model=SubmissionReceipt, dependencies=[Depends(submission_limit)],
            openapi_extra=_openapi_body(Round1Submission, Round2Submission))
async def submit(campaign_id: str, round_number: Round,
                 token: Annotated[str, Depends(user_token)], request: Request,
                 service: Service) -> Response:
    return await _submit(campaign_id, round_number, token, request, service)


async def _submit(campaign_id: str, round_number: int, token: str, request: Request,
                  service: ShufflerService) -> Response:
    """The submission endpoint, once the path, the rate limit and the token's form are
    checked.

    A body in the plain form that every client sends, of a declared length and arrived
    whole with the headers, may be authenticated and stored in one storage statement
    (:meth:`ShufflerService.submit_as`, which says when); else, and for anything unusual,
    the token is checked before the service waits for the body, so a bad token answers
    ``unauthorized`` at once (a client that withholds its body included), and before any
    problem of the body."""
    arriving = ArrivingBody(request.scope, request.receive)
    body: DecodedSubmission | None = None
    if (service.submits_as and json_media(request) and _length_declared(request)
            and await arriving.arrived()):
        body = decode_submission(await arriving.whole(), round_number)
        if body is not None and await service.submit_as(campaign_id, round_number, token,
                                                        body):
            return _accepted(request, campaign_id, round_number)
    # before waiting for the body (unless it had arrived, above); the view it was checked
    # against serves the submission too
    participant, view = await service.authenticate_with_view(campaign_id, token)
    require_json_media(request)
    raw = await arriving.whole()
    if body is None:
        body = decode_submission(raw, round_number)
    if body is None:  # not the plain form: the models decide, and name any problem
        model = Round1Submission if round_number == 1 else Round2Submission
        body = decoded(parse_json(raw, model))
    await service.submit(campaign_id, round_number, participant, body, view=view)
    return _accepted(request, campaign_id, round_number)


def _length_declared(request: Request) -> bool:
    """Whether the body's whole length was declared (``Content-Length``, not chunked): the
    edge has then refused an oversized body before any route ran, so reading it before
    the token is checked changes no answer (a chunked body that grows too large would be
    refused while it is read, which for a bad token must come after ``unauthorized``)."""
    headers = request.headers
    return "content-length" in headers and "transfer-encoding" not in headers


def _accepted(request: Request, campaign_id: str, round_number: int) -> Response:
    """The answer to an accepted submission (counted)."""
    counters_of(request).submissions_of_round[round_number].inc()
    return Response(_receipt(campaign_id, round_number), status_code=201,
                    media_type="application/json")


@functools.lru_cache(maxsize=1024)
def _receipt(campaign_id: str, round_number: int) -> bytes:
    """The serialized receipt of an accepted submission: the same bytes for every user of
    a round, so made once per (campaign, round) (a bounded cache: ids of campaigns only
    reach it after a submission was accepted)."""
    receipt = SubmissionReceipt(campaign_id=campaign_id, round=round_number, accepted=True)
    return receipt.model_dump_json().encode()


@rounds.get("", response_model=ShufflerRoundStatus, dependencies=[Depends(read_limit)])
async def round_status(campaign_id: str, round_number: Round, service: Service) -> Response:
    body = await service.round_status_json(campaign_id, round_number)
    return Response(body, media_type="application/json")


@rounds.post("/release", response_model=ReleaseResponse, status_code=202,
             responses={200: {"description": "released and acknowledged by the server"},
                        202: {"description": "closed and being forwarded"}})
async def release_round(
    request: Request,
    campaign_id: str,
    round_number: Round,
    _: Annotated[None, Depends(operator)],
    service: Service,
    wait: Annotated[bool, Query(description="answer once the server has the batch")] = False,
) -> JSONResponse:
    answer, acknowledged = await service.release(campaign_id, round_number, wait)
    counters_of(request).releases.labels(str(round_number)).inc()
    return JSONResponse(answer.model_dump(mode="json"), status_code=200 if acknowledged else 202)


def _route(router: APIRouter, path: str) -> APIRoute:
    """The route of ``router`` whose path template is ``path``."""
    return next(r for r in router.routes if isinstance(r, APIRoute) and r.path == path)


ENROLL_PATH = "/v1/campaigns/{campaign_id}/enrollments"
SUBMIT_PATH = "/v1/campaigns/{campaign_id}/rounds/{round_number}/submissions"
ENROLL_ROUTE = _route(users, ENROLL_PATH)
SUBMIT_ROUTE = _route(users, SUBMIT_PATH)
_USER_PREFIX = "/v1/campaigns/"


def _header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header (``name`` in lower case), as Starlette reads it."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


class UserRoutes:
    """Pure ASGI middleware: the two user routes (enrollments, submissions), served
    without FastAPI's routing and per-request dependency solving.

    These are the requests of every user, and the routes' dependencies are plain checks,
    so they are called here directly, in the order FastAPI resolves them (campaign id,
    rate limit, round number, bearer token), with the same endpoint code
    (:func:`_enroll`, :func:`_submit`).  ``scope["route"]``, ``endpoint`` and
    ``path_params`` are those the router would set (the metrics label the request by
    the route's template), and refusals go through the application's own exception
    handlers, looked up as Starlette's ``ExceptionMiddleware`` looks them up
    (:meth:`_answer`; that middleware's per-request wrappers cost a few of a
    submission's 150 CPU-microseconds), so answers are byte for byte those of the
    routes.  Every other request, and any method but POST, goes on to the application;
    the FastAPI routes stay declared for the OpenAPI document.  Install it innermost
    (before the body limit and the request observer), so both still see these requests.
    """

    def __init__(self, app: ASGIApp, application: FastAPI) -> None:
        self.app = app
        self.application = application
        self._handlers: dict[type[BaseException], Callable[..., Awaitable[Response]]] = {}
        """The application's exception handlers by exception class (its catch-all
        ``Exception`` handler left to the outer layers, as Starlette does)."""
        for key, handler in application.exception_handlers.items():
            if key in (500, Exception):
                continue
            if not isinstance(key, type) or not inspect.iscoroutinefunction(handler):
                raise TypeError(f"the user routes answer with coroutine handlers of exception "
                                f"classes only, not {key!r}: {handler!r}")
            self._handlers[key] = handler
        self._routes = ((SUBMIT_ROUTE, self._submit), (ENROLL_ROUTE, self._enroll))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = route_path(scope)
            if path.startswith(_USER_PREFIX):
                for route, endpoint in self._routes:
                    match = route.path_regex.match(path)
                    if match is not None:
                        scope["path_params"] = {**scope.get("path_params", {}),
                                                **match.groupdict()}
                        scope["endpoint"] = route.endpoint
                        scope["route"] = route
                        await self._answer(endpoint, scope, receive, send)
                        return
        await self.app(scope, receive, send)

    async def _answer(self, endpoint: Callable[[Request], Awaitable[Response]], scope: Scope,
                      receive: Receive, send: Send) -> None:
        """Run ``endpoint``; an exception it raises is answered by the application's
        handler for its class (the nearest in its MRO, as Starlette looks it up), and one
        without a handler goes on to the outer layers.  The response is sent after the
        endpoint returns, outside the ``try``: an exception while sending it leaves
        nothing to answer, so it goes on too (Starlette's ``ExceptionMiddleware`` would
        raise a ``RuntimeError`` there instead), and no response is ever sent twice."""
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise
            response = await handler(request, exc)
            exc.__traceback__ = None  # a reused exception would accumulate tracebacks
        await response(scope, receive, send)

    def _handler_for(self, exc: Exception) -> Callable[..., Awaitable[Response]] | None:
        handlers = self._handlers
        for cls in type(exc).__mro__:
            handler = handlers.get(cls)
            if handler is not None:
                return handler
        return None

    async def _submit(self, request: Request) -> Response:
        scope = request.scope
        params = scope["path_params"]
        campaign_id = parse_campaign_id(params["campaign_id"])
        limits: RouteLimits = self.application.state.limits
        limits.check(limits.submit, request, "submissions")
        round_number = parse_round(params["round_number"])
        token = bearer_token(_header(scope, b"authorization"))
        if token is None:
            raise unauthorized("a user token is required (Authorization: Bearer ...)")
        return await _submit(campaign_id, round_number, token, request,
                             self.application.state.service)

    async def _enroll(self, request: Request) -> Response:
        campaign_id = parse_campaign_id(request.scope["path_params"]["campaign_id"])
        limits: RouteLimits = self.application.state.limits
        limits.check(limits.enroll, request, "enrollments")
        return await _enroll(campaign_id, request, self.application.state.service)


OPEN_WARNING = ("OPEN ENROLLMENT: anyone may enroll any number of times, so fake users can "
                "surround a real one (n-1 attack) and the published epsilons no longer "
                "protect anyone; use invitations (SEGSHUFFLE_SHUFFLER_ENROLLMENT=invitations) "
                "outside tests")


def policy_factory(settings: Settings) -> Callable[[ShufflerStorage], EnrollmentPolicy]:
    """The enrollment policy the settings name, to be built over the storage.

    Reads the issuer keys first and raises :class:`ValueError` (one line) if they are
    missing or malformed, so that a misconfigured shuffler does not start.
    """
    if settings.enrollment == "open":
        return OpenEnrollment
    issuers = settings.issuer_keys()
    return lambda storage: InvitationEnrollment(storage, issuers,
                                                skew=settings.invitation_skew)


def create_app(
    settings: Settings,
    *,
    enrollment: EnrollmentPolicy | None = None,
    link: ServerLink | None = None,
    backoff_initial: float = 0.1,
    backoff_max: float = 10.0,
) -> FastAPI:
    """The shuffler application; state lives in ``settings.database``."""
    build_policy = None if enrollment is not None else policy_factory(settings)
    limits = RouteLimits.from_settings(settings)
    storage = open_storage(settings.database, synchronous=settings.synchronous,
                           pool_size=settings.database_pool_size)
    policy: EnrollmentPolicy = enrollment if build_policy is None else build_policy(storage)
    server = link or ServerLink(settings.server_url, settings.server_token,
                                timeout=settings.forward_timeout,
                                cache_seconds=settings.campaign_cache_seconds,
                                cache_entries=settings.document_cache_entries,
                                max_connections=settings.upstream_connections,
                                pool_timeout=settings.upstream_pool_timeout,
                                ca_file=settings.server_ca_file or None,
                                unknown_lookups_per_minute=settings.unknown_lookups_per_minute)
    keys = RoundKeys(settings.round_key_directory)
    releaser = Releaser(storage, server, keys, chunk_size=settings.chunk_size,
                        retry_seconds=settings.release_retry_seconds,
                        lease_seconds=settings.release_lease_seconds,
                        window=settings.forward_window,
                        spill_directory=Path(settings.spill_directory)
                        if settings.spill_directory else None,
                        backoff_initial=backoff_initial, backoff_max=backoff_max)
    service = ShufflerService(settings, storage, policy, server, releaser)
    metrics = Metrics("shuffler")
    counters = ShufflerCounters(metrics)
    server.observer = counters

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await service.open()
        resumed = service.start()
        if settings.enrollment == "open":
            log.warning(OPEN_WARNING)
        log.info("shuffler ready (%d release(s) resumed, enrollment: %s)", resumed,
                 settings.enrollment)
        try:
            yield
        finally:
            await service.close()

    app = FastAPI(
        title="segshuffle shuffler",
        version=__version__,
        description="Enrollment, anonymous submissions, uniform permutation and release "
                    "of the segmented multi-message shuffle protocol.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        **framework_telemetry_off(),
    )
    app.add_middleware(UserRoutes, application=app)  # innermost: added first
    app.add_middleware(ClientRouteCors, origins=parse_origins(settings.cors_origins),
                       is_client_route=route_matcher(CLIENT_ROUTES))
    install_edge(app, settings.max_body_bytes, "shuffler")
    install_observability(app, metrics, quiet_routes=USER_ROUTES)
    without_idle_framework_layers(app)
    install_docs(app)
    app.state.counters = counters
    app.state.service = service
    app.state.storage = storage
    app.state.releaser = releaser
    app.state.settings = settings
    app.state.limits = limits
    app.include_router(health_router(service.ready))
    app.include_router(documents)
    app.include_router(users)
    app.include_router(rounds)
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_problems(default_openapi(), SECURITY)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
