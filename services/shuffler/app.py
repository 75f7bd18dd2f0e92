"""The shuffler's HTTP service (docs/architecture.md, "Shuffler").

| method, path | who |
| --- | --- |
| ``POST /v1/campaigns/{cid}/enrollments`` | user, through the :class:`EnrollmentPolicy` |
| ``POST /v1/campaigns/{cid}/rounds/{round}/submissions`` | user (Bearer user token) |
| ``GET /v1/campaigns/{cid}/rounds/{round}`` | anyone: participant count, threshold, state |
| ``POST /v1/campaigns/{cid}/rounds/{round}/release`` | operator (Bearer operator token) |
| ``GET /livez``, ``GET /readyz``, ``GET /docs`` | anyone |

Every refusal is an RFC 9457 problem (:mod:`segshuffle.services.http_edge`) and leaves
the state unchanged: a submission is stored in one transaction after every
check has passed.  Nothing about a request's origin is kept or logged: the
access log is off, log lines carry campaign ids, rounds and counts only.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from segshuffle import __version__
from segshuffle.services.http_edge import BodySizeLimit, install_problem_handlers
from segshuffle.wire.models import (
    CampaignView,
    EnrollmentRequest,
    EnrollmentResponse,
    ReleaseResponse,
    Round1Submission,
    Round2Submission,
    RoundStatus,
    SubmissionReceipt,
    b64url_decode,
)
from segshuffle.wire.problems import Problem

from .enrollment import (
    AuthenticationError,
    EnrollmentPolicy,
    EnrollmentRefusedError,
    OneTimeTokenEnrollment,
)
from .release import DATA, LEVELS, Releaser, required_participants
from .settings import Settings
from .storage import (
    OPEN,
    AlreadySubmittedError,
    NotEnoughParticipantsError,
    RoundClosedError,
    Storage,
)
from .upstream import ServerLink, UpstreamError

log = logging.getLogger("segshuffle.shuffler")

PHASE_OF_ROUND = {1: "round1", 2: "round2"}


class ShufflerRoundStatus(RoundStatus):
    """:class:`RoundStatus` plus the release state: ``open``, ``releasing`` or ``released``."""

    state: Literal["open", "releasing", "released"]
    batch_id: str | None = None
    last_error: str | None = None
    """While releasing: why the latest delivery attempt failed (the shuffler keeps trying)."""


class Health(BaseModel):
    status: str
    version: str = __version__


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def _unauthorized(detail: str) -> Problem:
    return Problem("unauthorized", detail, headers={"WWW-Authenticate": 'Bearer realm="shuffler"'})


def _check_round(round_number: int) -> int:
    if round_number not in (1, 2):
        raise Problem("unknown-round", f"rounds are 1 and 2, got {round_number}")
    return round_number


async def _json_body(request: Request, model: type[BaseModel]) -> Any:
    """Parse and validate a JSON body strictly; errors become problems via the handlers."""
    media = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if media not in {"application/json", ""} and not media.endswith("+json"):
        raise Problem("unsupported-media-type", "the request body must be application/json")
    raw = await request.body()
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors()]
        raise RequestValidationError(errors) from None


def _openapi_body(*models: type[BaseModel]) -> dict[str, Any]:
    schemas = [m.model_json_schema() for m in models]
    schema = schemas[0] if len(schemas) == 1 else {"oneOf": schemas}
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}


def create_app(
    settings: Settings,
    *,
    enrollment: EnrollmentPolicy | None = None,
    link: ServerLink | None = None,
    backoff_initial: float = 0.1,
    backoff_max: float = 10.0,
) -> FastAPI:
    """The shuffler application; state lives in ``settings.database``."""
    storage = Storage(settings.database, synchronous=settings.synchronous)
    policy: EnrollmentPolicy = enrollment or OneTimeTokenEnrollment(
        storage, settings.enrollment_secret
    )
    server = link or ServerLink(settings.server_url, settings.server_token,
                                timeout=settings.forward_timeout,
                                cache_seconds=settings.campaign_cache_seconds)
    releaser = Releaser(storage, server, chunk_size=settings.chunk_size,
                        backoff_initial=backoff_initial, backoff_max=backoff_max)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        resumed = releaser.resume_all()
        log.info("shuffler ready (%d release(s) resumed)", resumed)
        try:
            yield
        finally:
            await releaser.shutdown()
            await server.aclose()
            storage.close()

    app = FastAPI(
        title="segshuffle shuffler",
        version=__version__,
        description="Enrollment, anonymous submissions, uniform permutation and release "
                    "of the segmented multi-message shuffle protocol.",
        lifespan=lifespan,
    )
    install_problem_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.state.storage = storage
    app.state.releaser = releaser
    app.state.settings = settings

    async def campaign_view(campaign_id: str, *, fresh: bool = False) -> CampaignView:
        try:
            view = await server.campaign(campaign_id, fresh=fresh)
        except UpstreamError as exc:
            log.warning("campaign view unavailable: campaign=%s (%s)", campaign_id, exc)
            raise Problem("upstream-failed", "the server could not be reached") from None
        if view is None:
            raise Problem("unknown-campaign", f"no campaign {campaign_id!r}")
        return view

    async def view_in_phase(campaign_id: str, round_number: int) -> CampaignView:
        """The campaign view, refreshed once if the cached phase does not fit the round."""
        wanted = PHASE_OF_ROUND[round_number]
        view = await campaign_view(campaign_id)
        if view.phase != wanted:
            view = await campaign_view(campaign_id, fresh=True)
        if view.phase != wanted:
            raise Problem("wrong-phase",
                          f"campaign {campaign_id!r} is in phase {view.phase!r}, "
                          f"round {round_number} needs {wanted!r}",
                          extra={"phase": view.phase})
        return view

    def required_for(view: CampaignView, round_number: int) -> int:
        round1 = storage.round_record(view.id, 1) if round_number == 2 else None
        return required_participants(view, round_number, settings.min_users,
                                      None if round1 is None else round1.participants)

    def check_operator(authorization: str | None) -> None:
        token = _bearer(authorization)
        if token is None:
            raise _unauthorized("the operator token is required")
        if not hmac.compare_digest(token.encode(), settings.operator_token.encode()):
            raise Problem("forbidden", "these credentials may not release rounds")

    async def release(view: CampaignView, round_number: int) -> tuple[Any, bool]:
        """Start (or find) the release of a round; returns (record, newly_started)."""
        existing = await run_in_threadpool(storage.round_record, view.id, round_number)
        if existing is not None:
            return existing, False
        required = await run_in_threadpool(required_for, view, round_number)
        try:
            record = await run_in_threadpool(releaser.start, view.id, round_number, required)
        except NotEnoughParticipantsError as exc:
            raise Problem("not-enough-participants", str(exc),
                          extra={"participants": exc.participants,
                                 "required": exc.required}) from None
        return record, True

    # -- health ------------------------------------------------------------------------
    @app.get("/livez", response_model=Health, tags=["health"])
    async def livez() -> Health:
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, tags=["health"],
             responses={503: {"description": "storage or server unavailable"}})
    async def readyz() -> Health:
        try:
            ok = await run_in_threadpool(storage.ping)
        except Exception:  # a closed or broken database
            ok = False
        if not ok:
            raise Problem("unavailable", "the database is not available")
        if not await server.alive():
            raise Problem("unavailable", "the server cannot be reached")
        return Health(status="ready")

    # -- enrollment --------------------------------------------------------------------
    @app.post("/v1/campaigns/{campaign_id}/enrollments", status_code=201,
              response_model=EnrollmentResponse, tags=["users"],
              openapi_extra={"requestBody": {"required": False, "content": {
                  "application/json": {"schema": EnrollmentRequest.model_json_schema()}}}})
    async def enroll(campaign_id: str, request: Request) -> EnrollmentResponse:
        raw = await request.body()
        body = (await _json_body(request, EnrollmentRequest)) if raw.strip() else \
            EnrollmentRequest()
        view = await campaign_view(campaign_id)
        if view.phase == "done":
            raise Problem("wrong-phase", f"campaign {campaign_id!r} is finished")
        try:
            token = await run_in_threadpool(policy.enroll, campaign_id, body.invitation)
        except EnrollmentRefusedError as exc:
            raise Problem("forbidden", str(exc)) from None
        return EnrollmentResponse(campaign_id=campaign_id, token=token)

    # -- submissions -------------------------------------------------------------------
    @app.post("/v1/campaigns/{campaign_id}/rounds/{round_number}/submissions",
              status_code=201, response_model=SubmissionReceipt, tags=["users"],
              openapi_extra=_openapi_body(Round1Submission, Round2Submission))
    async def submit(
        campaign_id: str,
        round_number: int,
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
    ) -> SubmissionReceipt:
        _check_round(round_number)
        token = _bearer(authorization)
        if token is None:
            raise _unauthorized("a user token is required (Authorization: Bearer ...)")
        model = Round1Submission if round_number == 1 else Round2Submission
        body = await _json_body(request, model)
        view = await campaign_view(campaign_id)
        try:
            participant = await run_in_threadpool(policy.authenticate, campaign_id, token)
        except AuthenticationError as exc:
            raise _unauthorized(str(exc)) from None
        view = await view_in_phase(campaign_id, round_number)
        streams: dict[str, list[bytes]] = {LEVELS: [b64url_decode(body.level)]}
        if isinstance(body, Round2Submission):
            parameters = view.parameters
            if parameters is None:  # pragma: no cover - phase round2 implies parameters
                raise Problem("wrong-phase", "round-2 parameters are not published yet")
            expected = parameters.messages_per_user
            sent = len(body.data)
            if (parameters.fixed_size and sent != expected) or sent > expected:
                raise Problem(
                    "wrong-submission-size",
                    f"round 2 takes {'exactly' if parameters.fixed_size else 'at most'} "
                    f"{expected} data messages, got {sent}",
                    extra={"expected": expected, "received": sent},
                )
            streams[DATA] = [b64url_decode(c) for c in body.data]
        try:
            count = await run_in_threadpool(storage.submit, campaign_id, round_number,
                                            participant, streams)
        except AlreadySubmittedError as exc:
            raise Problem("already-submitted", str(exc)) from None
        except RoundClosedError as exc:
            raise Problem("wrong-phase", str(exc)) from None
        if settings.auto_release and count >= settings.auto_release:
            await auto_release(view, round_number)
        return SubmissionReceipt(campaign_id=campaign_id, round=round_number, accepted=True)

    async def auto_release(view: CampaignView, round_number: int) -> None:
        try:
            record, started = await release(view, round_number)
        except Problem:
            return  # not enough participants for the campaign's threshold yet
        if started:
            log.info("automatic release: campaign=%s round=%d", view.id, round_number)
            releaser.schedule(record)

    # -- rounds ------------------------------------------------------------------------
    @app.get("/v1/campaigns/{campaign_id}/rounds/{round_number}",
             response_model=ShufflerRoundStatus, tags=["rounds"])
    async def round_status(campaign_id: str, round_number: int) -> ShufflerRoundStatus:
        _check_round(round_number)
        view = await campaign_view(campaign_id)
        participants = await run_in_threadpool(storage.participants, campaign_id, round_number)
        record = await run_in_threadpool(storage.round_record, campaign_id, round_number)
        required = await run_in_threadpool(required_for, view, round_number)
        state = OPEN if record is None else record.state
        return ShufflerRoundStatus(
            campaign_id=campaign_id, round=round_number, participants=participants,
            required=required, released=state == "released", state=state,  # type: ignore[arg-type]
            batch_id=None if record is None else record.batch_id,
            last_error=releaser.last_error.get((campaign_id, round_number))
            if state == "releasing" else None,
        )

    @app.post("/v1/campaigns/{campaign_id}/rounds/{round_number}/release",
              response_model=ReleaseResponse, status_code=202, tags=["rounds"],
              responses={200: {"description": "released and acknowledged by the server"},
                         202: {"description": "closed and being forwarded"}})
    async def release_round(
        campaign_id: str,
        round_number: int,
        authorization: Annotated[str | None, Header()] = None,
        wait: Annotated[bool, Query(description="answer once the server has the batch")] = False,
    ) -> JSONResponse:
        _check_round(round_number)
        check_operator(authorization)
        view = await campaign_view(campaign_id)
        existing = await run_in_threadpool(storage.round_record, campaign_id, round_number)
        if existing is None:
            view = await view_in_phase(campaign_id, round_number)
        record, _ = await release(view, round_number)
        status = 200 if record.state == "released" else 202
        if record.state != "released":
            task = releaser.schedule(record)
            if wait:
                try:
                    record = await asyncio.wait_for(asyncio.shield(task),
                                                    settings.release_wait)
                    status = 200
                except TimeoutError:
                    pass  # still forwarding: 202, the round status shows why
        body = ReleaseResponse(
            campaign_id=campaign_id, round=round_number, batch_id=record.batch_id,
            messages=sum(record.stream_sizes.values()),
            chunks=sum(record.chunk_count(s) for s in record.stream_sizes),
        )
        return JSONResponse(body.model_dump(mode="json"), status_code=status)

    return app
