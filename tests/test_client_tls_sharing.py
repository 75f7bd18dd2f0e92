"""SDK clients built without ``http=`` share their TLS context instead of building one each
(loading a trust store costs tens of milliseconds per client)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
from pathlib import Path

import httpx
import pytest

from segshuffle.client import AsyncClient, Client
from segshuffle.client.tls import shared_context

from .test_tls import _certs


def _context(http: httpx.Client | httpx.AsyncClient) -> ssl.SSLContext:
    """The context the client's connection pool will wrap its sockets with."""
    return http._transport._pool._ssl_context  # type: ignore[union-attr]


def test_clients_share_the_default_context() -> None:
    first = Client("http://127.0.0.1:9", "c1")
    second = Client("https://shuffler.example", "c2")
    try:
        assert _context(first._http) is _context(second._http) is shared_context()
        assert shared_context().verify_mode is ssl.CERT_REQUIRED
        assert shared_context().check_hostname
    finally:
        first.close()
        second.close()

    async def build() -> ssl.SSLContext:
        async with AsyncClient("http://127.0.0.1:9", "c3") as user:
            return _context(user._http)

    assert asyncio.run(build()) is shared_context()


def test_a_ca_file_context_is_shared_per_content(tmp_path: Path) -> None:
    certs = _certs(tmp_path / "certs")
    first = Client("https://shuffler.example", "c1", ca_file=certs / "ca.pem")
    second = Client("https://shuffler.example", "c1", ca_file=str(certs / "ca.pem"))
    try:
        assert _context(first._http) is _context(second._http)
        assert _context(first._http) is not shared_context()
        # a replaced CA file is read again: a new CA gets a new context
        other = _certs(tmp_path / "other")
        shutil.copyfile(other / "ca.pem", certs / "ca.pem")
        third = Client("https://shuffler.example", "c1", ca_file=certs / "ca.pem")
        assert _context(third._http) is not _context(first._http)
        third.close()
        (certs / "ca.pem").write_text("gone\n")
        with pytest.raises(ValueError, match="holds no PEM certificate"):
            Client("https://shuffler.example", "c1", ca_file=certs / "ca.pem")
    finally:
        first.close()
        second.close()
