"""How both services listen: the bound socket, and uvicorn's configuration around it."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from . import lifeline
from .database import require_sqlite_directory
from .heap import freeze_start_up_heap
from .observability import configure_logging
from .state_paths import require_writable
from .timeouts import bounded_protocol, event_loop

if TYPE_CHECKING:
    import uvicorn

    from .configuration import ServiceSettings

SettingsT = TypeVar("SettingsT", bound="ServiceSettings")


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


def uvicorn_config(app: Any, *, header_timeout: float, body_timeout: float) -> uvicorn.Config:
    """uvicorn's configuration for either service.

    No access log (it names clients), no ``Server`` or ``Date`` header, 10 s of graceful
    shutdown, slow-client deadlines (:func:`.timeouts.bounded_protocol`) and the fastest
    event loop installed.  Logging is left exactly as
    :func:`.observability.configure_logging` set it: uvicorn's ``log_level`` stays unset,
    since any value of it would raise uvicorn's own loggers back to that level.
    """
    import uvicorn

    return uvicorn.Config(app, access_log=False, log_config=None, log_level=None,
                          proxy_headers=False, server_header=False, date_header=False,
                          timeout_graceful_shutdown=10, loop=event_loop(),
                          http=bounded_protocol(header_timeout, body_timeout))


def serve(name: str, settings: SettingsT, create_app: Callable[[SettingsT], Any]) -> int:
    """Run one service until interrupted; returns the exit status.

    The start-up order both services share: the supervisor's lifeline watched (if
    ``lifeline_fd`` is set, :mod:`.lifeline`), logging, a SQLite directory that must exist,
    every directory of its state able to take new files (:mod:`.state_paths`; nothing is
    made yet), the port bound *before* ``create_app`` makes anything (a signing key, a database), so
    a port in use leaves nothing behind; then ``NAME listening on port N`` (N the real
    port, also for port 0, so a supervisor can find it), start-up's heap frozen
    (:mod:`.heap`) and uvicorn on that socket.
    """
    import uvicorn

    if settings.lifeline_fd is not None:
        lifeline.watch(settings.lifeline_fd)
    configure_logging(settings.log_level, settings.log_format)
    require_sqlite_directory(settings.database)
    require_writable(settings.state_directories())
    sock = listening_socket(settings.host, settings.port)
    try:
        app = create_app(settings)
    except BaseException:
        sock.close()
        raise
    server = uvicorn.Server(uvicorn_config(app, header_timeout=settings.header_timeout,
                                           body_timeout=settings.body_timeout))
    logging.getLogger(f"segshuffle.{name}").info("%s listening on port %d", name,
                                                 sock.getsockname()[1])
    freeze_start_up_heap()
    server.run(sockets=[sock])
    return 0
