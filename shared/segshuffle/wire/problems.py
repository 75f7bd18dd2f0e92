"""Problem types and RFC 9457 error responses shared by both services.

Every error either service returns is an ``application/problem+json`` body

    {"type": "urn:segshuffle:error:<name>", "title": ..., "status": ..., "detail": ...}

with ``type`` from the fixed list :data:`PROBLEM_TYPES`.  Handlers raise
:class:`Problem`; :func:`install_problem_handlers` turns it, FastAPI's request
validation errors, Starlette's 404/405 and any unexpected exception into such a
body, and :class:`BodySizeLimit` answers oversize bodies with ``body-too-large``
before they are read into memory.

Error bodies never echo request input (a rejected field's value may be a
ciphertext or a token): validation errors list only the location and message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PROBLEM_MEDIA_TYPE = "application/problem+json"
URN_PREFIX = "urn:segshuffle:error:"

_log = logging.getLogger("segshuffle.problems")


@dataclass(frozen=True)
class ProblemType:
    """One entry of the fixed list: short name, default HTTP status, title."""

    name: str
    status: int
    title: str

    @property
    def uri(self) -> str:
        return URN_PREFIX + self.name


PROBLEM_TYPES: Mapping[str, ProblemType] = {
    p.name: p
    for p in (
        ProblemType("malformed-body", 400, "The request body is not valid JSON"),
        ProblemType("invalid-field", 422, "A field of the request is missing or invalid"),
        ProblemType("body-too-large", 413, "The request body exceeds the size limit"),
        ProblemType("unsupported-media-type", 415, "The request body must be application/json"),
        ProblemType("not-found", 404, "No such resource"),
        ProblemType("method-not-allowed", 405, "Method not allowed on this resource"),
        ProblemType("unknown-campaign", 404, "No such campaign"),
        ProblemType("unknown-round", 404, "No such round (rounds are 1 and 2)"),
        ProblemType("wrong-phase", 409, "The campaign is not in a phase that allows this"),
        ProblemType("already-submitted", 409, "This user already submitted in this round"),
        ProblemType("already-exists", 409, "A resource with this id already exists"),
        ProblemType("conflict", 409, "The request conflicts with the stored state"),
        ProblemType("incomplete-batch", 409, "Not every chunk of the batch has arrived"),
        ProblemType("unauthorized", 401, "Missing or invalid credentials"),
        ProblemType("forbidden", 403, "These credentials do not allow this operation"),
        ProblemType("insecure-refused", 403, "Insecure parameters are disabled on this server"),
        ProblemType("decrypt-failed", 422, "A ciphertext failed to decrypt"),
        ProblemType("invalid-message", 422, "A decrypted message is not a valid plaintext"),
        ProblemType("out-of-domain", 422, "A decrypted value is outside the campaign's domain"),
        ProblemType("replay", 409, "An exact replay of an earlier message"),
        ProblemType("wrong-submission-size", 422, "Wrong number of messages in a submission"),
        ProblemType("not-enough-participants", 409, "Too few participants for this round"),
        ProblemType("optimization-failed", 422, "No parameters satisfy the privacy constraints"),
        ProblemType("rate-limited", 429, "Too many requests"),
        ProblemType("unavailable", 503, "The service is not ready"),
        ProblemType("upstream-failed", 502, "A request to the other service failed"),
        ProblemType("internal", 500, "Internal error"),
    )
}


def problem_uri(name: str) -> str:
    """``urn:segshuffle:error:<name>`` for a name of the fixed list."""
    return PROBLEM_TYPES[name].uri


class Problem(Exception):  # noqa: N818 (the RFC 9457 name)
    """Raise from a handler to answer with an RFC 9457 problem body.

    ``extra`` adds members to the body (RFC 9457 extension members); ``headers``
    adds response headers (``WWW-Authenticate`` on 401).
    """

    def __init__(
        self,
        name: str,
        detail: str,
        *,
        status: int | None = None,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if name not in PROBLEM_TYPES:
            raise KeyError(f"unknown problem type {name!r}")
        super().__init__(detail)
        self.problem_type = PROBLEM_TYPES[name]
        self.name = name
        self.detail = detail
        self.status = status if status is not None else self.problem_type.status
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": self.problem_type.uri,
            "title": self.problem_type.title,
            "status": self.status,
            "detail": self.detail,
        }
        body.update(self.extra)
        return body


def problem_response(problem: Problem) -> JSONResponse:
    """The ``application/problem+json`` response of a :class:`Problem`."""
    return JSONResponse(
        problem.body(),
        status_code=problem.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=problem.headers or None,
    )


def _validation_problem(exc: RequestValidationError) -> Problem:
    """Malformed JSON -> malformed-body (400); anything else -> invalid-field (422)."""
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        return Problem("malformed-body", "the request body is not valid JSON")
    if any(e.get("type") == "model_attributes_type" and tuple(e.get("loc", ())) == ("body",)
           for e in errors):
        return Problem("invalid-field", "the request body must be a JSON object",
                       extra={"errors": [{"loc": ["body"], "msg": "must be a JSON object"}]})
    listed = [
        {"loc": [str(part) for part in e.get("loc", ())], "msg": str(e.get("msg", "invalid"))}
        for e in errors[:20]
    ]
    first = listed[0] if listed else {"loc": [], "msg": "invalid"}
    where = ".".join(p for p in first["loc"] if p != "body") or "body"
    return Problem("invalid-field", f"{where}: {first['msg']}", extra={"errors": listed})


#: Problems for the HTTP errors the framework itself raises (routing, body size, media type).
_FRAMEWORK_PROBLEMS: dict[int, tuple[str, str]] = {
    400: ("malformed-body", "bad request"),
    401: ("unauthorized", "missing or invalid credentials"),
    403: ("forbidden", "operation not allowed"),
    404: ("not-found", "no such resource"),
    405: ("method-not-allowed", "method not allowed on this resource"),
    413: ("body-too-large", "the request body is too large"),
    415: ("unsupported-media-type", "the request body must be JSON"),
}


def install_problem_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` an RFC 9457 problem body (never a bare 500)."""

    async def on_problem(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(exc)

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(_validation_problem(exc))

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        if status in _FRAMEWORK_PROBLEMS:
            problem = Problem(*_FRAMEWORK_PROBLEMS[status])
        elif 400 <= status < 500:
            problem = Problem("invalid-field", "invalid request", status=status)
        else:
            problem = Problem("internal", "internal error", status=status)
        response = problem_response(problem)
        if exc.headers:
            for key, value in exc.headers.items():
                response.headers[key] = value
        return response

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        _log.error("unexpected error: %s", type(exc).__name__, exc_info=exc)
        return problem_response(Problem("internal", "internal error"))

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)


class BodySizeLimit:
    """ASGI middleware: refuse request bodies over ``max_bytes`` with ``body-too-large``.

    Checks ``Content-Length`` up front and counts streamed bytes (chunked
    transfer), so an oversize body is never buffered whole.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = Problem(
            "body-too-large", f"the request body exceeds {self.max_bytes} bytes"
        )
        for key, value in scope.get("headers", ()):
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await problem_response(
                        Problem("malformed-body", "invalid Content-Length")
                    )(scope, receive, send)
                    return
                if declared > self.max_bytes:
                    await problem_response(too_large)(scope, receive, send)
                    return
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
