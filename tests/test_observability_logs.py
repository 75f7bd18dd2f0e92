"""Logs: JSON lines with the request id of every request, no token, address or ciphertext
(in process, both services), and the helpers behind them."""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from segshuffle.services import observability
from segshuffle.services.http_edge import install_edge
from segshuffle.services.observability import (
    JsonFormatter,
    Metrics,
    RandomIds,
    RequestIdFilter,
    accepted_request_id,
    install_observability,
    log_handler,
    problem_label,
    request_id,
)

from .observability_support import (
    CID,
    OPERATOR,
    Services,
    running_services,
    submit_levels,
)
from .test_server_support import ADMIN_TOKEN, SHUFFLER_TOKEN


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[tuple[Services, io.StringIO]]:
    """Both apps in process; every ``segshuffle`` record goes to a JSON handler."""
    with json_logs() as stream, running_services(tmp_path) as running:
        yield running, stream


@contextmanager
def json_logs() -> Iterator[io.StringIO]:
    """Every ``segshuffle`` record at INFO and above, as JSON lines, while the block runs."""
    stream = io.StringIO()
    handler = log_handler("json", stream)
    logger = logging.getLogger("segshuffle")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_every_request_logs_one_json_line_with_its_id(
        logged: tuple[Services, io.StringIO]) -> None:
    services, stream = logged
    given = "req-1234.abc_DEF"
    assert services.server.get(f"/v1/campaigns/{CID}",
                               headers={"X-Request-ID": given}).status_code == 200
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert all({"ts", "level", "logger", "msg"} <= line.keys() for line in lines)
    mine = [line for line in lines if line.get("request_id") == given]
    assert len(mine) == 1
    assert re.fullmatch(r"GET /v1/campaigns/\{campaign_id\} 200 \d+\.\dms", mine[0]["msg"])
    assert mine[0]["logger"] == "segshuffle.http"


@pytest.mark.slow  # over 10 s on a 2-core machine: the fast tier stays within 3 minutes
def test_logs_hold_no_token_address_or_ciphertext(
        logged: tuple[Services, io.StringIO]) -> None:
    services, stream = logged
    users, sent = submit_levels(services)
    released = services.shuffler.post(f"/v1/campaigns/{CID}/rounds/1/release?wait=true",
                                      headers={"Authorization": f"Bearer {OPERATOR}"})
    assert released.status_code == 200
    text = stream.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]
    # The shuffler's user routes log successes at DEBUG only: no per-user timeline on disk.
    assert not [line for line in lines if line["msg"].startswith(("POST /v1/campaigns/"
                "{campaign_id}/rounds/{round_number}/submissions 201", "POST /v1/campaigns/"
                "{campaign_id}/enrollments 201"))]
    releases = [line for line in lines if line["msg"].startswith(
        "POST /v1/campaigns/{campaign_id}/rounds/{round_number}/release 200")]
    assert len(releases) == 1 and releases[0]["request_id"]
    for user, ciphertext in zip(users, sent, strict=True):
        assert user.session.token and user.session.token not in text
        assert ciphertext and ciphertext not in text
    for secret in (OPERATOR, SHUFFLER_TOKEN, ADMIN_TOKEN, "testclient", "127.0.0.1"):
        assert secret not in text


def test_an_unexpected_error_is_counted_and_logged_with_its_id() -> None:
    app = FastAPI()
    install_edge(app, 1024)
    metrics = Metrics("test")
    install_observability(app, metrics)

    @app.get("/boom/{thing}")
    async def boom(thing: str) -> None:
        raise RuntimeError("boom")

    with json_logs() as stream, TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/boom/x1", headers={"X-Request-ID": "boom-1"})
    assert response.status_code == 500
    assert response.json()["type"] == "urn:segshuffle:error:internal"
    mine = [line["msg"] for line in map(json.loads, stream.getvalue().splitlines())
            if line.get("request_id") == "boom-1"]
    assert any(re.fullmatch(r"GET /boom/\{thing\} 500 \d+\.\dms", msg) for msg in mine)
    assert any(msg.startswith("unexpected error") for msg in mine)
    assert 'route="/boom/{thing}",status="500"' in metrics.exposition().decode()


def test_request_id_acceptance_and_problem_labels() -> None:
    assert accepted_request_id(b"abc-1.2_3") == "abc-1.2_3"
    for bad in (None, b"", b"a b", b"\xff", b"x" * 65, b"a\nb"):
        assert re.fullmatch(r"[0-9a-f]{32}", accepted_request_id(bad))
    assert problem_label("wrong-phase") == "wrong-phase"
    assert problem_label("anything else") == "other"
    assert problem_label(None) == "none"


def test_fresh_request_ids_are_drawn_in_batches_and_never_repeat(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh request id costs no system call of its own: the OS generator is asked once
    per ``batch`` ids, and ids are distinct across batches and threads."""
    draws: list[int] = []
    token_bytes = secrets.token_bytes

    def counted(count: int) -> bytes:
        draws.append(count)
        return token_bytes(count)

    monkeypatch.setattr(observability.secrets, "token_bytes", counted)
    source = RandomIds(batch=64)
    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda _: source.next(), range(1000)))
    assert len(set(ids)) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in ids)
    assert draws == [16 * 64] * 16  # ceil(1000 / 64)
    with pytest.raises(ValueError):
        RandomIds(batch=0)


def test_json_formatter_writes_one_object_per_line() -> None:
    record = logging.LogRecord("segshuffle.x", logging.WARNING, __file__, 1, "a %s\nb",
                               ("quote\"",), None)
    RequestIdFilter().filter(record)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["msg"] == "a quote\"\nb" and parsed["level"] == "warning"
    assert "request_id" not in parsed
    stream = io.StringIO()
    handler = log_handler("text", stream)
    logger = logging.getLogger("segshuffle.test-text")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("outside")
        token = request_id.set("rid-9")
        logger.info("inside")
        request_id.reset(token)
    finally:
        logger.removeHandler(handler)
    outside, inside = stream.getvalue().splitlines()
    assert outside.endswith("segshuffle.test-text: outside")
    assert inside.endswith("segshuffle.test-text: inside request_id=rid-9")


def _serve_log(tmp_path: Path, service: str, environment: dict[str, str],
               *flags: str) -> list[dict[str, object]]:
    """Start ``segshuffle serve SERVICE`` on a free port, stop it with SIGTERM once it
    listens, and return its stderr's JSON records (start-up and shutdown included)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    env.update(environment)
    process = subprocess.Popen(
        [sys.executable, "-m", "segshuffle.cli.main", "serve", service, "--port", "0",
         "--log-level", "debug", *flags],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path)
    assert process.stderr is not None
    lines = []
    deadline = time.monotonic() + 60
    try:
        for line in process.stderr:
            lines.append(line)
            if "listening on port" in line or time.monotonic() > deadline:
                break
        time.sleep(0.3)
    finally:
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=30)
    lines.extend(rest.splitlines())
    assert any("listening on port" in line for line in lines), lines
    return [json.loads(line) for line in lines if line.strip()]


@pytest.mark.slow
def test_third_party_loggers_log_only_warnings_even_at_debug(tmp_path: Path) -> None:
    """The README's promise: uvicorn and httpx log only warnings, whatever the service's own
    level.  uvicorn's ``log_level`` used to raise its loggers back to the service's level
    (``Started server process``, ``Application startup complete``, ``Shutting down``...)."""
    from segshuffle.crypto.invitations import generate_issuer_key, public_key_text

    server = _serve_log(tmp_path, "server", {
        "SEGSHUFFLE_SERVER_ADMIN_TOKEN": ADMIN_TOKEN,
        "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": SHUFFLER_TOKEN,
        "SEGSHUFFLE_SERVER_KEY_DIR": str(tmp_path / "keys")},
        "--database", str(tmp_path / "server.sqlite3"))
    shuffler = _serve_log(tmp_path, "shuffler", {
        "SEGSHUFFLE_SHUFFLER_SERVER_TOKEN": SHUFFLER_TOKEN,
        "SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN": "operator-token-0123456789abcdef",
        "SEGSHUFFLE_SHUFFLER_INVITATION_KEYS": public_key_text(generate_issuer_key())},
        "--database", str(tmp_path / "shuffler.sqlite3"),
        "--server-url", "http://127.0.0.1:9")
    for records in (server, shuffler):
        assert any(r["logger"].startswith("segshuffle") for r in records)  # type: ignore[union-attr]
        foreign = [r for r in records if not str(r["logger"]).startswith("segshuffle")
                   and r["level"] not in ("warning", "error", "critical")]
        assert foreign == []
