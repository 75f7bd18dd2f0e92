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
"""

from __future__ import annotations

import os
import ssl

CA_FILE_ENV = "SEGSHUFFLE_CA_FILE"
"""The environment variable ``segshuffle admin`` reads when ``--ca-file`` is not given."""


def ssl_context(ca_file: str | os.PathLike[str]) -> ssl.SSLContext:
    """A client context that trusts exactly the CA certificates in ``ca_file`` (PEM)."""
    path = os.fspath(ca_file)
    try:
        with open(path, "rb") as handle:
            pem = handle.read(1 << 20)
    except OSError as exc:
        raise ValueError(f"cannot read the CA file {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError(f"the CA file {path} holds no PEM certificate")
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
