"""Static checks of the compose profile ``scale`` (deploy/compose.yaml, deploy/postgres/,
deploy/scale/): PostgreSQL from the image ``segshuffle-postgres:bookworm``, two replicas of
each service on one database each, the nginx load balancer in front.

Fast: PyYAML, the files themselves, ``bash -n``, ``deploy/init-secrets.sh`` into a scratch
directory, and ``docker-compose config`` when it is installed.  Running the profile is
tests/test_deploy_scale_docker.py (opt-in, ``SEGSHUFFLE_DOCKER_TESTS=1``).
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from .compose_support import compose_command

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
POSTGRES = DEPLOY / "postgres"
SCALE = DEPLOY / "scale"

SERVERS = ("server-1", "server-2")
SHUFFLERS = ("shuffler-1", "shuffler-2")
REPLICAS = SERVERS + SHUFFLERS
SCALE_SERVICES = {"postgres", "lb", *REPLICAS}
# What each service of the profile may hold, and nothing more.
SECRETS = {
    "postgres": {"postgres_shuffler_password", "postgres_server_password"},
    **{name: {"admin_token", "shuffler_token", "server_pgpass"} for name in SERVERS},
    **{name: {"shuffler_token", "operator_token", "shuffler_pgpass"} for name in SHUFFLERS},
    "lb": set(),
}
ROLE = {**{name: "server" for name in SERVERS}, **{name: "shuffler" for name in SHUFFLERS}}
PORT = {"server": "8080", "shuffler": "8081"}
SETTINGS = {"server": "segshuffle.services.server.settings",
            "shuffler": "segshuffle.services.shuffler.settings"}
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _networks(service: dict[str, Any]) -> set[str]:
    networks = service.get("networks", ["default"])
    return set(networks if isinstance(networks, list) else networks.keys())


def _secret_files(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    env_file = tmp_path / "deploy.env"
    subprocess.run([str(DEPLOY / "init-secrets.sh")], check=True, capture_output=True,
                   env={**os.environ, "SEGSHUFFLE_ENV_FILE": str(env_file)})
    directory = tmp_path / "secrets"
    return env_file, {path.name: path.read_text() for path in directory.iterdir()}


# --- services of the profile ----------------------------------------------------------------


def test_scale_profile_has_postgres_two_replicas_of_each_service_and_the_balancer(
        services: dict[str, Any]) -> None:
    in_profile = {name for name, spec in services.items() if "scale" in spec.get("profiles", [])}
    assert in_profile == SCALE_SERVICES
    for name in SCALE_SERVICES:
        assert services[name]["profiles"] == ["scale"], name
    # the default pair and the other profiles are as before: no profile for server/shuffler
    assert "profiles" not in services["server"] and "profiles" not in services["shuffler"]
    assert services["proxy"]["profiles"] == ["tls"]
    for name in REPLICAS:
        role = ROLE[name]
        assert services[name]["command"] == ["serve", role]
        assert services[name]["image"].endswith("segshuffle:latest}")
    assert services["postgres"]["image"].endswith("segshuffle-postgres:bookworm}")
    assert services["lb"]["image"].endswith("segshuffle-proxy:bookworm}")
    assert all(services[name]["pull_policy"] == "never" for name in SCALE_SERVICES)


def test_scale_services_stay_off_the_default_network_and_only_the_balancer_publishes(
        compose: dict[str, Any], services: dict[str, Any]) -> None:
    assert compose["networks"]["scale"]["internal"] is True
    for name in SCALE_SERVICES - {"lb"}:
        assert _networks(services[name]) == {"scale"}, name
        assert "ports" not in services[name], f"{name} must not publish a port"
    assert _networks(services["lb"]) == {"scale", "scale-edge"}
    ports = services["lb"]["ports"]
    assert len(ports) == 2
    for mapping in ports:
        parts = re.fullmatch(r"127\.0\.0\.1:\$\{(SEGSHUFFLE_SCALE_\w+_PORT):-(\d+)\}:(\d+)",
                             mapping)
        assert parts, f"the balancer must publish on loopback only: {mapping!r}"
    assert sorted(p.rsplit(":", 1)[1] for p in ports) == ["8080", "8081"]
    # no default service joins the scale network
    for name in ("server", "shuffler", "proxy", "loadtest"):
        assert "scale" not in _networks(services[name])


@pytest.mark.parametrize("name", sorted(SCALE_SERVICES))
def test_scale_services_run_hardened(services: dict[str, Any], name: str) -> None:
    service = services[name]
    assert service["read_only"] is True
    assert service["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in service["security_opt"]
    assert any(entry.startswith("/tmp:") for entry in service["tmpfs"])
    assert service["logging"]["options"]["max-size"]
    assert service["restart"] == "unless-stopped"
    assert set(service.get("cap_add", [])) <= ({"CHOWN", "SETGID", "SETUID"} if name == "lb"
                                               else set())
    assert "privileged" not in service and "network_mode" not in service


@pytest.mark.parametrize("name", sorted(SCALE_SERVICES))
def test_each_scale_service_holds_only_its_secrets(compose: dict[str, Any],
                                                   services: dict[str, Any], name: str) -> None:
    assert set(services[name].get("secrets", [])) == SECRETS[name]
    assert SECRETS[name] <= set(compose["secrets"])


@pytest.mark.parametrize("name", sorted(SCALE_SERVICES))
def test_no_token_or_password_in_any_environment(services: dict[str, Any], name: str) -> None:
    env = _environment(services[name])
    for key, value in env.items():
        assert not key.endswith(("_TOKEN", "PASSWORD", "_PRIVATE_KEY")), \
            f"{name}: {key} carries a secret in the environment"
        if "://" in value:  # a database or upstream URL names no password
            assert urlsplit(value).password is None, (name, key)
    files = [value for key, value in env.items() if key.endswith("_FILE")]
    assert all(value.startswith("/run/secrets/") for value in files)
    assert {value.removeprefix("/run/secrets/") for value in files} <= SECRETS[name]


@pytest.mark.parametrize("name", REPLICAS)
def test_replicas_reach_their_own_database_with_a_private_password_file(
        services: dict[str, Any], name: str) -> None:
    role = ROLE[name]
    service = services[name]
    env = _environment(service)
    prefix = f"SEGSHUFFLE_{role.upper()}_"
    assert env[prefix + "DATABASE"] == f"postgresql://{role}@postgres:5432/{role}"
    assert env["PGPASSFILE"] == "/tmp/pgpass"
    # the entry point copies the secret to a 0600 file on the tmpfs, then execs segshuffle
    tini, separator, shell, flag, script, argv0 = service["entrypoint"]
    assert (tini, separator, shell, flag, argv0) == ("/usr/bin/tini", "--", "/bin/sh", "-c",
                                                     "segshuffle")
    assert script.startswith("umask 077 && ")
    assert f"cat /run/secrets/{role}_pgpass > /tmp/pgpass" in script
    assert script.endswith('exec segshuffle "$$@"')
    assert env[prefix + "HOST"] == "0.0.0.0" and env[prefix + "PORT"] == PORT[role]
    check = " ".join(service["healthcheck"]["test"])
    assert f"http://127.0.0.1:{PORT[role]}/readyz" in check
    assert service["depends_on"]["postgres"]["condition"] == "service_healthy"


@pytest.mark.parametrize("role", ["server", "shuffler"])
def test_replica_environment_names_settings_the_service_reads(
        services: dict[str, Any], role: str) -> None:
    fields = set(importlib.import_module(SETTINGS[role]).Settings.model_fields)
    prefix = f"SEGSHUFFLE_{role.upper()}_"
    for name in (n for n in REPLICAS if ROLE[n] == role):
        for key in _environment(services[name]):
            if key == "PGPASSFILE":
                continue
            assert key.startswith(prefix), f"{name} gets {key}, which it does not read"
            field = key.removeprefix(prefix).lower()
            if field.endswith("_token_file"):
                field = field.removesuffix("_file")
            assert field in fields, f"{key}: {SETTINGS[role]}.Settings has no field {field!r}"


def test_replicas_of_a_service_share_one_key_volume_and_the_services_none(
        compose: dict[str, Any], services: dict[str, Any]) -> None:
    def named_volumes(name: str) -> dict[str, str]:
        pairs = (entry.split(":")[:2] for entry in services[name]["volumes"])
        return {source: target for source, target in pairs if not source.startswith(".")}

    server_volumes = [named_volumes(name) for name in SERVERS]
    shuffler_volumes = [named_volumes(name) for name in SHUFFLERS]
    assert all(v == server_volumes[0] for v in server_volumes)
    assert all(v == shuffler_volumes[0] for v in shuffler_volumes)
    assert not set(server_volumes[0]) & set(shuffler_volumes[0])
    assert set(server_volumes[0]) | set(shuffler_volumes[0]) <= set(compose["volumes"])
    server_env = _environment(services["server-1"])
    assert server_volumes[0] == {"scale-server-keys": server_env["SEGSHUFFLE_SERVER_KEY_DIR"]}
    shuffler_env = _environment(services["shuffler-1"])
    (mount,) = shuffler_volumes[0].values()
    assert shuffler_env["SEGSHUFFLE_SHUFFLER_KEY_DIRECTORY"].startswith(mount + "/")
    # and none of the default deployment's volumes
    assert not {"server-data", "server-keys", "shuffler-data"} & (
        set(server_volumes[0]) | set(shuffler_volumes[0]))


def test_shufflers_reach_the_server_through_the_balancer_and_trust_only_private_peers(
        services: dict[str, Any]) -> None:
    from segshuffle.services.rate_limit import parse_networks

    for name in SHUFFLERS:
        env = _environment(services[name])
        assert env["SEGSHUFFLE_SHUFFLER_SERVER_URL"] == "http://lb:8080"
        trusted = INTERPOLATION.fullmatch(env["SEGSHUFFLE_SHUFFLER_TRUSTED_PROXIES"])
        assert trusted and trusted[1] == "SEGSHUFFLE_SCALE_TRUSTED_PROXIES"
        networks = parse_networks(trusted[3])
        assert networks and all(network.is_private for network in networks)
        # Docker's default address pools, where the scale network's subnet comes from
        assert {str(n) for n in networks} == {"172.16.0.0/12", "192.168.0.0/16"}


def test_balancer_mounts_deploy_scale_and_balances_over_the_replica_services(
        services: dict[str, Any]) -> None:
    lb = services["lb"]
    # the source of the per-source limits is chosen by a variable: its default counts here
    volumes = [INTERPOLATION.sub(lambda m: m[3] or "", entry) for entry in lb["volumes"]]
    mounts = dict(entry.rsplit(":", 1)[0].split(":", 1) for entry in volumes)
    assert all(entry.endswith(":ro") for entry in volumes)
    assert mounts["./scale/nginx.conf"] == "/etc/nginx/nginx.conf"
    nginx = (SCALE / "nginx.conf").read_text()
    included = re.search(r"^\s*include\s+(\S+)/\*\.conf;", nginx, re.MULTILINE)
    assert included, "nginx.conf includes the site files"
    sites = {source: target for source, target in mounts.items() if source != "./scale/nginx.conf"}
    assert sites and all(target.startswith(included[1] + "/") for target in sites.values())
    upstreams: dict[str, set[str]] = {}
    listens: set[str] = set()
    for source in sites:
        path = DEPLOY / source
        assert path.is_file(), f"{source} is missing"
        text = path.read_text()
        listens |= set(re.findall(r"^\s*listen\s+(\d+)\s*;", text, re.MULTILINE))
        for host, port in re.findall(r"^\s*server\s+([\w.-]+):(\d+)\b", text, re.MULTILINE):
            upstreams.setdefault(port, set()).add(host)
    assert upstreams == {"8080": set(SERVERS), "8081": set(SHUFFLERS)}
    assert mounts["./scale/source-limits-on.conf"] == f"{included[1]}/source-limits.conf"
    assert listens == {"8080", "8081"}
    for name in SERVERS + SHUFFLERS:
        condition = lb["depends_on"][name]["condition"]
        # nginx resolves the names at start; the shufflers are ready only once it runs
        assert condition == ("service_healthy" if name in SERVERS else "service_started")
    assert "/dev/tcp/127.0.0.1/8080" in " ".join(lb["healthcheck"]["test"])


def test_the_balancer_counts_the_per_source_limits_and_the_replicas_do_not(
        services: dict[str, Any]) -> None:
    """A replica's own count would see only its share of a source's requests (N replicas:
    N budgets), so the limits are the balancer's, switched by one variable."""
    for name in SHUFFLERS:
        env = _environment(services[name])
        for limit in ("ENROLL", "SUBMIT", "READ"):
            assert env[f"SEGSHUFFLE_SHUFFLER_{limit}_RATE"] == "0", (name, limit)
    (entry,) = [v for v in services["lb"]["volumes"] if "source-limits" in v]
    assert entry.startswith("./scale/source-limits-${SEGSHUFFLE_SCALE_SOURCE_LIMITS:-on}.conf:")
    site = (SCALE / "shuffler.conf").read_text()
    for switch in ("on", "off"):
        text = (SCALE / f"source-limits-{switch}.conf").read_text()
        key = re.search(r"map \$binary_remote_addr \$segshuffle_source \{\s*default (\S+);",
                        text)
        assert key and key[1] == {"on": "$binary_remote_addr", "off": '""'}[switch]
    for zone in ("enrollments", "submissions", "reads"):
        assert f"zone=segshuffle_{zone}:" in site and f"limit_req zone=segshuffle_{zone} " in site
    upstream = re.search(r"upstream segshuffle_shufflers \{(.*?)\}", site, re.DOTALL)
    assert upstream and "least_conn;" in upstream[1] and "hash " not in upstream[1]


# --- the database ---------------------------------------------------------------------------


def test_postgres_service_runs_the_mounted_entrypoint_as_postgres_with_its_data_on_a_volume(
        compose: dict[str, Any], services: dict[str, Any]) -> None:
    postgres = services["postgres"]
    assert postgres["user"] == "postgres"
    assert postgres["entrypoint"] == ["/usr/bin/tini", "--", "/bin/bash",
                                      "/etc/segshuffle/postgres/entrypoint.sh"]
    assert postgres["stop_signal"] == "SIGINT"  # fast shutdown despite pooled connections
    mounts = {entry.split(":")[0]: entry.split(":")[1] for entry in postgres["volumes"]}
    assert mounts["scale-postgres-data"] == "/var/lib/postgresql"
    assert "scale-postgres-data" in compose["volumes"]
    env = _environment(postgres)
    assert env["PGDATA"].startswith("/var/lib/postgresql/")
    for source, target in mounts.items():
        if source.startswith("./"):
            assert (DEPLOY / source).is_file(), source
            assert target.startswith("/etc/segshuffle/postgres/")
            assert f"{source}:{target}:ro" in postgres["volumes"]
    assert "/etc/segshuffle/postgres/entrypoint.sh" in mounts.values()
    # the healthcheck probes the real server's socket, where the configuration puts it
    config = (POSTGRES / "postgresql.conf").read_text()
    socket = re.search(r"^unix_socket_directories\s*=\s*'([^']+)'", config, re.MULTILINE)
    assert socket and env["PGHOST"] == socket[1]
    assert postgres["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert f"--host={socket[1]}" in postgres["healthcheck"]["test"]


def test_postgres_configuration_listens_on_the_network_with_scram_only() -> None:
    config = (POSTGRES / "postgresql.conf").read_text()
    settings = dict(re.findall(r"^(\w+)\s*=\s*(.+?)\s*(?:#.*)?$", config, re.MULTILINE))
    assert settings["password_encryption"] == "scram-sha-256"
    assert settings["hba_file"] == "'/etc/segshuffle/postgres/pg_hba.conf'"
    assert settings["listen_addresses"] == "'*'"  # the container's interfaces only
    assert settings["jit"] == "off"  # the image has no LLVM
    assert settings["log_statement"] == "'none'"
    rules = [line.split() for line in (POSTGRES / "pg_hba.conf").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert not [rule for rule in rules if rule[-1] in ("trust", "password", "md5", "ident")]
    allowed = [rule for rule in rules if rule[-1] not in ("reject",)]
    assert allowed == [["local", "all", "postgres", "peer"],
                       ["host", "shuffler", "shuffler", "samenet", "scram-sha-256"],
                       ["host", "server", "server", "samenet", "scram-sha-256"]]
    assert rules[-2:] == [["host", "all", "all", "all", "reject"],
                          ["local", "all", "all", "reject"]]


def test_postgres_entrypoint_makes_two_isolated_roles_and_databases() -> None:
    script = (POSTGRES / "entrypoint.sh").read_text()
    assert subprocess.run(["bash", "-n", str(POSTGRES / "entrypoint.sh")]).returncode == 0
    assert "initdb" in script and "--auth-host=scram-sha-256" in script
    assert "--auth-local=peer" in script
    for role in ("shuffler", "server"):
        assert re.search(rf"ALTER ROLE {role} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                         rf"NOREPLICATION NOBYPASSRLS\s+CONNECTION LIMIT \d+ PASSWORD "
                         rf":'{role}_password';", script)
        assert f"ALTER DATABASE {role} OWNER TO {role};" in script
        assert f"/run/secrets/postgres_{role}_password" in script
    assert "REVOKE ALL ON DATABASE shuffler, server, postgres, template1 FROM PUBLIC;" in script
    assert "REVOKE ALL ON SCHEMA public FROM PUBLIC;" in script
    # the passwords go from the files to psql's own \set, never through argv or environment
    assert "PGPASSWORD" not in script and "--command" not in script
    assert re.search(r"\\\\set shuffler_password \\`head -n 1 ", script)
    assert script.rstrip().endswith('exec postgres -D "$PGDATA" -c config_file="$config"')


# --- secrets and the image ------------------------------------------------------------------


def test_init_secrets_writes_matching_passwords_and_password_files(tmp_path: Path) -> None:
    _, files = _secret_files(tmp_path)
    passwords = {}
    for role in ("shuffler", "server"):
        password = files[f"postgres_{role}_password"]
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", password)
        assert files[f"{role}_pgpass"] == f"*:*:{role}:{role}:{password}\n"
        passwords[role] = password
    assert passwords["shuffler"] != passwords["server"]
    directory = tmp_path / "secrets"
    assert (directory.stat().st_mode & 0o777) == 0o700
    # kept on a second run, new ones with --force
    env_file = tmp_path / "deploy.env"
    subprocess.run([str(DEPLOY / "init-secrets.sh")], check=True, capture_output=True,
                   env={**os.environ, "SEGSHUFFLE_ENV_FILE": str(env_file)})
    assert (directory / "postgres_server_password").read_text() == passwords["server"]
    subprocess.run([str(DEPLOY / "init-secrets.sh"), "--force"], check=True,
                   capture_output=True, env={**os.environ, "SEGSHUFFLE_ENV_FILE": str(env_file)})
    rotated = (directory / "postgres_server_password").read_text()
    assert rotated != passwords["server"]
    assert (directory / "server_pgpass").read_text() == f"*:*:server:server:{rotated}\n"


def test_build_script_builds_the_postgres_image_on_request() -> None:
    script = (DEPLOY / "build-images.sh").read_text()
    assert 'postgres_image="segshuffle-postgres:bookworm"' in script
    assert 'postgres_packages="postgresql-15,tini"' in script
    assert "--postgres) with_postgres=1 ;;" in script
    assert "--change 'USER postgres'" in script
    result = subprocess.run([str(DEPLOY / "build-images.sh"), "--help"], capture_output=True,
                            text=True)
    assert result.returncode == 0 and "--postgres" in result.stdout


def test_docker_compose_accepts_the_scale_profile(tmp_path: Path) -> None:
    command = compose_command()
    env_file, files = _secret_files(tmp_path)
    bare = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    result = subprocess.run([*command, "--env-file", str(env_file), "-f", str(COMPOSE),
                             "--profile", "scale", "config"],
                            capture_output=True, text=True, env=bare)
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    rendered = document["services"]
    assert set(rendered) >= SCALE_SERVICES
    secret_values = {value.strip() for value in files.values()}
    for name in SCALE_SERVICES:
        env = _environment(rendered[name])
        text = yaml.safe_dump({k: rendered[name].get(k) for k in
                               ("environment", "command", "entrypoint", "healthcheck")})
        assert not [value for value in secret_values if value and value in text], name
        if name in SHUFFLERS:
            assert env["SEGSHUFFLE_SHUFFLER_TRUSTED_PROXIES"] == "172.16.0.0/12,192.168.0.0/16"
    for name in set().union(*SECRETS.values()):
        path = Path(document["secrets"][name]["file"])
        assert path.is_file() and path.read_text() == files[name]
