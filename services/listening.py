"""The listening socket both services serve on."""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (IPv4 or IPv6 by the host's form); port 0 picks a free one.

    ``proto`` must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted connections only
    then, and without it every keep-alive response waits ~40 ms (Nagle + delayed ACK).
    Bind failures become a ValueError whose message the CLI prints as its one line.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
