"""``segshuffle admin campaign|status|release|results`` against real services (LocalStack),
and the one-line errors of bad input."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from segshuffle.cli.main import main
from segshuffle.client.errors import ServiceError
from segshuffle.client.sync import Client
from segshuffle.crypto.invitations import issuer_key_pem
from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.operator import OperatorClient

ITEMS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "honeydew"]
USERS = 12


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    status, out, err = _run(capsys, *argv)
    assert status == 0, err
    return out


def _float(cell: str) -> float | None:
    return None if cell == "" else float(cell)


@pytest.mark.slow
def test_full_campaign_through_admin_and_the_sdk(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with LocalStack(tmp_path / "stack", min_users=2) as stack:
        monkeypatch.setenv("SEGSHUFFLE_ADMIN_TOKEN", stack.admin_token)
        operator_file = tmp_path / "operator.token"
        operator_file.write_text(stack.operator_token + "\n")
        server = ("--server", stack.server_url)
        shuffler = ("--shuffler", stack.shuffler_url)
        items = tmp_path / "items.txt"
        items.write_text("\n".join(ITEMS) + "\n\n")

        created = json.loads(_ok(capsys, "admin", "campaign", "create", "--id", "fruit",
                                 "--items", str(items), "--set-size", "2", "--levels", "1,2",
                                 "--min-users", "10", "--dropout-tolerance", "0", "--json",
                                 *server))
        assert created["phase"] == "round1" and created["config"]["items"] == ITEMS
        listed = json.loads(_ok(capsys, "admin", "campaign", "list", "--json", *server))
        assert listed == [{"id": "fruit", "phase": "round1"}]
        assert "fruit: round1" in _ok(capsys, "admin", "campaign", "show", "fruit", *server)

        key_file = tmp_path / "issuer.pem"
        key_file.write_bytes(issuer_key_pem(stack.issuer_key))
        key_file.chmod(0o600)
        invitations_file = tmp_path / "invitations.txt"
        _ok(capsys, "admin", "invitations", "fruit", "--count", str(USERS), "--out",
            str(invitations_file), "--issuer-key", str(key_file))
        invitations = invitations_file.read_text().split()
        rng = np.random.default_rng(7)
        clients = [Client(stack.shuffler_url, "fruit", rng=np.random.default_rng(i),
                          server_key=stack.server_key)
                   for i in range(USERS)]
        try:
            for client, invitation in zip(clients, invitations, strict=True):
                client.enroll(invitation)
                client.submit_level(int(rng.integers(2)))
            status = json.loads(_ok(capsys, "admin", "status", "fruit", "--json", *shuffler))
            assert status["phase"] == "round1"
            assert status["rounds"][0]["participants"] == USERS
            assert status["rounds"][0]["state"] == "open"
            text = _ok(capsys, "admin", "status", "fruit", *shuffler)
            assert f"{USERS}/{status['rounds'][0]['required']} participants" in text

            released = json.loads(_ok(capsys, "admin", "release", "fruit", "--round", "1",
                                      "--wait", "--token-file", str(operator_file),
                                      "--json", *shuffler))
            assert released["acknowledged"] is True and released["round"] == 1
            for client in clients:
                client.wait_for_phase("round2")
                client.submit_data(rng.choice(len(ITEMS), size=2, replace=False).tolist())
            _ok(capsys, "admin", "release", "fruit", "--round", "2", "--wait",
                "--token-file", str(operator_file), *shuffler)
        finally:
            for client in clients:
                client.close()

        watched = _ok(capsys, "admin", "status", "fruit", "--watch", "--interval", "0.1",
                      "--json", *shuffler).splitlines()
        final = json.loads(watched[-1])
        assert final["phase"] == "done"
        assert [r["state"] for r in final["rounds"]] == ["released", "released"]

        document = json.loads(_ok(capsys, "admin", "results", "fruit", "--format", "json",
                                  *server))
        assert document == stack.results("fruit").model_dump(mode="json")
        out = tmp_path / "results.csv"
        _ok(capsys, "admin", "results", "fruit", "--format", "csv", "--out", str(out),
            *server)
        with out.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert [(int(r["id"]), r["name"], _float(r["estimate"]), _float(r["standard_error"]),
                 _float(r["projected"])) for r in rows] == [
            (i["id"], i["name"], i["estimate"], i["standard_error"], i["projected"])
            for i in document["items"]]
        companion = json.loads((tmp_path / "results.privacy.json").read_text())
        assert companion | {"items": document["items"]} == document
        table = _ok(capsys, "admin", "results", "fruit", *server)
        assert all(name in table for name in ITEMS) and "epsilon <=" in table

        png = tmp_path / "results.png"
        _ok(capsys, "admin", "results", "fruit", "--format", "png", "--out", str(png),
            *server)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000

        # errors from the live services: one line naming the problem type, exit 2
        status_code, _, err = _run(capsys, "admin", "campaign", "show", "nope", *server)
        assert status_code == 2 and "unknown-campaign" in err and err.count("\n") == 1
        monkeypatch.setenv("SEGSHUFFLE_ADMIN_TOKEN", "wrong-token-xxxxxxxxxxxx")
        status_code, _, err = _run(capsys, "admin", "campaign", "list", *server)
        assert status_code == 2 and "401 unauthorized" in err and err.count("\n") == 1
        monkeypatch.setenv("SEGSHUFFLE_OPERATOR_TOKEN", "wrong-operator-token-xxxxxx")
        status_code, _, err = _run(capsys, "admin", "release", "fruit", "--round", "1",
                                   *shuffler)
        assert status_code == 2 and err.count("\n") == 1, err
        assert err.startswith("segshuffle: error: release round 1: HTTP 403 forbidden")
        monkeypatch.setenv("SEGSHUFFLE_ADMIN_TOKEN", stack.admin_token)
        aborted = _ok(capsys, "admin", "campaign", "create", "--id", "gone",
                      "--domain-size", "4", "--set-size", "1", "--levels", "1", *server)
        assert "created campaign gone" in aborted
        assert "aborted (stop)" in _ok(capsys, "admin", "campaign", "abort", "gone",
                                       "--reason", "stop", *server)
        listed = json.loads(_ok(capsys, "admin", "campaign", "list", "--json", *server))
        assert listed == [{"id": "fruit", "phase": "done"}, {"id": "gone", "phase": "aborted"}]
        gone = _ok(capsys, "admin", "status", "gone", "--watch", *shuffler)
        assert gone.startswith("campaign gone: aborted (stop)\n  round 1 [")
        assert "0/100 participants, failed: the campaign aborted: stop" in gone
        assert "round 2" not in gone


@pytest.mark.parametrize("argv, env, expected", [
    (["campaign", "list"], {}, "needs a token: set SEGSHUFFLE_ADMIN_TOKEN"),
    (["release", "c", "--round", "1"], {}, "needs a token: set SEGSHUFFLE_OPERATOR_TOKEN"),
    (["campaign", "list", "--server", "http://127.0.0.1:9"], {"SEGSHUFFLE_ADMIN_TOKEN": "t"},
     "list campaigns: cannot reach http://127.0.0.1:9 (ConnectError)"),
    (["status", "c", "--shuffler", "http://127.0.0.1:9"], {},
     "cannot reach http://127.0.0.1:9"),
    (["campaign", "list", "--server", "ftp://x"], {"SEGSHUFFLE_ADMIN_TOKEN": "t"},
     "--server must be an http(s) URL"),
    (["campaign", "create", "--id", "c", "--domain-size", "4", "--set-size", "1",
      "--levels", "1,x"], {}, "--levels: expected comma-separated numbers"),
    (["campaign", "create", "--id", "c", "--domain-size", "4", "--set-size", "1",
      "--levels", "-1"], {"SEGSHUFFLE_ADMIN_TOKEN": "t"}, "invalid campaign: --levels"),
    (["campaign", "create", "--id", "c", "--items", "/nonexistent/items", "--set-size", "1",
      "--levels", "1"], {"SEGSHUFFLE_ADMIN_TOKEN": "t"}, "cannot read --items"),
    (["campaign", "show", "bad id"], {"SEGSHUFFLE_ADMIN_TOKEN": "t"}, "campaign id must be"),
    (["results", "c", "--format", "pdf"], {}, "invalid choice: 'pdf'"),
    (["results", "c", "--format", "csv"], {"SEGSHUFFLE_ADMIN_TOKEN": "t"},
     "--format csv needs --out FILE"),
    (["release", "c", "--round", "3"], {"SEGSHUFFLE_OPERATOR_TOKEN": "t"}, "--round"),
    (["campaign", "list", "--token-file", "/nonexistent/token"], {}, "cannot read --token-file"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], env: dict[str, str],
                                          expected: str, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEGSHUFFLE_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("SEGSHUFFLE_OPERATOR_TOKEN", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        status = main(["admin", *argv])
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    out, err = capsys.readouterr()
    assert status == 2
    assert expected in err and err.count("\n") == 1 and out == "", err


def test_png_without_matplotlib_names_the_extra(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("SEGSHUFFLE_ADMIN_TOKEN", "t")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    status, out, err = _run(capsys, "admin", "results", "c", "--format", "png", "--out",
                            str(tmp_path / "r.png"), "--server", "http://127.0.0.1:9")
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "'experiments' extra" in err and not (tmp_path / "r.png").exists()


def _release_client(statuses: list[dict[str, object]]) -> OperatorClient:
    """An operator client whose shuffler answers a release with 202 and then ``statuses``."""
    answers = iter(statuses)

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            assert request.headers["Authorization"] == "Bearer op"
            assert request.url.params["wait"] == "true"
            return httpx.Response(202, json={"campaign_id": "c", "round": 1, "batch_id": "b",
                                             "messages": 3, "chunks": 1})
        return httpx.Response(200, json={"round": 1, "participants": 3, "required": 2,
                                         **next(answers)})

    return OperatorClient(shuffler="http://shuffler", operator_token="op",
                          transport=httpx.MockTransport(handle))


def test_release_wait_polls_until_released() -> None:
    with _release_client([{"state": "releasing"}, {"state": "released"}]) as client:
        answer, acknowledged = client.release("c", 1, wait=True, timeout=10,
                                              sleep=lambda _: None)
    assert acknowledged and answer["messages"] == 3


def test_release_wait_names_why_a_round_failed() -> None:
    with _release_client([{"state": "releasing"},
                          {"state": "failed", "reason": "too few valid messages"}]) as client, \
            pytest.raises(ServiceError, match="round 1 ended without results: too few valid "
                                              "messages") as failed:
        client.release("c", 1, wait=True, timeout=10, sleep=lambda _: None)
    assert failed.value.problem == "wrong-phase"


def test_release_wait_is_bounded_and_names_the_delivery_error() -> None:
    waiting = [{"state": "releasing", "last_error": "server: ConnectError"}] * 3
    with _release_client(waiting) as client, \
            pytest.raises(ServiceError, match="not delivered after 0s: server: ConnectError"):
        client.release("c", 1, wait=True, timeout=0, sleep=lambda _: None)


def _flaky_release_client(failures: list[int | None], refusal: int | None = None
                          ) -> tuple[OperatorClient, list[str]]:
    """A shuffler whose release answers ``failures`` first (a status, or ``None``: the
    connection drops), then ``refusal`` (a final answer) or 200."""
    seen: list[str] = []
    queue = list(failures)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        if queue:
            status = queue.pop(0)
            if status is None:
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(status, text="<html>502 Bad Gateway</html>")
        if refusal is not None:
            return httpx.Response(refusal, json={"type": "urn:segshuffle:error:forbidden",
                                                 "status": refusal, "detail": "no"})
        return httpx.Response(200, json={"campaign_id": "c", "round": 1, "batch_id": "b",
                                         "messages": 3, "chunks": 1})

    client = OperatorClient(shuffler="http://shuffler", operator_token="op",
                            transport=httpx.MockTransport(handle))
    return client, seen


def test_release_survives_a_replica_dying_under_it() -> None:
    """A release is idempotent: the balancer's 502 for a replica killed under the request,
    a 503 and a dropped connection are retried with a growing pause; then it succeeds."""
    client, seen = _flaky_release_client([502, None, 503])
    pauses: list[float] = []
    with client:
        answer, acknowledged = client.release("c", 1, wait=True, timeout=60,
                                              sleep=pauses.append)
    assert acknowledged and answer["messages"] == 3
    assert seen == ["POST"] * 4
    assert len(pauses) == 3 and 0.25 <= pauses[0] <= 0.5 and pauses[2] <= 2.0


def test_release_gives_up_on_a_refusal_at_once_and_on_failures_at_its_timeout() -> None:
    client, seen = _flaky_release_client([502], refusal=403)
    with client, pytest.raises(ServiceError, match="HTTP 403 forbidden"):
        client.release("c", 1, wait=False, timeout=60, sleep=lambda _: None)
    assert seen == ["POST", "POST"]
    client, seen = _flaky_release_client([502] * 50)
    with client, pytest.raises(ServiceError, match="HTTP 502"):
        client.release("c", 1, wait=False, timeout=1.0, sleep=lambda _: None)
    assert 1 <= len(seen) <= 3  # no try starts past the timeout
