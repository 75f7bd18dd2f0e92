"""A static web site on loopback: the web client's files and a few JSON documents.

The web client (``clients/web``) is plain ES modules; a browser loads them only from an
http(s) origin, and WebCrypto's X25519 needs a secure context, which http://127.0.0.1
is.  :class:`StaticSite` serves a directory read-only (no listings, nothing outside it)
with the MIME types module scripts need, plus JSON documents kept in memory that the
host may replace while the site runs (the demo's configuration and, after the release,
its results).  For tests and the local demo only: it is no production web server.
"""

from __future__ import annotations

import json
import mimetypes
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".json": "application/json",
          ".html": "text/html; charset=utf-8", ".css": "text/css", ".svg": "image/svg+xml",
          ".png": "image/png"}

#: The largest file the site serves (the client's modules are a few kilobytes each).
MAX_FILE_BYTES = 4 * 1024 * 1024


class StaticSite:
    """Serves ``root`` and the in-memory ``documents`` (path -> JSON value) on 127.0.0.1."""

    def __init__(self, root: str | Path, documents: Mapping[str, Any] | None = None,
                 *, port: int = 0) -> None:
        self.root = Path(root).resolve()
        self._documents: dict[str, bytes] = {}
        self._lock = threading.Lock()
        for path, value in (documents or {}).items():
            self.publish(path, value)
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                status, kind, body = site._answer(urlsplit(self.path).path)
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.send_header("cache-control", "no-store")
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="static-site")
        self._thread.start()

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``: the origin the shuffler's CORS setting must list."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def url(self, path: str) -> str:
        return f"{self.origin}/{path.lstrip('/')}"

    def publish(self, path: str, value: Any) -> None:
        """Serve ``value`` as JSON at ``path`` (replacing what was there)."""
        body = json.dumps(value, separators=(",", ":")).encode()
        with self._lock:
            self._documents["/" + path.lstrip("/")] = body

    def _answer(self, path: str) -> tuple[int, str, bytes]:
        with self._lock:
            document = self._documents.get(path)
        if document is not None:
            return HTTPStatus.OK, "application/json", document
        target = (self.root / unquote(path).lstrip("/")).resolve()
        if path.endswith("/"):
            target = target / "index.html"
        if (not target.is_relative_to(self.root) or not target.is_file()
                or target.stat().st_size > MAX_FILE_BYTES):
            return HTTPStatus.NOT_FOUND, "text/plain", b"not found\n"
        kind = _TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0]
        return HTTPStatus.OK, kind or "application/octet-stream", target.read_bytes()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> StaticSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
