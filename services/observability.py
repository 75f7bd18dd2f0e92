"""Observability both services share: request ids, JSON log lines, Prometheus metrics.

- :class:`RequestObserver` is a pure ASGI middleware (no ``BaseHTTPMiddleware``, which
  runs every request through an extra task and memory stream).  Per HTTP request it
  takes the ``X-Request-ID`` header if it is a sane token (1-64 characters of
  ``[A-Za-z0-9._-]``) or makes a random one, puts it in a context variable that every log
  line of the request carries, echoes it in the response header ``X-Request-ID``, counts
  the request by **route template** (``/v1/campaigns/{campaign_id}``, never the raw path,
  so no campaign id, batch id or token becomes a label value) and status, observes its
  latency, counts ``429`` answers, and logs one line: method, route template, status,
  milliseconds.
- :class:`JsonFormatter` writes one JSON object per log line (``ts``, ``level``,
  ``logger``, ``msg``, ``request_id`` inside a request).  It is a standard-library
  :class:`logging.Formatter`, not structlog: every module already logs through
  :mod:`logging` (uvicorn too), so one formatter covers all of them with no second
  logging pipeline to configure.
- :class:`Metrics` owns one :class:`~prometheus_client.CollectorRegistry` per
  application (never the process-global default registry, so tests may build several
  apps in one process); :func:`metrics_router` serves it at ``GET /metrics``.

Nothing here reads a client address, a header other than ``X-Request-ID``, a body or a
query string: neither the log lines nor the metrics can carry a token, an address or a
ciphertext.  Label values are route templates, methods, status codes, round numbers and
problem names, all from bounded sets.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from segshuffle.wire.problems import ProblemType

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HEADER = REQUEST_ID_HEADER.lower().encode()
UNMATCHED = "<unmatched>"
"""The route label of a request no route matched (404s, static files): one value, so an
attacker probing random paths cannot grow the label set."""
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 120.0)
KNOWN_PROBLEMS = frozenset(member.value[0] for member in ProblemType)
_MAX_SERIES = 4096
"""Labelled series kept by :class:`RequestObserver` (a guard: the label set is bounded)."""

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "segshuffle_request_id", default=None)
"""The id of the request being handled (None outside a request)."""

_log = logging.getLogger("segshuffle.http")


class RandomIds:
    """Fresh random 128-bit ids (hex) from the OS generator, drawn ``batch`` at a time:
    one system call per ``batch`` ids instead of one each. An id is a log correlation
    handle, not a secret; drawing ahead only means the next ids sit in memory a while."""

    ID_BYTES = 16

    def __init__(self, batch: int = 256) -> None:
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        self.batch = batch
        self._ids: list[str] = []
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            if not self._ids:
                pool = secrets.token_bytes(self.ID_BYTES * self.batch)
                self._ids = [pool[start:start + self.ID_BYTES].hex()
                             for start in range(0, len(pool), self.ID_BYTES)]
            return self._ids.pop()


_request_ids = RandomIds()


def accepted_request_id(value: bytes | None) -> str:
    """``value`` if it is a sane request id (1-64 of ``[A-Za-z0-9._-]``), else a fresh random
    one (128 bits, hex; :class:`RandomIds`)."""
    if value is not None:
        try:
            text = value.decode("ascii")
        except UnicodeDecodeError:
            text = ""
        if _SANE_ID.fullmatch(text):
            return text
    return _request_ids.next()


def problem_label(name: str | None) -> str:
    """A problem name as a label value: one of the project's problem types, ``none`` when
    there was no problem document, else ``other`` (another party's text never becomes an
    unbounded label)."""
    if name is None:
        return "none"
    return name if name in KNOWN_PROBLEMS else "other"


class Metrics:
    """The metrics of one application, in a registry of its own.

    Common to both services: ``segshuffle_http_requests_total{route,method,status}``,
    ``segshuffle_http_request_duration_seconds{route,method}`` and
    ``segshuffle_http_rate_limited_total{route}``.  Each service adds its own counters
    with :meth:`counter` (names are prefixed ``segshuffle_<service>_``).
    """

    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("segshuffle_http_requests", "HTTP requests answered, by route "
                                "template, method and status", ["route", "method", "status"],
                                registry=self.registry)
        self.latency = Histogram("segshuffle_http_request_duration_seconds",
                                 "Time from request to the end of the response",
                                 ["route", "method"], buckets=LATENCY_BUCKETS,
                                 registry=self.registry)
        self.rate_limited = Counter("segshuffle_http_rate_limited",
                                    "Requests refused with 429 rate-limited, by route template",
                                    ["route"], registry=self.registry)

    def counter(self, name: str, documentation: str, labels: Iterable[str] = ()) -> Counter:
        """A counter ``segshuffle_<service>_<name>_total`` in this registry."""
        return Counter(f"segshuffle_{self.service}_{name}", documentation, list(labels),
                       registry=self.registry)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


def metrics_router(metrics: Metrics) -> APIRouter:
    """``GET /metrics``: the Prometheus text format (unauthenticated, like a health check:
    it holds counts only; do not expose it beyond the operator's network)."""
    router = APIRouter(tags=["health"])

    @router.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return router


def route_template(scope: Scope) -> str:
    """The path template of the route that handled ``scope`` (set by the router as
    ``scope["route"]``), or :data:`UNMATCHED`."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class RequestObserver:
    """Pure ASGI middleware: request id, one log line and the HTTP metrics per request."""

    def __init__(self, app: ASGIApp, metrics: Metrics,
                 quiet_routes: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.metrics = metrics
        self.quiet_routes = quiet_routes
        """Route templates whose successful requests are logged at DEBUG only (the
        shuffler's user routes: its disk keeps no per-user timeline)."""
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        """The labelled request counter and latency histogram of each (route, method,
        status) seen, so that a request does no label lookup (a bounded set: route
        templates, methods and statuses)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((value for key, value in scope.get("headers", ()) if key == _HEADER), None)
        rid = accepted_request_id(given)
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500
        echoed = rid.encode()

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ()) if k != _HEADER]
                headers.append((_HEADER, echoed))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        except BaseException:
            # Unexpected errors are answered outside every middleware (Starlette's
            # ServerErrorMiddleware); the id stays set for its log line.  Each request runs
            # in a task of its own, so the id cannot leak into another request.
            self._record(scope, status, started)
            raise
        self._record(scope, status, started)
        request_id.reset(token)

    def _record(self, scope: Scope, status: int, started: float) -> None:
        elapsed = time.perf_counter() - started
        route, method = route_template(scope), scope.get("method", "")
        key = (route, method, status)
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= _MAX_SERIES:
                self._series.clear()
            series = (self.metrics.requests.labels(route, method, str(status)),
                      self.metrics.latency.labels(route, method))
            self._series[key] = series
        series[0].inc()
        series[1].observe(elapsed)
        if status == 429:
            self.metrics.rate_limited.labels(route).inc()
        level = (logging.DEBUG if route in self.quiet_routes and status < 400
                 else logging.INFO)
        if _log.isEnabledFor(level):
            _log.log(level, "%s %s %d %.1fms", method, route, status, elapsed * 1e3)


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id`` (the current request's id, or None) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (UTC, ISO 8601, ms), ``level``, ``logger``, ``msg``,
    ``request_id`` (inside a request) and ``exc`` (the exception type and traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid is not None:
            line["request_id"] = rid
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("json", "text")


class TextFormatter(logging.Formatter):
    """Plain lines (:data:`TEXT_FORMAT`), ending in ``request_id=...`` inside a request."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", None)
        return line if rid is None else f"{line} request_id={rid}"


def log_handler(log_format: str, stream: Any = None) -> logging.Handler:
    """A stderr handler writing ``json`` lines (:class:`JsonFormatter`) or ``text`` lines,
    with the request id filter attached."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be json or text, got {log_format!r}")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(RequestIdFilter())
    return handler


def configure_logging(level: str, log_format: str) -> None:
    """Route every log record to one stderr handler in ``log_format``.

    ``segshuffle`` loggers log at ``level``; everything else (uvicorn, httpx...) only from
    WARNING: uvicorn's startup line names the bound address, httpx's request lines name
    upstream URLs, and uvicorn's access log (which names clients) is silenced entirely.
    """
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(log_handler(log_format))
    root.setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error", "segshuffle"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(level.upper() if name == "segshuffle" else logging.WARNING)
    access = logging.getLogger("uvicorn.access")
    access.handlers.clear()
    access.propagate = False
    access.setLevel(logging.CRITICAL)


def framework_telemetry_off() -> dict[str, Any]:
    """Keyword arguments of ``FastAPI(...)`` that switch off FastAPI's own OpenTelemetry
    instrumentation (FastAPI 0.165 and later; nothing for earlier versions, which have
    none).

    Its spans and metrics would record each request's client address and timing wherever
    a global OpenTelemetry provider is configured, which this module never does (the
    shuffler keeps no request origin), and merely checking the global providers costs
    every request a few environment lookups."""
    try:
        import fastapi.telemetry  # noqa: F401
    except ImportError:  # pragma: no cover - FastAPI before 0.165
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


IDLE_FRAMEWORK_LAYERS = ("ExceptionTelemetryMiddleware", "AppBodyLimitMiddleware")
"""FastAPI's own outer layers that do nothing for these services: its telemetry (off,
:func:`framework_telemetry_off`: the layer's exception hook finds no per-request
telemetry) and its body limit (no ``max_body_size``: the layer only passes requests on;
:class:`~.http_edge.BodySizeLimit` is the services' own)."""


def without_idle_framework_layers(app: Any) -> None:
    """Build ``app``'s middleware stack without :data:`IDLE_FRAMEWORK_LAYERS`.

    Every layer a request passes costs it a coroutine call and a frame; these two cost
    every request about a microsecond each and do nothing here.  Only applied while
    they are idle (FastAPI's telemetry off, no ``max_body_size``); FastAPI versions
    without them are left as they are.
    """
    build = app.build_middleware_stack
    telemetry = getattr(app, "_native_telemetry", None)

    def build_without_idle_layers() -> Any:
        stack = build()
        if getattr(app, "max_body_size", None) is not None or (
                telemetry is not None and telemetry.enabled()):
            return stack
        outer = stack
        while hasattr(outer, "app"):
            inner = outer.app
            if type(inner).__name__ in IDLE_FRAMEWORK_LAYERS and hasattr(inner, "app"):
                outer.app = inner.app
                continue
            outer = inner
        return stack

    app.build_middleware_stack = build_without_idle_layers


def install_observability(app: Any, metrics: Metrics,
                          quiet_routes: frozenset[str] = frozenset()) -> None:
    """``GET /metrics`` and the :class:`RequestObserver` as the outermost middleware (add it
    after every other middleware, so it also sees their answers, such as ``413``)."""
    app.state.metrics = metrics
    app.include_router(metrics_router(metrics))
    app.add_middleware(RequestObserver, metrics=metrics, quiet_routes=quiet_routes)
