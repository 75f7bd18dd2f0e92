"""HTTP caching of public documents, shared by both services: strong ETags, Cache-Control
and conditional GETs (RFC 9110 section 13, RFC 9111 section 5.2).

A document's ETag is strong and derived from its bytes only,
``"<first 32 hex digits of SHA-256(body)>"``, so the server and a shuffler relaying the
same bytes announce the same tag, and a client holding the bytes can recompute it.
Immutable documents (a campaign's key config, its view once the campaign is ``done``)
are served with ``Cache-Control: public, max-age=31536000, immutable``; documents that
can still change with ``public, max-age=<ttl>``.  ``If-None-Match`` naming the current
tag (weak comparison, ``*`` included) is answered ``304 Not Modified`` without a body.
"""

from __future__ import annotations

import hashlib

from starlette.requests import Request
from starlette.responses import Response

IMMUTABLE = "public, max-age=31536000, immutable"
"""Cache-Control of a document that never changes."""


def strong_etag(body: bytes) -> str:
    """The strong entity tag of ``body``: a quoted prefix of its SHA-256 (128 bits)."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def cache_control(immutable: bool, max_age: int) -> str:
    """``Cache-Control`` of a public document (``max_age`` in seconds, mutable ones only)."""
    return IMMUTABLE if immutable else f"public, max-age={max(0, int(max_age))}"


def none_match(header: str | None, etag: str) -> bool:
    """True if an ``If-None-Match`` value names ``etag`` (weak comparison) or is ``*``."""
    if not header:
        return False
    tags = [tag.strip() for tag in header.split(",")[:64]]
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)


def document_response(request: Request, body: bytes, *, immutable: bool, max_age: int = 1,
                      etag: str | None = None) -> Response:
    """``200`` with ``body`` (JSON), or ``304`` if the client already holds these bytes."""
    tag = etag or strong_etag(body)
    headers = {"ETag": tag, "Cache-Control": cache_control(immutable, max_age)}
    if none_match(request.headers.get("if-none-match"), tag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)
