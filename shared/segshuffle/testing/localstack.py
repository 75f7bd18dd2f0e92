"""A server and a shuffler as local subprocesses, for demos, tests and trying the SDK.

:class:`LocalStack` starts ``segshuffle serve server`` and ``segshuffle serve
shuffler`` as real uvicorn processes on free loopback ports with storage in one
directory, with fresh random tokens passed through the environment.  Each
service binds port 0 and logs ``... listening on port N``; the stack reads the
port from the log.  A service can be killed (``SIGKILL`` included) and restarted
on the same port with the same storage, which is how crash recovery is tested.

It also speaks the two operator APIs through :class:`~.operator.OperatorClient` (the calls
``segshuffle admin`` makes): creating campaigns and reading results on the server (admin
token), releasing rounds on the shuffler (operator token); and it plays
the app operator who invites users: each stack has its own invitation issuer key (the
shuffler gets the public key) and :meth:`LocalStack.invitations` signs invitations with it.
After the server starts, :attr:`LocalStack.server_key` holds its document-signing public
key (``GET /v1/signing-key``, admin), which every in-repo client built from a stack
passes as ``server_key``.

Replicas: :meth:`LocalStack.start_replica` starts one more process of a kind (named
``server-2``, ``shuffler-2``...), with the same settings as the first: the same
database and key directory (give a shared PostgreSQL URL in ``server_env`` /
``shuffler_env`` for real replicas), its own port and log.

The shuffler runs with its default settings (invitation enrollment) except that the
per-source rate limits are off unless ``rate_limits=True``: every simulated user of one
process connects from the same loopback address.

Every service started here dies with the process that started it, however that process
ends (``SIGKILL`` included): each watches the read end of the stack's lifeline pipe
(:mod:`segshuffle.services.lifeline`) and stops when it reads end of file.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from segshuffle.client.errors import ServiceError
from segshuffle.client.policy import ClientPolicy
from segshuffle.core import rules
from segshuffle.crypto.invitations import (
    generate_issuer_key,
    new_invitation,
    public_key_text,
    sign_invitation,
)
from segshuffle.private_files import make_private_folder, open_private_append
from segshuffle.services.lifeline import Lifeline, start_janitor
from segshuffle.wire.models import CampaignView, Results

from .operator import OperatorClient

SERVICES = ("server", "shuffler")
_PORT_LINE = re.compile(r"(server|shuffler) listening on port (\d+)")


def harness_seconds(name: str, default: float) -> float:
    """A wait of the test harness and the benchmarks, in seconds, from the environment
    variable ``SEGSHUFFLE_HARNESS_<NAME>_SECONDS`` or ``default``.

    The defaults hold on a busy 2-core host (a service starting beside a test suite; a
    round whose optimizer runs for minutes); a slower machine raises them without a code
    change.  A value that is not a positive number is refused (ValueError) rather than
    taken as no wait."""
    variable = f"SEGSHUFFLE_HARNESS_{name.upper()}_SECONDS"
    text = os.environ.get(variable)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{variable} must be a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"{variable} must be a positive number of seconds, got {text!r}")
    return value


STARTUP_SECONDS = 120.0
"""Default wait for a service to report its port and answer ready
(``SEGSHUFFLE_HARNESS_STARTUP_SECONDS``)."""
RELEASE_SECONDS = 1800.0
"""Default wait for a released round to be acknowledged by the server, optimizer included
(``SEGSHUFFLE_HARNESS_RELEASE_SECONDS``)."""


class LocalStack:
    """Both services as subprocesses (see the module docstring); use as a context manager."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        min_users: int = 2,
        allow_insecure: bool = False,
        server_env: Mapping[str, str] | None = None,
        shuffler_env: Mapping[str, str] | None = None,
        rate_limits: bool = False,
        startup_timeout: float | None = None,
        python: str = sys.executable,
    ) -> None:
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            # The janitor (started with the services) may remove it first.
            self._tempdir = tempfile.TemporaryDirectory(prefix="segshuffle-",
                                                        ignore_cleanup_errors=True)
            directory = self._tempdir.name
        self.directory = make_private_folder(directory)  # 0700: databases, keys, logs
        self.admin_token = secrets.token_urlsafe(32)
        self.shuffler_token = secrets.token_urlsafe(32)
        self.operator_token = secrets.token_urlsafe(32)
        self.min_users = min_users
        self.rate_limits = rate_limits
        self.issuer_key = generate_issuer_key()
        """The app operator's invitation issuer key (its public key configures the shuffler)."""
        self.allow_insecure = allow_insecure
        self.startup_timeout = (harness_seconds("startup", STARTUP_SECONDS)
                                if startup_timeout is None else startup_timeout)
        """How long a service may take to report its port, then to answer ready."""
        self.python = python
        self._extra = {"server": dict(server_env or {}), "shuffler": dict(shuffler_env or {})}
        self.upstream_url: str | None = None
        """If set before the shuffler starts: the URL it uses for the server (e.g. a proxy)."""
        self.server_key: str | None = None
        """The server's document-signing public key (base64url), read after it starts."""
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._janitor: subprocess.Popen[bytes] | None = None
        """Removes the scratch folder once the lifeline is cut (:meth:`_lifeline_fd`)."""
        self._lifeline: Lifeline | None = None
        """The pipe every service watches (its ``lifeline_fd``): a service stops when this
        process is gone, however it ended (:mod:`segshuffle.services.lifeline`)."""
        self.ports: dict[str, int] = {}
        self._log_offsets: dict[str, int] = {}
        self._http = httpx.Client(timeout=120.0)

    # -- paths and URLs --------------------------------------------------------------------
    def log_path(self, service: str) -> Path:
        return self.directory / f"{service}.log"

    def database_path(self, service: str) -> Path:
        return self.directory / f"{service}.sqlite3"

    @property
    def server_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['server']}"

    @property
    def shuffler_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['shuffler']}"

    @property
    def operator(self) -> OperatorClient:
        """The operator calls (:mod:`.operator`) with this stack's URLs and tokens (those
        of the services started so far)."""
        urls = {service: f"http://127.0.0.1:{port}" for service, port in self.ports.items()}
        return OperatorClient(server=urls.get("server", ""), shuffler=urls.get("shuffler", ""),
                              admin_token=self.admin_token,
                              operator_token=self.operator_token, http=self._http)

    # -- processes ---------------------------------------------------------------------------
    @staticmethod
    def kind(name: str) -> str:
        """The service a process name runs: ``server-2`` is a ``server``."""
        kind = name.split("-", 1)[0]
        if kind not in SERVICES:
            raise ValueError(f"unknown service {name!r}")
        return kind

    def _environment(self, service: str, port: int) -> dict[str, str]:
        kind = self.kind(service)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
        if kind == "server":
            env.update({
                "SEGSHUFFLE_SERVER_HOST": "127.0.0.1",
                "SEGSHUFFLE_SERVER_PORT": str(port),
                "SEGSHUFFLE_SERVER_DATABASE": str(self.database_path("server")),
                "SEGSHUFFLE_SERVER_KEY_DIR": str(self.directory / "server-keys"),
                "SEGSHUFFLE_SERVER_ADMIN_TOKEN": self.admin_token,
                "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": self.shuffler_token,
                "SEGSHUFFLE_SERVER_SHUFFLER_MIN_USERS": str(self.min_users),
                "SEGSHUFFLE_SERVER_ALLOW_INSECURE_PARAMETERS":
                    "true" if self.allow_insecure else "false",
            })
        else:
            env.update({
                "SEGSHUFFLE_SHUFFLER_HOST": "127.0.0.1",
                "SEGSHUFFLE_SHUFFLER_PORT": str(port),
                "SEGSHUFFLE_SHUFFLER_DATABASE": str(self.database_path("shuffler")),
                "SEGSHUFFLE_SHUFFLER_SERVER_URL": self.upstream_url or self.server_url,
                "SEGSHUFFLE_SHUFFLER_SERVER_TOKEN": self.shuffler_token,
                "SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN": self.operator_token,
                "SEGSHUFFLE_SHUFFLER_MIN_USERS": str(self.min_users),
                "SEGSHUFFLE_SHUFFLER_INVITATION_KEYS": public_key_text(self.issuer_key),
            })
            if not self.rate_limits:
                env.update({"SEGSHUFFLE_SHUFFLER_ENROLL_RATE": "0",
                            "SEGSHUFFLE_SHUFFLER_SUBMIT_RATE": "0",
                            "SEGSHUFFLE_SHUFFLER_READ_RATE": "0"})
        env[f"SEGSHUFFLE_{kind.upper()}_LIFELINE_FD"] = str(self._lifeline_fd())
        env.update(self._extra[kind])
        return env

    def _lifeline_fd(self) -> int:
        """The read end of this stack's lifeline, opened on first use; a scratch folder
        this stack made gets a janitor on it, which removes the folder once the line is
        cut, so that a stack killed outright leaves nothing behind."""
        if self._lifeline is None or self._lifeline.closed:
            self._lifeline = Lifeline()
            if self._tempdir is not None:
                self._janitor = start_janitor(self._lifeline, self._tempdir.name)
        return self._lifeline.child_fd

    def start(self) -> LocalStack:
        """Start the server, then the shuffler (which needs the server's URL)."""
        try:
            for service in SERVICES:
                self.start_service(service)
        except BaseException:
            self.stop()
            raise
        return self

    def start_replica(self, service: str) -> str:
        """Start one more process of ``service`` (after the first); returns its name."""
        kind = self.kind(service)
        number = 2
        while f"{kind}-{number}" in self.processes:
            number += 1
        name = f"{kind}-{number}"
        self.start_service(name)
        return name

    def start_service(self, service: str) -> None:
        """Start (or restart, on its previous port) one service process (``server``,
        ``shuffler`` or a replica's name) and wait until it is ready."""
        if service in self.processes and self.processes[service].poll() is None:
            raise RuntimeError(f"{service} is already running")
        port = self.ports.get(service, 0)
        log = self.log_path(service)
        offset = log.stat().st_size if log.exists() else 0
        self._log_offsets[service] = offset
        with open_private_append(log) as sink:  # 0600 when new
            process = subprocess.Popen(
                [self.python, "-m", "segshuffle.cli.main", "serve", self.kind(service)],
                env=self._environment(service, port), stdout=sink, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, pass_fds=(self._lifeline_fd(),),
            )
        self.processes[service] = process
        self.ports[service] = self._wait_for_port(service, process, offset)
        self._wait_ready(service, process)
        if self.kind(service) == "server":
            self.server_key = self.signing_key()

    def _wait_for_port(self, service: str, process: subprocess.Popen[bytes],
                       offset: int) -> int:
        deadline = time.monotonic() + self.startup_timeout
        log = self.log_path(service)
        while time.monotonic() < deadline:
            text = log.read_bytes()[offset:].decode("utf-8", "replace")
            match = _PORT_LINE.search(text)
            if match:
                return int(match.group(2))
            if process.poll() is not None:
                raise ServiceError(f"{service} exited with status {process.returncode}: "
                                   f"{text.strip().splitlines()[-1:] or ['no output']}")
            time.sleep(0.05)
        raise ServiceError(f"{service} did not report its port within {self.startup_timeout}s")

    def _wait_ready(self, service: str, process: subprocess.Popen[bytes]) -> None:
        url = f"http://127.0.0.1:{self.ports[service]}/readyz"
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ServiceError(f"{service} exited with status {process.returncode}")
            try:
                if self._http.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise ServiceError(f"{service} was not ready within {self.startup_timeout}s")

    def kill(self, service: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one service and wait for it to exit."""
        process = self.processes[service]
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop(self) -> None:
        """Stop every process, shufflers first (SIGTERM, then SIGKILL after 10 s);
        idempotent."""
        order = sorted(self.processes, key=lambda name: SERVICES.index(self.kind(name)),
                       reverse=True)
        for service in order:
            process = self.processes.get(service)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self) -> None:
        self.stop()
        if self._janitor is not None:  # this process removes the folder itself, below
            self._janitor.kill()
            self._janitor.wait()
            self._janitor = None
        if self._lifeline is not None:
            self._lifeline.close()
        self._http.close()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- operator APIs -------------------------------------------------------------------------
    def invitations(self, campaign_id: str, count: int, *, expires_in: int = 3600
                    ) -> list[str]:
        """``count`` single-use invitations to ``campaign_id``, signed with the stack's key."""
        expires = int(time.time()) + expires_in
        return [sign_invitation(new_invitation(campaign_id, expires), self.issuer_key)
                for _ in range(count)]

    def signing_key(self) -> str:
        """``GET /v1/signing-key`` on the server (admin): its document-signing public key."""
        return self.operator.signing_key()

    def client_policy(self, **settings: Any) -> ClientPolicy:
        """The policy of an app shipped for this stack: its shuffler's floor as the
        smallest ``min_users``, and the default delta rule at that floor (0.01 / floor) as
        the ceiling, where the SDK's defaults assume the default floor of 10
        (:mod:`segshuffle.client.policy`); ``settings`` override either or add others."""
        floor = self.min_users
        defaults: dict[str, Any] = {
            "min_users": floor,
            "delta_ceiling": min(0.5, rules.DEFAULT_DELTA_FACTOR / floor),
        }
        return ClientPolicy(**{**defaults, **settings})

    def create_campaign(self, body: Mapping[str, Any]) -> CampaignView:
        """``POST /v1/campaigns`` on the server (admin)."""
        return self.operator.create_campaign(body)

    def release(self, campaign_id: str, round_number: int, *, wait: bool = True,
                timeout: float | None = None) -> dict[str, Any]:
        """Ask the shuffler to release a round (operator); with ``wait``, until the server
        has acknowledged it (raises :class:`ServiceError` with the shuffler's last delivery
        error after ``timeout`` seconds: by default the harness's release wait,
        :func:`harness_seconds`)."""
        if timeout is None:
            timeout = harness_seconds("release", RELEASE_SECONDS)
        answer, _ = self.operator.release(campaign_id, round_number, wait=wait,
                                          timeout=timeout, interval=0.2)
        return answer

    def abort(self, campaign_id: str, reason: str = "aborted by the administrator"
              ) -> CampaignView:
        """``POST /v1/campaigns/{cid}/abort`` on the server (admin)."""
        return self.operator.abort(campaign_id, reason)

    def results(self, campaign_id: str) -> Results:
        """``GET /v1/campaigns/{cid}/results`` on the server (admin)."""
        return self.operator.results(campaign_id)

    def campaign(self, campaign_id: str) -> CampaignView:
        return self.operator.campaign(campaign_id)
