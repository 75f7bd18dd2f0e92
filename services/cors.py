"""Cross-origin access for web pages, limited to named origins and to a client's routes.

A browser lets a page on one origin call another origin only with the other origin's
consent (CORS: the Fetch standard's ``Access-Control-*`` headers).  The shuffler gives
it to the origins an operator lists and only on the routes a client uses (the campaign
view, the key config, the round status, enrollments and submissions): never on the
operator's routes, the metrics or the API documents.  By default it lists none.

- A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from a listed origin
  on a client route is answered here, ``204`` with the methods (GET, POST) and request
  headers (``Authorization``, ``Content-Type``, ``If-None-Match``) a client sends, for
  ``PREFLIGHT_SECONDS``.
- Any other request from a listed origin on a client route goes on, and its answer
  carries ``Access-Control-Allow-Origin`` with that origin and exposes the headers a
  client reads (``ETag``, ``Retry-After``).
- Everything else goes on untouched: without the consent headers a browser withholds the
  answer from the page (a preflight of an unlisted origin meets the route's own ``405``
  problem document).  Answers of client routes say ``Vary: Origin`` whenever origins
  are listed, so a cache never hands one origin's answer to another.

No credentials (cookies) are involved: a client authenticates with a bearer token it
holds, so ``Access-Control-Allow-Credentials`` is never sent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .http_edge import route_path

PREFLIGHT_SECONDS = 600
ALLOWED_METHODS = "GET, POST"
ALLOWED_HEADERS = "authorization, content-type, if-none-match"
EXPOSED_HEADERS = "etag, retry-after"


def parse_origins(text: str) -> frozenset[str]:
    """Comma-separated origins (``scheme://host[:port]``, http or https, no path); a
    ValueError names the first that is not one (``*`` included: list them)."""
    origins = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        parts = urlsplit(item)
        if (parts.scheme not in ("http", "https") or not parts.hostname or parts.path
                or parts.query or parts.fragment or parts.username or parts.password
                or item.lower() != f"{parts.scheme}://{parts.netloc}".lower()):
            raise ValueError(f"not an origin (scheme://host[:port], no path or slash): {item!r}")
        origins.add(item.lower())
    return frozenset(origins)


def route_matcher(templates: Iterable[str]) -> Callable[[str], bool]:
    """Whether a request path matches one of the path templates (``{name}``: one segment)."""
    pattern = "|".join(re.sub(r"\\{[a-z_]+\\}", "[^/]+", re.escape(t)) for t in templates)
    compiled = re.compile(f"^(?:{pattern})$")
    return lambda path: compiled.match(path) is not None


class ClientRouteCors:
    """Pure ASGI middleware: the CORS consent of the module docstring."""

    def __init__(self, app: ASGIApp, origins: frozenset[str],
                 is_client_route: Callable[[str], bool]) -> None:
        self.app = app
        self.origins = origins
        self.is_client_route = is_client_route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or not self.origins
                or not self.is_client_route(route_path(scope))):
            await self.app(scope, receive, send)
            return
        headers = {key: value for key, value in scope["headers"]
                   if key in (b"origin", b"access-control-request-method")}
        origin = headers.get(b"origin", b"").decode("latin-1").lower()
        allowed = origin in self.origins
        if (allowed and scope["method"] == "OPTIONS"
                and b"access-control-request-method" in headers):
            await send({"type": "http.response.start", "status": 204, "headers": [
                (b"access-control-allow-origin", origin.encode("latin-1")),
                (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
                (b"access-control-allow-headers", ALLOWED_HEADERS.encode()),
                (b"access-control-max-age", str(PREFLIGHT_SECONDS).encode()),
                (b"vary", b"Origin"),
            ]})
            await send({"type": "http.response.body", "body": b""})
            return

        async def consenting(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer = MutableHeaders(scope=message)
                answer.add_vary_header("Origin")
                if allowed:
                    answer["access-control-allow-origin"] = origin
                    answer["access-control-expose-headers"] = EXPOSED_HEADERS
            await send(message)

        await self.app(scope, receive, consenting)
