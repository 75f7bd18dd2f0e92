"""Each service names itself: a client pointed at the wrong one says so instead
of "HTTP 404 not-found: no such resource"."""

from __future__ import annotations

from pathlib import Path

import pytest

from segshuffle.client.errors import ServiceError
from segshuffle.testing.operator import OperatorClient

from .observability_support import CID, running_services
from .test_server_support import ADMIN_TOKEN


def test_every_answer_names_its_service_and_a_404_says_which(tmp_path: Path) -> None:
    with running_services(tmp_path) as services:
        for client, name in ((services.server, "server"), (services.shuffler, "shuffler")):
            for path in ("/livez", "/v1/no/such/path"):
                answer = client.get(path)
                assert answer.headers["segshuffle-service"] == name
            missing = client.get("/v1/no/such/path").json()
            assert missing["service"] == name and missing["detail"] == \
                f"no such resource on the {name}"


def test_the_admin_client_says_it_was_given_the_other_service(tmp_path: Path) -> None:
    with running_services(tmp_path) as services:
        # --server pointed at the shuffler
        wrong = OperatorClient(server="http://testserver", admin_token=ADMIN_TOKEN,
                               http=services.shuffler)
        with pytest.raises(ServiceError, match=r"http://testserver is the shuffler, not the "
                                               r"server \(give --server the server's URL\)"):
            wrong.campaign(CID)
        # --shuffler pointed at the server
        other = OperatorClient(shuffler="http://testserver", http=services.server)
        with pytest.raises(ServiceError, match="is the server, not the shuffler"):
            other.round_status(CID, 1)
        right = OperatorClient(server="http://testserver", admin_token=ADMIN_TOKEN,
                               http=services.server)
        assert right.campaign(CID).id == CID


def test_an_https_url_at_a_plain_http_port_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """``--shuffler https://...`` at a plain HTTP listener: one line naming the likely cause
    ("does not speak TLS (is it an http:// URL?)"), exit 2, not a bare ConnectError."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from segshuffle.cli.main import main

    class Plain(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Plain)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        status = main(["admin", "status", "c", "--shuffler", f"https://127.0.0.1:{port}"])
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"https://127.0.0.1:{port} does not speak TLS (is it an http:// URL?)" in err
