"""A real nginx process for the tests that put the services behind a proxy or a load
balancer (tests/test_tls.py, tests/test_replicas.py), rendered from the files under
deploy/ with loopback upstreams, free ports and a scratch directory for its state.

``.ci/run`` installs Debian's nginx-light; without it these tests skip, except under CI
(``CI=true``), where a missing nginx is a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

STARTUP_SECONDS = 20.0
REPO = Path(__file__).resolve().parents[1]
SCALE = REPO / "deploy" / "scale"
TLS = REPO / "deploy" / "tls"
DOCKER_POOLS = "set_real_ip_from 172.16.0.0/12;\n    set_real_ip_from 192.168.0.0/16;\n    "
"""The balancer's trusted sources of X-Forwarded-For in deploy/scale/shuffler.conf."""


def nginx_binary() -> str:
    """The nginx binary; skips without one (fails under CI=true)."""
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/sbin/nginx") if os.access(p, os.X_OK)), None)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nginx is not installed (apt-get install nginx-light; .ci/run does)")
        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    return found


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def substitute(text: str, replacements: dict[str, str], source: str) -> str:
    """Replace each key of ``replacements``, which must occur in ``text`` (so that a change
    of the deployed files cannot silently leave a container path in the rendering)."""
    for old, new in replacements.items():
        assert old in text, f"{source} no longer contains {old!r}"
        text = text.replace(old, new)
    return text


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until ``port`` accepts connections; fail if nginx exits or takes too long."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"nginx exited ({process.returncode}): {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nginx did not listen on {port} within {STARTUP_SECONDS}s")


@contextmanager
def running_nginx(conf: Path, state: Path, ports: Sequence[int]) -> Iterator[None]:
    """nginx with the rendered ``conf`` (its state under ``state``), checked with ``-t``,
    running until the block ends and listening on every port of ``ports``."""
    command = [nginx_binary(), "-p", str(state), "-c", str(conf), "-e", "stderr"]
    checked = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    log = state / "nginx.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([*command, "-g", "daemon off;"], stdout=sink,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        for port in ports:
            wait_for_port(port, process, log)
        yield
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def render_balancer(state: Path, *, servers: list[int], shufflers: list[int],
                    server_port: int, shuffler_port: int, source_limits: str = "on",
                    real_ip_from: Sequence[str] | None = None) -> Path:
    """deploy/scale/nginx.conf and its site files rendered into ``state``: upstreams on
    127.0.0.1 at ``servers`` and ``shufflers``, listening on ``server_port`` and
    ``shuffler_port``, pid file and temporary paths in ``state``, the per-source limits
    of ``source-limits-<source_limits>.conf`` (``on`` or ``off``, as compose's
    SEGSHUFFLE_SCALE_SOURCE_LIMITS chooses) and, with ``real_ip_from``, those networks
    trusted for X-Forwarded-For instead of Docker's address pools.  Returns the main
    file."""
    sites = state / "sites"
    sites.mkdir(parents=True)
    limits = (SCALE / f"source-limits-{source_limits}.conf").read_text()
    (sites / "source-limits.conf").write_text(limits)
    (state / "nginx.conf").write_text(substitute((SCALE / "nginx.conf").read_text(), {
        "user www-data;": "user root root;" if os.geteuid() == 0 else "",
        "pid /tmp/nginx.pid;": f"pid {state}/nginx.pid;",
        "/tmp/nginx-": f"{state}/nginx-",
        "include /etc/nginx/segshuffle/*.conf;": f"include {sites}/*.conf;",
    }, "nginx.conf"))
    for name, ports, listen, default in (("server", servers, server_port, 8080),
                                         ("shuffler", shufflers, shuffler_port, 8081)):
        replacements = {f"server {name}-{i + 1}:{default} ": f"server 127.0.0.1:{port} "
                        for i, port in enumerate(ports)}
        replacements[f"listen {default};"] = f"listen 127.0.0.1:{listen};"
        if name == "shuffler" and real_ip_from is not None:
            replacements[DOCKER_POOLS] = "".join(f"set_real_ip_from {network};\n    "
                                                 for network in real_ip_from)
        text = substitute((SCALE / f"{name}.conf").read_text(), replacements,
                           f"{name}.conf")
        (sites / f"{name}.conf").write_text(text)
    return state / "nginx.conf"


def render_proxy(state: Path, certs: Path, *, server: int, shuffler: int, server_tls: int,
                 shuffler_tls: int) -> Path:
    """deploy/tls/nginx.conf and its two site files, rendered into ``state`` for a proxy on
    loopback: upstreams 127.0.0.1:``server`` and :``shuffler``, TLS on ``server_tls`` and
    ``shuffler_tls``, certificates from ``certs``, pid file and temporary paths in
    ``state``.  Returns the main configuration file."""
    sites = state / "sites"
    sites.mkdir(parents=True)
    main_conf = substitute((TLS / "nginx.conf").read_text(), {
        # workers as the test's own user (a non-root master ignores the directive)
        "user www-data;": "user root root;" if os.geteuid() == 0 else "",
        "pid /tmp/nginx.pid;": f"pid {state}/nginx.pid;",
        "/tmp/nginx-": f"{state}/nginx-",
        "include /etc/nginx/segshuffle/*.conf;": f"include {sites}/*.conf;",
    }, "nginx.conf")
    (state / "nginx.conf").write_text(main_conf)
    for name, upstream, port, tls_port in (("server", "server:8080", server, server_tls),
                                           ("shuffler", "shuffler:8081", shuffler,
                                            shuffler_tls)):
        listen = "listen 8443 ssl;" if name == "server" else "listen 8444 ssl;"
        text = substitute((TLS / f"{name}.conf").read_text(), {
            f"server {upstream};": f"server 127.0.0.1:{port};",
            listen: f"listen 127.0.0.1:{tls_port} ssl;",
            "/etc/segshuffle/tls/": f"{certs}/",
        }, f"{name}.conf")
        (sites / f"{name}.conf").write_text(text)
    return state / "nginx.conf"
