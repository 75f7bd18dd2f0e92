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
