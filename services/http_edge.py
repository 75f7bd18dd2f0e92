"""The HTTP edge both services share: problem handlers, body limits, bearer tokens, health.

Everything framework-specific about errors lives here, so the wire layer
(:mod:`segshuffle.wire.problems`) stays free of FastAPI and Starlette:

- :func:`install_problem_handlers` turns :class:`~segshuffle.wire.problems.Problem`, the
  services' domain errors (:mod:`segshuffle.services.errors`, mapped to problem types in
  one table, :data:`DOMAIN_PROBLEMS`), FastAPI's request validation errors, Starlette's
  404/405 and any unexpected exception into an RFC 9457 ``application/problem+json`` body
  (never a bare 500);
- :class:`BodySizeLimit` answers oversize bodies with ``body-too-large`` before they are
  read into memory;
- :func:`bearer_token` parses ``Authorization: Bearer ...``;
- :func:`health_router` serves ``/livez`` and ``/readyz``.

Error bodies never echo request input: validation errors list only the location and
message.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from segshuffle import __version__
from segshuffle.services import errors
from segshuffle.wire.models import ID_PATTERN
from segshuffle.wire.problems import PROBLEM_MEDIA_TYPE, SERVICE_HEADER, Problem, ProblemType
from segshuffle.wire.validation import at, reason

_log = logging.getLogger("segshuffle.problems")


ModelT = TypeVar("ModelT", bound=BaseModel)


MAX_EXACT_INTEGER = 2**53 - 1
"""The largest integer I-JSON (RFC 7493 2.2) allows: every JSON number is an IEEE 754 double."""


class _NotStrictError(ValueError):
    """Raised by the parse hooks of :func:`require_strict_json`."""


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _NotStrictError(f"the member {key!r} appears twice in one object")
        seen[key] = value
    return seen


def _exact_integer(text: str) -> int:
    value = int(text)
    if abs(value) > MAX_EXACT_INTEGER:
        raise _NotStrictError(f"the integer {text[:30]} is beyond 2^53 - 1 (not exact in I-JSON)")
    return value


def _finite_number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStrictError(f"the number {text[:30]} is beyond the range of a double")
    return value


def _no_constant(name: str) -> float:
    raise _NotStrictError(f"{name} is not JSON")


def require_strict_json(raw: bytes) -> None:
    """Refuse a body that is valid JSON but not I-JSON (RFC 7493): a member name twice in
    one object, an integer beyond 2^53 - 1, a number that overflows a double, or the
    non-JSON NaN / Infinity.  Parsers disagree on such documents (which duplicate wins,
    how a huge number rounds), and a document hashed or signed by one party and read by
    another must mean one thing.  ``malformed-body`` (400) names the problem; a body that
    is not JSON at all is left to the model's parser."""
    try:
        json.loads(raw, object_pairs_hook=_unique_members, parse_int=_exact_integer,
                   parse_float=_finite_number, parse_constant=_no_constant)
    except _NotStrictError as exc:
        raise errors.MalformedBodyError(f"the request body is not strict JSON: {exc}") from None
    except (ValueError, RecursionError):
        return  # not JSON: the model's parser says so


def json_media(request: Request) -> bool:
    """Whether the body is declared as JSON (``application/json`` or ``*+json``; no
    ``Content-Type`` counts as JSON)."""
    declared = request.headers.get("content-type")
    media = (declared or "application/json").split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def require_json_media(request: Request) -> None:
    """``unsupported-media-type`` unless the body is declared as JSON (:func:`json_media`)."""
    if not json_media(request):
        raise errors.UnsupportedMediaTypeError("the request body must be application/json")


async def read_json(request: Request, model: type[ModelT]) -> ModelT:
    """Parse the body strictly into ``model``, after the route has authenticated the caller.

    A body declared as anything but JSON (``application/json`` or ``*+json``; no
    ``Content-Type`` counts as JSON) is ``unsupported-media-type``; invalid JSON is
    ``malformed-body``; a JSON value the model refuses is ``invalid-field`` listing at
    most 20 (location, message) pairs, never the input itself.
    """
    require_json_media(request)
    return parse_json(await request.body(), model)


def parse_json(raw: bytes, model: type[ModelT]) -> ModelT:
    """:func:`read_json` for a body already read (its media type checked by the caller)."""
    require_strict_json(raw)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        found = exc.errors(include_input=False, include_url=False)
        if any(e["type"] == "json_invalid" for e in found):
            raise errors.MalformedBodyError("the request body is not valid JSON") from None
        if any(e["type"] == "model_type" and not e["loc"] for e in found):
            raise errors.InvalidRequestError(
                "the request body must be a JSON object",
                extra={"errors": [{"loc": ["body"], "msg": "must be a JSON object"}]}) from None
        detail, listed = field_errors(found, root=("body",))
        raise errors.InvalidRequestError(detail, extra={"errors": listed}) from None


_ID = re.compile(ID_PATTERN)


def route_path(scope: Scope) -> str:
    """The request path below the application's mount point (``root_path``), which is
    what the router matches against."""
    path = str(scope["path"])
    root = str(scope.get("root_path", ""))
    return path[len(root):] if root and path.startswith(root) else path


def campaign_id(value: str) -> str:
    """A campaign id from a path segment: the whole of it matches ``ID_PATTERN``, else
    ``unknown-campaign`` (``fullmatch``: ``$`` alone would let a trailing newline in)."""
    if not _ID.fullmatch(value):
        raise errors.UnknownCampaignError("no such campaign (invalid campaign id)")
    return value


def round_number(value: str | int) -> int:
    """A round number from a path segment: 1 or 2, else ``unknown-round``."""
    text = str(value)
    if text not in ("1", "2"):
        raise errors.UnknownRoundError(f"rounds are 1 and 2, not {text[:20]!r}")
    return int(text)


def problem_response(problem: Problem) -> JSONResponse:
    """The ``application/problem+json`` response of a :class:`Problem`."""
    return JSONResponse(
        problem.body(),
        status_code=problem.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=problem.headers or None,
    )


def validation_problem(exc: RequestValidationError) -> Problem:
    """Malformed JSON -> malformed-body (400); anything else -> invalid-field (422)."""
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        return Problem("malformed-body", "the request body is not valid JSON")
    if any(e.get("type") == "model_attributes_type" and tuple(e.get("loc", ())) == ("body",)
           for e in errors):
        return Problem("invalid-field", "the request body must be a JSON object",
                       extra={"errors": [{"loc": ["body"], "msg": "must be a JSON object"}]})
    detail, listed = field_errors(errors)
    return Problem("invalid-field", detail, extra={"errors": listed})


MAX_LISTED_ERRORS = 20
"""The most (location, reason) pairs an invalid-field problem lists."""


def field_errors(found: Sequence[Mapping[str, Any]], root: Sequence[str] = ()
                 ) -> tuple[str, list[dict[str, Any]]]:
    """The ``detail`` and the ``errors`` member of an invalid-field problem, from the
    validation errors ``found`` (their locations below ``root``): at most
    :data:`MAX_LISTED_ERRORS` pairs ``{"loc": [...], "msg": reason}``, each reason in the
    project's words (:func:`segshuffle.wire.validation.reason`: "must be at least 2", never
    the validation library's phrasing) and never the refused input; the detail is the
    first pair as ``where: reason``."""
    listed = [{"loc": [*root, *(str(part) for part in error.get("loc", ()))],
               "msg": reason(error)} for error in found[:MAX_LISTED_ERRORS]]
    first = listed[0] if listed else {"loc": list(root), "msg": "is not valid"}
    where = at(first["loc"], skip=("body",)) or "body"
    return f"{where}: {first['msg']}", listed


#: The problem type of every domain error the service layers raise.
DOMAIN_PROBLEMS: dict[type[errors.DomainError], ProblemType] = {
    errors.InvalidRequestError: ProblemType.INVALID_FIELD,
    errors.MalformedBodyError: ProblemType.MALFORMED_BODY,
    errors.UnsupportedMediaTypeError: ProblemType.UNSUPPORTED_MEDIA_TYPE,
    errors.UnknownRoundError: ProblemType.UNKNOWN_ROUND,
    errors.NotFoundError: ProblemType.NOT_FOUND,
    errors.UnknownCampaignError: ProblemType.UNKNOWN_CAMPAIGN,
    errors.WrongPhaseError: ProblemType.WRONG_PHASE,
    errors.AlreadyExistsError: ProblemType.ALREADY_EXISTS,
    errors.AlreadySubmittedError: ProblemType.ALREADY_SUBMITTED,
    errors.ReplayedCiphertextError: ProblemType.REPLAY,
    errors.ConflictError: ProblemType.CONFLICT,
    errors.IncompleteBatchError: ProblemType.INCOMPLETE_BATCH,
    errors.UnauthorizedError: ProblemType.UNAUTHORIZED,
    errors.ForbiddenError: ProblemType.FORBIDDEN,
    errors.InvitationRequiredError: ProblemType.INVITATION_REQUIRED,
    errors.InvalidInvitationError: ProblemType.INVALID_INVITATION,
    errors.InvitationWrongCampaignError: ProblemType.INVITATION_WRONG_CAMPAIGN,
    errors.InvitationExpiredError: ProblemType.INVITATION_EXPIRED,
    errors.InvitationUsedError: ProblemType.INVITATION_USED,
    errors.RateLimitedError: ProblemType.RATE_LIMITED,
    errors.InsecureRefusedError: ProblemType.INSECURE_REFUSED,
    errors.WrongSubmissionSizeError: ProblemType.WRONG_SUBMISSION_SIZE,
    errors.NotEnoughParticipantsError: ProblemType.NOT_ENOUGH_PARTICIPANTS,
    errors.OptimizationFailedError: ProblemType.OPTIMIZATION_FAILED,
    errors.UnavailableError: ProblemType.UNAVAILABLE,
    errors.UpstreamFailedError: ProblemType.UPSTREAM_FAILED,
}


def domain_problem(exc: errors.DomainError) -> Problem:
    """The problem document of a domain error, by :data:`DOMAIN_PROBLEMS`."""
    problem_type = next((DOMAIN_PROBLEMS[cls] for cls in type(exc).__mro__
                         if cls in DOMAIN_PROBLEMS), ProblemType.INTERNAL)
    return Problem(problem_type, exc.detail, extra=exc.extra, headers=exc.headers)


#: Problems for the HTTP errors the framework itself raises (routing, body size, media type).
FRAMEWORK_PROBLEMS: dict[int, tuple[str, str]] = {
    400: ("malformed-body", "bad request"),
    401: ("unauthorized", "missing or invalid credentials"),
    403: ("forbidden", "operation not allowed"),
    404: ("not-found", "no such resource"),
    405: ("method-not-allowed", "method not allowed on this resource"),
    413: ("body-too-large", "the request body is too large"),
    415: ("unsupported-media-type", "the request body must be JSON"),
}


def install_problem_handlers(app: FastAPI, service: str | None = None) -> None:
    """Make every error of ``app`` an RFC 9457 problem body (never a bare 500); a 404 of
    the framework (no such path) names the ``service`` that answered."""

    async def on_problem(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(exc)

    async def on_domain_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, errors.DomainError)
        return problem_response(domain_problem(exc))

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(validation_problem(exc))

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        if status == 404 and service is not None:
            problem = Problem("not-found", f"no such resource on the {service}",
                              extra={"service": service})
        elif status in FRAMEWORK_PROBLEMS:
            problem = Problem(*FRAMEWORK_PROBLEMS[status])
        elif 400 <= status < 500:
            problem = Problem("invalid-field", "invalid request", status=status)
        else:
            problem = Problem("internal", "internal error", status=status)
        response = problem_response(problem)
        if exc.headers:
            for key, value in exc.headers.items():
                response.headers[key] = value
        return response

    async def on_disconnect(_: Request, exc: Exception) -> JSONResponse:
        # The client went away (or was cut off by a read deadline) mid-request: nothing
        # can be answered, and nothing happened that needs more than a debug line.
        _log.debug("client disconnected before its request was read")
        return problem_response(Problem("malformed-body", "the request body did not arrive"))

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        _log.error("unexpected error: %s", type(exc).__name__, exc_info=exc)
        return problem_response(Problem("internal", "internal error"))

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(errors.DomainError, on_domain_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(ClientDisconnect, on_disconnect)
    app.add_exception_handler(Exception, on_unexpected)


class BodySizeLimit:
    """ASGI middleware: refuse request bodies over ``max_bytes`` with ``body-too-large``,
    and (with ``service``) name the service on every response (:data:`SERVICE_HEADER`).

    Checks ``Content-Length`` up front and counts streamed bytes (chunked
    transfer), so an oversize body is never buffered whole.  The two edge rules share
    one layer: every request pays for each layer it passes.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, service: str | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.header = None if service is None else (SERVICE_HEADER.encode(), service.encode())

    def _too_large(self) -> Problem:
        return Problem("body-too-large", f"the request body exceeds {self.max_bytes} bytes")

    def _named(self, send: Send) -> Send:
        """``send``, adding the service's header to the response's start."""
        header = self.header
        if header is None:
            return send

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        return named

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._named(send)
        declared_all = True  # every byte of the body is declared by Content-Length
        length_seen = False
        for key, value in scope.get("headers", ()):
            if key == b"content-length":
                length_seen = True
                try:
                    declared = int(value)
                except ValueError:
                    await problem_response(
                        Problem("malformed-body", "invalid Content-Length")
                    )(scope, receive, send)
                    return
                if declared > self.max_bytes:
                    await problem_response(self._too_large())(scope, receive, send)
                    return
            elif key == b"transfer-encoding":
                declared_all = False
        if length_seen and declared_all:
            # The HTTP server delivers exactly Content-Length bytes (no Transfer-Encoding),
            # all of them checked above: nothing to count.
            await self.app(scope, receive, send)
            return
        too_large = self._too_large()
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not response_started:
                await problem_response(too_large)(scope, receive, send)


class _BodyTooLarge(StarletteHTTPException):
    """Raised inside :class:`BodySizeLimit` when a streamed body passes the limit.

    An HTTP 413 exception, so that body parsing re-raises it unchanged and the
    problem handler answers ``body-too-large`` even when it is caught inside.
    """

    def __init__(self) -> None:
        super().__init__(status_code=413)


def install_edge(app: FastAPI, max_body_bytes: int, service: str | None = None) -> None:
    """Problem handlers, the body size limit and (with ``service``) the service's name on
    every response of ``app``."""
    install_problem_handlers(app, service)
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes, service=service)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None for anything else."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


class Health(BaseModel):
    """Body of ``/livez`` and ``/readyz``."""

    status: str
    version: str = __version__


def health_router(ready: Callable[[], Awaitable[None]], *,
                  with_version: bool = True) -> APIRouter:
    """``GET /livez`` (always ok) and ``GET /readyz`` (``ready`` raises a Problem if not).

    ``with_version`` adds the package version to the body (and documents the
    :class:`Health` model); without it the body is just ``{"status": ...}``.
    """
    router = APIRouter(tags=["health"])

    def answer(status: str) -> Any:
        return Health(status=status) if with_version else {"status": status}

    model: Any = Health if with_version else dict[str, str]

    @router.get("/livez", response_model=model)
    async def livez() -> Any:
        return answer("ok")

    @router.get("/readyz", response_model=model,
                responses={503: {"description": "storage or the other service unavailable"}})
    async def readyz() -> Any:
        await ready()
        return answer("ready")

    return router


# -- OpenAPI --------------------------------------------------------------------------------

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "An RFC 9457 problem document; `type` is `urn:segshuffle:error:<name>`.",
    "type": "object",
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
    },
    "required": ["type", "title", "status", "detail"],
}

_PROBLEM_STATUSES: dict[str, str] = {
    "400": "malformed JSON body",
    "401": "missing or invalid bearer token",
    "403": "these credentials may not do this",
    "404": "unknown campaign, round or resource",
    "409": "conflicts with the campaign's phase or stored state",
    "413": "body too large",
    "415": "body not declared as JSON",
    "422": "invalid field",
    "429": "too many requests from this source",
    "502": "the other service failed",
    "503": "not ready (storage, keys or the other service)",
}


def document_problems(schema: dict[str, Any], security: Mapping[tuple[str, str], str]
                      ) -> dict[str, Any]:
    """Add every problem response, and the bearer schemes, to an OpenAPI document.

    Each operation documents as ``application/problem+json`` the statuses it can answer:
    404, 409, 422, 429, 502 and 503 always (path parameters, the campaign's phase, rate
    limits, the other service, readiness), 400, 413 and 415 with a body, 401 and 403 where
    ``security`` maps ``(METHOD, path)`` to the name of the bearer token it needs.
    FastAPI's default 422 (its own validation schema) is replaced: the edge never answers
    with that shape.
    """
    components = schema.setdefault("components", {})
    components.setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    components["schemas"].pop("HTTPValidationError", None)
    components["schemas"].pop("ValidationError", None)
    schemes = components.setdefault("securitySchemes", {})
    for name in sorted(set(security.values())):
        schemes[name] = {"type": "http", "scheme": "bearer",
                         "description": f"the {name.removesuffix('Token')} bearer token"}
    reference = {"$ref": "#/components/schemas/Problem"}
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            statuses = {"404", "409", "422", "429", "502", "503"}
            if method in ("post", "put", "patch"):
                statuses |= {"400", "413", "415"}
            scheme = security.get((method.upper(), path))
            if scheme is not None:
                operation["security"] = [{scheme: []}]
                statuses |= {"401", "403"}
            responses = operation.setdefault("responses", {})
            for status in sorted(statuses):
                responses[status] = {
                    "description": _PROBLEM_STATUSES[status],
                    "content": {PROBLEM_MEDIA_TYPE: {"schema": reference}},
                }
    return schema
