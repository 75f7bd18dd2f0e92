"""Opt-in: the compose profile ``scale``, a campaign through the load balancer while one
shuffler replica and one server replica are killed.

Enabled by ``SEGSHUFFLE_DOCKER_TESTS=1`` like tests/test_deploy_docker.py, whose image build
and :class:`Deployment` (a compose project of its own, free loopback ports, per-source rate
limits off) it reuses.  It builds the images with ``--postgres``, brings up PostgreSQL, two
replicas of each service and the balancer (``--profile scale up -d lb``), checks that the
two parties' database roles cannot reach each other's database, then runs the load test
(``loadtest/loadtest.py``, as tests/test_deploy_docker.py does) against the balancer's ports
and, mid-campaign, ``docker kill``s the shuffler replica that has taken the most of the
load test's enrollments (the balancer spreads the users over both) during round 1 and
server replica ``server-1`` as round 1 is released.  The campaign must end with every
user counted in both rounds.  Then ``down -v``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_deploy_docker import REPO, Deployment, _free_port, _wait_ready

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("SEGSHUFFLE_DOCKER_TESTS") != "1",
                       reason="set SEGSHUFFLE_DOCKER_TESTS=1 to build and run the containers"),
]

USERS = 600
SERVICES = ("postgres", "server-1", "server-2", "shuffler-1", "shuffler-2", "lb")
PROGRESS = re.compile(r"^round 1: (\d+)/(\d+) users$")
ENROLLMENTS = re.compile(
    r'^segshuffle_http_requests_total\{method="POST",'
    r'route="/v1/campaigns/\{campaign_id\}/enrollments",status="201"\} ([0-9.]+)$', re.MULTILINE)


def _env_values(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines()
                if line and not line.startswith("#"))


class ScaleDeployment(Deployment):
    """The profile ``scale`` of one compose project; its URLs are the balancer's ports."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        server_port, shuffler_port = _free_port(), _free_port()
        # the balancer counts the per-source limits; the load test's users share one source
        self.env.update({"SEGSHUFFLE_SCALE_SERVER_PORT": str(server_port),
                         "SEGSHUFFLE_SCALE_SHUFFLER_PORT": str(shuffler_port),
                         "SEGSHUFFLE_SCALE_SOURCE_LIMITS": "off"})
        self.server_url = f"http://127.0.0.1:{server_port}"
        self.shuffler_url = f"http://127.0.0.1:{shuffler_port}"
        self.timings: dict[str, float] = {}

    def scale(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.compose("--profile", "scale", *args, check=check)

    def container(self, service: str) -> str:
        """The container id of ``service`` (one container per service in this profile)."""
        ids = self.scale("ps", "-q", service).stdout.split()
        assert len(ids) == 1, f"{service}: {ids}"
        return ids[0]

    def run_in(self, service: str, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "exec", self.container(service), *command],
                              text=True, capture_output=True, timeout=60)

    def enrollments(self, service: str) -> float:
        """Enrollments ``service`` (a shuffler replica) has accepted, from its /metrics."""
        result = self.run_in(service, "python", "-c",
                             "import urllib.request; print(urllib.request.urlopen("
                             "'http://127.0.0.1:8081/metrics', timeout=5).read().decode())")
        if result.returncode != 0:
            return 0.0
        return sum(float(count) for count in ENROLLMENTS.findall(result.stdout))


def _timed(timings: dict[str, float], name: str, started: float) -> None:
    timings[name] = round(time.monotonic() - started, 1)


@pytest.fixture(scope="module")
def scale_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaleDeployment]:
    started = time.monotonic()
    build = subprocess.run([str(REPO / "deploy" / "build-images.sh"), "--postgres"],
                           text=True, capture_output=True)
    assert build.returncode == 0, build.stderr[-3000:]
    build_seconds = time.monotonic() - started
    deployment = ScaleDeployment(tmp_path_factory.mktemp("deploy-scale"))
    deployment.timings["build_images_s"] = round(build_seconds, 1)
    try:
        started = time.monotonic()
        deployment.scale("up", "-d", "lb")
        _wait_ready([deployment.server_url, deployment.shuffler_url], timeout=240)
        _timed(deployment.timings, "up_until_ready_s", started)
        yield deployment
    finally:
        logs = deployment.scale("logs", "--no-color", "--tail", "40", check=False).stdout
        sys.stderr.write(logs[-6000:])
        started = time.monotonic()
        deployment.scale("down", "-v", "--remove-orphans", check=False)
        _timed(deployment.timings, "down_s", started)
        sys.stderr.write(f"\nscale deployment timings: {json.dumps(deployment.timings)}\n")


def test_scale_profile_keeps_the_parties_databases_apart(
        scale_deployment: ScaleDeployment) -> None:
    deployment = scale_deployment
    # every service of the profile runs and reports healthy, the default pair does not run
    deadline = time.monotonic() + 120
    while True:
        listing = deployment.scale("ps").stdout
        rows = [line for line in listing.splitlines() if deployment.project in line]
        if len(rows) == len(SERVICES) and all("(healthy)" in row for row in rows):
            break
        assert time.monotonic() < deadline, listing
        time.sleep(2)
    assert not [row for row in rows if re.search(r"_(server|shuffler)_\d", row)], listing

    roles = deployment.run_in("postgres", "psql", "-At", "-c",
                              "SELECT rolname, rolsuper, rolcreatedb, rolcreaterole "
                              "FROM pg_roles WHERE rolname IN ('shuffler', 'server') "
                              "ORDER BY rolname")
    assert roles.returncode == 0, roles.stderr
    assert roles.stdout.split() == ["server|f|f|f", "shuffler|f|f|f"]

    probe = ("import psycopg, sys\n"
             "try:\n"
             "    psycopg.connect(sys.argv[1], connect_timeout=5).close()\n"
             "    print('connected')\n"
             "except psycopg.OperationalError as exc:\n"
             "    print('refused', str(exc).strip().splitlines()[-1])\n")
    for service, own, other in (("server-1", "server", "shuffler"),
                                ("shuffler-1", "shuffler", "server")):
        # the replica's password file is private to its user, on the tmpfs
        mode = deployment.run_in(service, "stat", "-c", "%a %U", "/tmp/pgpass")
        assert mode.stdout.split() == ["600", "segshuffle"], mode
        mine = deployment.run_in(service, "python", "-c", probe,
                                 f"postgresql://{own}@postgres/{own}")
        assert mine.stdout.strip() == "connected", mine
        for url in (f"postgresql://{own}@postgres/{other}",
                    f"postgresql://{other}@postgres/{other}",
                    f"postgresql://{own}@postgres/postgres"):
            theirs = deployment.run_in(service, "python", "-c", probe, url)
            assert theirs.stdout.startswith("refused"), (url, theirs)
    # no secret shows in any container's configuration
    secrets_dir = Path(_env_values(deployment.env_file)["SEGSHUFFLE_SECRETS_DIR"])
    values = [path.read_text().strip().rsplit(":", 1)[-1] for path in secrets_dir.iterdir()]
    for service in SERVICES:
        config = subprocess.run(["docker", "inspect", "--format", "{{json .Config}}",
                                 deployment.container(service)],
                                text=True, capture_output=True, check=True).stdout
        assert not [value for value in values if value and value in config], service


def test_campaign_completes_through_the_balancer_while_replicas_are_killed(
        scale_deployment: ScaleDeployment, tmp_path: Path) -> None:
    deployment = scale_deployment
    report = tmp_path / "report.json"
    lines: list[str] = []
    started = time.monotonic()
    with report.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, str(REPO / "loadtest" / "loadtest.py"), "--users", str(USERS),
             "--repeats", "1", "--json", "--seed", "11", "--max-seconds", "900", "--progress",
             "--server-url", deployment.server_url, "--shuffler-url", deployment.shuffler_url,
             "--env-file", str(deployment.env_file)],
            stdout=out, stderr=subprocess.PIPE, text=True)
        assert process.stderr is not None
        stderr = process.stderr
        reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")),
                                  daemon=True)
        reader.start()
        killed: dict[str, float] = {}
        try:
            deadline = time.monotonic() + 1000
            while process.poll() is None:
                assert time.monotonic() < deadline, "the load test did not finish"
                text = "".join(lines)
                progress = [PROGRESS.match(line.strip()) for line in lines]
                done = max((int(m[1]) for m in progress if m), default=0)
                if "shuffler" not in killed and done >= USERS // 3:
                    # the replica that has taken the most users so far
                    counts = {name: deployment.enrollments(name)
                              for name in ("shuffler-1", "shuffler-2")}
                    victim = max(counts, key=lambda name: counts[name])
                    assert counts[victim] > 0, counts
                    subprocess.run(["docker", "kill", deployment.container(victim)],
                                   check=True, capture_output=True)
                    killed["shuffler"] = time.monotonic() - started
                    killed[victim] = counts[victim]
                if "server" not in killed and "releasing" in text:
                    subprocess.run(["docker", "kill", deployment.container("server-1")],
                                   check=True, capture_output=True)
                    killed["server"] = time.monotonic() - started
                time.sleep(0.2)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)
            reader.join(timeout=10)
    deployment.timings["campaign_s"] = round(time.monotonic() - started, 1)
    sys.stderr.write("".join(lines)[-3000:] + f"\nkilled: {killed}\n")
    assert process.returncode == 0, "".join(lines)[-3000:]
    assert "shuffler" in killed and "server" in killed, killed

    document = json.loads(report.read_text())
    (run,) = document["runs"]
    (campaign,) = document["campaigns"]
    deployment.timings.update({key: round(run[key], 2) for key in (
        "round1_submissions_per_s", "round1_p50_ms", "round1_p95_ms", "release1_seconds",
        "round2_submissions_per_s", "round2_p50_ms", "round2_p95_ms", "release2_seconds",
        "total_seconds")})
    deployment.timings["kill_shuffler_at_s"] = round(killed["shuffler"], 1)
    deployment.timings["kill_server_at_s"] = round(killed["server"], 1)
    admin = _env_values(deployment.env_file)["SEGSHUFFLE_ADMIN_TOKEN"]
    request = urllib.request.Request(f"{deployment.server_url}/v1/campaigns/{campaign}/results",
                                     headers={"Authorization": f"Bearer {admin}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        results = json.loads(response.read())
    assert results["phase"] == "done"
    # every user counted in both rounds, nothing dropped, although two replicas died
    assert results["privacy"]["users"] == USERS
    assert results["privacy"]["round2_users"] == USERS
    assert results["dropped_messages"] == 0
    assert run["mse"] < 0.05

    # the killed replicas stay down (docker kill is a manual stop); the others serve on
    states = {service: subprocess.run(
        ["docker", "inspect", "--format", "{{.State.Status}}", deployment.container(service)],
        text=True, capture_output=True, check=True).stdout.strip() for service in SERVICES}
    assert states["server-1"] == "exited"
    assert sorted(states.values()).count("exited") == 2, states
    _wait_ready([deployment.server_url, deployment.shuffler_url], timeout=30)
