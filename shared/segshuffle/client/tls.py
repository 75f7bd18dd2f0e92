"""Which certificate authorities an HTTPS connection trusts.

Every HTTP client of the project (the SDK's :class:`~segshuffle.client.Client` and
:class:`~segshuffle.client.AsyncClient`, the operator client behind ``segshuffle admin``,
and the shuffler's link to the server) trusts the system's store by default.  A deployment
with a private certificate authority (``deploy/tls/make-certs.sh``) hands its CA
certificate to them instead: :func:`trust` turns an optional PEM file into the value of
httpx's ``verify=``, an :class:`ssl.SSLContext` that trusts that file's certificates and
nothing else (``ssl.create_default_context(cafile=...)``: hostname checking and
certificate verification stay on, TLS 1.2 at least).

A missing, unreadable or non-PEM file is a :class:`ValueError` with one line naming the
file, raised when the client is built, never on the first request.

Building a verifying context loads a whole trust store and costs tens of milliseconds.
The SDK's clients therefore share contexts (:func:`shared_context`): the system's store
is loaded once per process, a CA file once per content (the file is still read, and
checked, each time a client is built, so a replaced file is picked up at once).
Sharing is safe: a context holds only trust settings, and every client here speaks
HTTP/1.1, the only ALPN value httpx's transport sets on it.
"""

from __future__ import annotations

import hashlib
import os
import ssl
import threading

CA_FILE_ENV = "SEGSHUFFLE_CA_FILE"
"""The environment variable ``segshuffle admin`` reads when ``--ca-file`` is not given."""


MAX_SHARED_CONTEXTS = 32
"""Contexts :func:`shared_context` keeps (the oldest goes first)."""
_shared: dict[tuple[str, ...], ssl.SSLContext] = {}
_shared_lock = threading.Lock()


def _read_pem(path: str) -> bytes:
    """The PEM bytes of a CA file (``ValueError`` naming the file if it has none)."""
    try:
        with open(path, "rb") as handle:
            pem = handle.read(1 << 20)
    except OSError as exc:
        raise ValueError(f"cannot read the CA file {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError(f"the CA file {path} holds no PEM certificate")
    return pem


def ssl_context(ca_file: str | os.PathLike[str]) -> ssl.SSLContext:
    """A new client context that trusts exactly the CA certificates in ``ca_file`` (PEM)."""
    path = os.fspath(ca_file)
    return _context_from_pem(path, _read_pem(path))


def _context_from_pem(path: str, pem: bytes) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cadata=pem.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(f"the CA file {path} is not a valid PEM certificate file: "
                         f"{getattr(exc, 'reason', None) or exc}") from None


def trust(ca_file: str | os.PathLike[str] | None) -> ssl.SSLContext | bool:
    """httpx's ``verify=``: the system's trust store (``True``) without ``ca_file``, else a
    context trusting only the certificates in it."""
    if ca_file is None or os.fspath(ca_file) == "":
        return True
    return ssl_context(ca_file)


def shared_context(ca_file: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """httpx's ``verify=`` for the SDK's clients, built once and reused (module docstring).

    Without ``ca_file``: the context httpx itself builds for ``verify=True`` (certifi's
    store, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set), one per process and per value
    of those variables.  With ``ca_file``: a context trusting only its certificates, one
    per file content; a missing or non-PEM file is a ``ValueError`` as with
    :func:`ssl_context`.
    """
    if ca_file is None or os.fspath(ca_file) == "":
        key: tuple[str, ...] = ("system", os.environ.get("SSL_CERT_FILE", ""),
                                os.environ.get("SSL_CERT_DIR", ""))
        pem = b""
        path = ""
    else:
        path = os.fspath(ca_file)
        pem = _read_pem(path)
        key = ("file", os.path.realpath(path), hashlib.sha256(pem).hexdigest())
    with _shared_lock:
        context = _shared.get(key)
        if context is None:
            if key[0] == "system":
                import httpx

                context = httpx.create_ssl_context()
            else:
                context = _context_from_pem(path, pem)
            while len(_shared) >= MAX_SHARED_CONTEXTS:
                del _shared[next(iter(_shared))]
            _shared[key] = context
        return context


def certificate_error(exc: BaseException) -> str | None:
    """Why the peer's certificate was refused, if that is what ``exc`` (an httpx error)
    comes down to; ``None`` for any other failure.

    httpx wraps the :class:`ssl.SSLCertVerificationError` twice; the chain of causes is
    walked (at most a few links) to find it.
    """
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLCertVerificationError):
            return str(seen.verify_message or seen.reason or "certificate verify failed")
        seen = seen.__cause__ or seen.__context__
    return None
