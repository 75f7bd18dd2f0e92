"""Fast checks of the container deployment (deploy/): compose file, Dockerfile, scripts.

Building the images and running ``docker compose up`` takes minutes, so it lives in the
opt-in test ``tests/test_deploy_docker.py`` (``SEGSHUFFLE_DOCKER_TESTS=1``).  Here we
check everything that can go stale without anybody noticing: that the compose file
parses, sets only settings the services actually read, starts the services with the
``serve`` subcommand, publishes on loopback only, keeps the databases on volumes and
interpolates only variables that ``deploy/init-secrets.sh`` writes or that have
defaults; that the Dockerfile installs the whole project; and that the scripts are
valid bash and generate proper secrets.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML (a development dependency)

from .compose_support import compose_command

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
SCRIPTS = [DEPLOY / "build-images.sh", DEPLOY / "init-secrets.sh"]

INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
SECRET_NAMES = {"SEGSHUFFLE_ADMIN_TOKEN", "SEGSHUFFLE_SHUFFLER_TOKEN", "SEGSHUFFLE_OPERATOR_TOKEN"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):  # the "KEY=value" list form
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _settings_fields(module_name: str) -> set[str]:
    module = importlib.import_module(module_name)
    return set(module.Settings.model_fields)


def _generated_env(tmp_path: Path) -> dict[str, str]:
    target = tmp_path / "secrets.env"
    subprocess.run([str(DEPLOY / "init-secrets.sh")], check=True, capture_output=True,
                   env={**os.environ, "SEGSHUFFLE_ENV_FILE": str(target)})
    values = {}
    for line in target.read_text().splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            values[key] = value
    return values


# --- compose file ---------------------------------------------------------------------------


def test_compose_defines_both_services_with_serve_commands(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"server", "shuffler"} <= set(services)
    for name in ("server", "shuffler"):
        assert services[name]["command"] == ["serve", name]
        assert services[name]["image"].endswith("segshuffle:latest}")
        assert services[name]["pull_policy"] == "never"


def test_image_entrypoint_is_the_segshuffle_command() -> None:
    entrypoint = [line for line in DOCKERFILE.read_text().splitlines()
                  if line.startswith("ENTRYPOINT")]
    assert entrypoint == ['ENTRYPOINT ["/usr/bin/tini", "--", "segshuffle"]']


@pytest.mark.parametrize(("service", "module", "prefix"), [
    ("shuffler", "segshuffle.services.shuffler.settings", "SEGSHUFFLE_SHUFFLER_"),
    ("server", "segshuffle.services.server.settings", "SEGSHUFFLE_SERVER_"),
])
def test_compose_environment_names_settings_the_service_reads(
        compose: dict[str, Any], service: str, module: str, prefix: str) -> None:
    fields = _settings_fields(module)
    env = _environment(compose["services"][service])
    assert env, f"{service} has no environment"
    for key in env:
        assert key.startswith(prefix), f"{service} gets {key}, which it does not read"
        field = key.removeprefix(prefix).lower()
        if field.endswith("_token_file"):  # a token read from a file (Docker secrets)
            field = field.removesuffix("_file")
        assert field in fields, f"{key}: {module}.Settings has no field {field!r}"


def test_services_listen_on_all_container_interfaces_at_the_published_port(
        compose: dict[str, Any]) -> None:
    for name in ("server", "shuffler"):
        service = compose["services"][name]
        env = _environment(service)
        prefix = f"SEGSHUFFLE_{name.upper()}_"
        assert env[prefix + "HOST"] == "0.0.0.0"
        port = env[prefix + "PORT"]
        (published,) = service["ports"]
        parts = re.fullmatch(r"(?P<host>[^:]+):(?P<host_port>\$\{[^}]+\}|\d+):(?P<port>\d+)",
                             published)
        assert parts, f"{name}: unexpected port mapping {published!r}"
        assert parts["port"] == port
        assert parts["host"] == "127.0.0.1", f"{name} must be published on loopback only"
        check = " ".join(service["healthcheck"]["test"])
        assert f"http://127.0.0.1:{port}/readyz" in check


@pytest.mark.parametrize("name", ["server", "shuffler"])
def test_services_run_hardened(compose: dict[str, Any], name: str) -> None:
    service = compose["services"][name]
    assert service["read_only"] is True
    assert service["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in service["security_opt"]
    assert any(entry.startswith("/tmp:") for entry in service["tmpfs"])
    assert service["logging"]["options"]["max-size"]


def test_shuffler_reaches_server_by_service_name_and_waits_for_it(
        compose: dict[str, Any]) -> None:
    shuffler = compose["services"]["shuffler"]
    server_port = _environment(compose["services"]["server"])["SEGSHUFFLE_SERVER_PORT"]
    env = _environment(shuffler)
    # a variable whose default is the direct URL (the tls profile points it at the proxy)
    assert re.fullmatch(rf"(\$\{{[A-Z_]+:-)?http://server:{server_port}\}}?",
                        env["SEGSHUFFLE_SHUFFLER_SERVER_URL"])
    assert shuffler["depends_on"]["server"]["condition"] == "service_healthy"


@pytest.mark.parametrize(("service", "variable", "is_file"), [
    ("server", "SEGSHUFFLE_SERVER_DATABASE", True),
    ("server", "SEGSHUFFLE_SERVER_KEY_DIR", False),
    ("shuffler", "SEGSHUFFLE_SHUFFLER_DATABASE", True),
])
def test_state_lives_on_named_volumes(compose: dict[str, Any], service: str, variable: str,
                                      is_file: bool) -> None:
    named = set(compose["volumes"])
    definition = compose["services"][service]
    path = Path(_environment(definition)[variable])
    mounts = [entry.split(":") for entry in definition["volumes"]]
    assert any(source in named and path.is_relative_to(target)
               for source, target, *_ in mounts), f"{variable}={path} is not on a volume"
    # The image creates the mount point owned by the service account, so that a fresh
    # named volume starts out writable by it.
    directory = path.parent if is_file else path
    assert re.search(rf"{re.escape(str(directory))}(\s|$)", DOCKERFILE.read_text())


def test_tokens_are_distinct_and_only_given_to_the_services_that_use_them(
        compose: dict[str, Any]) -> None:
    assert compose["services"]["server"]["secrets"] == ["admin_token", "shuffler_token"]
    assert compose["services"]["shuffler"]["secrets"] == ["shuffler_token", "operator_token"]
    tokens = ("admin_token", "shuffler_token", "operator_token")
    assert {name: spec["file"] for name, spec in compose["secrets"].items()
            if name in tokens} == {
        name: f"${{SEGSHUFFLE_SECRETS_DIR:-./secrets}}/{name}" for name in tokens}
    # the others are the scale profile's database secrets (tests/test_deploy_scale.py)
    assert all(spec["file"] == f"${{SEGSHUFFLE_SECRETS_DIR:-./secrets}}/{name}"
               for name, spec in compose["secrets"].items())


def test_every_interpolated_variable_has_a_default_or_is_generated(tmp_path: Path) -> None:
    generated = _generated_env(tmp_path)
    for match in INTERPOLATION.finditer(COMPOSE.read_text()):
        name, operator, argument = match.groups()
        if operator in (":-", "-"):
            continue
        assert name in generated, f"${{{name}}} has no default and init-secrets.sh omits it"
        if operator in (":?", "?"):
            assert "init-secrets" in argument


def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    command = compose_command()
    secrets = _generated_env(tmp_path)
    bare = {k: v for k, v in os.environ.items() if k not in SECRET_NAMES}
    result = subprocess.run([*command, "--env-file", str(tmp_path / "secrets.env"),
                             "-f", str(COMPOSE), "config"],
                            capture_output=True, text=True, env=bare)
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    rendered = document["services"]
    server, shuffler = _environment(rendered["server"]), _environment(rendered["shuffler"])
    files = {name: Path(spec["file"]) for name, spec in document["secrets"].items()}
    assert files["admin_token"].read_text() == secrets["SEGSHUFFLE_ADMIN_TOKEN"]
    assert files["shuffler_token"].read_text() == secrets["SEGSHUFFLE_SHUFFLER_TOKEN"]
    assert files["operator_token"].read_text() == secrets["SEGSHUFFLE_OPERATOR_TOKEN"]
    assert server["SEGSHUFFLE_SERVER_ADMIN_TOKEN_FILE"] == "/run/secrets/admin_token"
    assert shuffler["SEGSHUFFLE_SHUFFLER_SERVER_TOKEN_FILE"] == "/run/secrets/shuffler_token"
    tokens = {secrets[f"SEGSHUFFLE_{name}_TOKEN"] for name in ("ADMIN", "SHUFFLER", "OPERATOR")}
    assert not tokens & (set(server.values()) | set(shuffler.values()))
    assert (shuffler["SEGSHUFFLE_SHUFFLER_INVITATION_KEYS"]
            == secrets["SEGSHUFFLE_ISSUER_PUBLIC_KEY"])
    assert "SEGSHUFFLE_SHUFFLER_ENROLLMENT" not in shuffler  # invitations, the default
    # Without any tokens compose refuses to start and says what to run.
    empty = tmp_path / "empty.env"
    empty.write_text("")
    result = subprocess.run([*command, "--env-file", str(empty), "-f", str(COMPOSE), "config"],
                            capture_output=True, text=True, env=bare)
    assert result.returncode != 0
    assert "init-secrets" in result.stderr


def test_loadtest_profile_runs_the_copied_script_against_the_services(
        compose: dict[str, Any]) -> None:
    service = compose["services"]["loadtest"]
    assert service["profiles"] == ["loadtest"]  # never started by a plain `up`
    entrypoint = service["entrypoint"]
    tini, separator, python, script, *flags = entrypoint
    assert (tini, separator, python) == ("/usr/bin/tini", "--", "python")
    assert re.search(rf"^COPY loadtest/ {re.escape(str(Path(script).parent))}/$",
                     DOCKERFILE.read_text(), re.MULTILINE)
    spec = importlib.util.spec_from_file_location("loadtest_main",
                                                  REPO / "loadtest" / Path(script).name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    parsed = module.build_parser().parse_args(flags)
    for name in ("server", "shuffler"):
        port = _environment(compose["services"][name])[f"SEGSHUFFLE_{name.upper()}_PORT"]
        assert getattr(parsed, f"{name}_url") == f"http://{name}:{port}"
    assert parsed.allow_private
    assert set(_environment(service)) == {"SEGSHUFFLE_ADMIN_TOKEN", "SEGSHUFFLE_OPERATOR_TOKEN",
                                          "SEGSHUFFLE_ISSUER_PRIVATE_KEY"}
    assert "ports" not in service


# --- the serve subcommand the containers run --------------------------------------------


@pytest.mark.slow  # 2-3 s on a 2-core machine: the fast tier stays within 3 minutes
def test_serve_subcommand_offers_both_services() -> None:
    from segshuffle.cli.main import SUBCOMMANDS

    assert "serve" in SUBCOMMANDS
    for service in ("server", "shuffler"):
        result = subprocess.run([sys.executable, "-m", "segshuffle.cli.main", "serve", service,
                                 "--help"], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert f"SEGSHUFFLE_{service.upper()}_" in result.stdout


# --- Dockerfile -----------------------------------------------------------------------------


def test_dockerfile_builds_from_the_imported_base_and_installs_the_project() -> None:
    text = DOCKERFILE.read_text()
    assert text.splitlines()[[line.startswith("FROM") for line in text.splitlines()].index(True)] \
        == "FROM segshuffle-base:bookworm"
    # Every source root of the package (pyproject's package-dir) is copied in.
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_dirs = pyproject["tool"]["setuptools"]["package-dir"].values()
    roots = {value.split("/")[0] for value in package_dirs}
    for root in roots | {"pyproject.toml", "README.md"}:
        assert re.search(rf"^COPY .*\b{re.escape(root)}\b.* /src/", text, re.MULTILINE), root
    assert re.search(r"pip install [^\n]*--no-index[^\n]* /src\b", text)
    assert "python3 -m venv /opt/segshuffle" in text
    assert re.search(r"^USER segshuffle$", text, re.MULTILINE), "must not run as root"


def test_build_script_stages_what_the_dockerfile_copies() -> None:
    script = (DEPLOY / "build-images.sh").read_text()
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                top = source.rstrip("/").split("/")[0]
                assert re.search(rf"\b{re.escape(top)}\b", script), f"{top} is never staged"
    assert "docker import" in script and "mmdebstrap" in script
    assert "--network none" in script


# --- scripts --------------------------------------------------------------------------------


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_executable_valid_bash(script: Path) -> None:
    assert script.stat().st_mode & stat.S_IXUSR, f"{script.name} is not executable"
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_init_secrets_writes_private_random_tokens_and_keeps_them(tmp_path: Path) -> None:
    target = tmp_path / "secrets.env"
    env = {**os.environ, "SEGSHUFFLE_ENV_FILE": str(target)}
    first = _generated_env(tmp_path)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    tokens = [first[name] for name in sorted(SECRET_NAMES)]
    assert len(set(tokens)) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{43}", token) for token in tokens)
    assert re.fullmatch(r"segshuffle-[a-z0-9_-]+-[0-9a-f]{6}", first["COMPOSE_PROJECT_NAME"])
    # A second run keeps the file; --force rotates every token.
    subprocess.run([str(DEPLOY / "init-secrets.sh")], check=True, capture_output=True, env=env)
    assert _read(target) == first
    subprocess.run([str(DEPLOY / "init-secrets.sh"), "--force"], check=True,
                   capture_output=True, env=env)
    rotated = _read(target)
    assert all(rotated[name] != first[name] for name in SECRET_NAMES)


def test_init_secrets_makes_the_invitation_issuer_key(tmp_path: Path,
                                                      compose: dict[str, Any]) -> None:
    from segshuffle.crypto.invitations import (
        issuer_key_from_text,
        load_issuer_key,
        public_key_text,
    )

    values = _generated_env(tmp_path)
    key_file = tmp_path / "issuer-key.pem"  # next to the env file
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    public = values["SEGSHUFFLE_ISSUER_PUBLIC_KEY"]
    assert public == public_key_text(load_issuer_key(key_file))
    assert public == public_key_text(issuer_key_from_text(values["SEGSHUFFLE_ISSUER_PRIVATE_KEY"]))
    shuffler = _environment(compose["services"]["shuffler"])
    assert shuffler["SEGSHUFFLE_SHUFFLER_INVITATION_KEYS"].startswith(
        "${SEGSHUFFLE_ISSUER_PUBLIC_KEY:?")
    # an env file from before invitations gets a key added, its tokens kept
    target = tmp_path / "secrets.env"
    old = [line for line in target.read_text().splitlines() if "ISSUER" not in line]
    target.write_text("\n".join(old) + "\n")
    subprocess.run([str(DEPLOY / "init-secrets.sh")], check=True, capture_output=True,
                   env={**os.environ, "SEGSHUFFLE_ENV_FILE": str(target)})
    updated = _read(target)
    assert all(updated[name] == values[name] for name in SECRET_NAMES)
    assert updated["SEGSHUFFLE_ISSUER_PUBLIC_KEY"] == public_key_text(load_issuer_key(key_file))


def _read(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines()
                if line and not line.startswith("#"))


def test_generated_secrets_are_ignored_by_git() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "deploy/.env"])
    assert result.returncode == 0, "deploy/.env must be ignored by git"
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "deploy"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert "deploy/.env" not in tracked


@pytest.mark.parametrize("service", ["server", "shuffler"])
def test_no_token_is_passed_in_the_environment(compose: dict[str, Any], service: str) -> None:
    """Tokens reach the services as Docker secret files, never as environment values (which
    `docker inspect` shows)."""
    spec = compose["services"][service]
    env = _environment(spec)
    assert not [key for key in env if key.endswith("_TOKEN")], env
    files = {key: value for key, value in env.items() if key.endswith("_TOKEN_FILE")}
    assert files and all(value.startswith("/run/secrets/") for value in files.values())
    names = {value.removeprefix("/run/secrets/") for value in files.values()}
    assert names == set(spec["secrets"]) and names <= set(compose["secrets"])


# --- two deployments on one host -------------------------------------------------------------

PORT_NAMES = ("SEGSHUFFLE_SERVER_PUBLISH_PORT", "SEGSHUFFLE_SHUFFLER_PUBLISH_PORT",
              "SEGSHUFFLE_SERVER_TLS_PORT", "SEGSHUFFLE_SHUFFLER_TLS_PORT",
              "SEGSHUFFLE_SCALE_SERVER_PORT", "SEGSHUFFLE_SCALE_SHUFFLER_PORT")


def _init(env_file: Path, *flags: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(DEPLOY / "init-secrets.sh"), *flags], check=check,
                          capture_output=True, text=True,
                          env={**os.environ, "SEGSHUFFLE_ENV_FILE": str(env_file)})


def _deployment(values: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in values.items()
            if k == "COMPOSE_PROJECT_NAME" or k in PORT_NAMES or k.endswith("_URL")}


def test_two_checkouts_get_their_own_project_name(tmp_path: Path) -> None:
    """The project name was fixed (``segshuffle``), so a second checkout's ``up`` took over
    the first one's containers and volumes."""
    first, second = tmp_path / "a" / "deploy" / ".env", tmp_path / "b" / "deploy" / ".env"
    for env_file in (first, second):
        env_file.parent.mkdir(parents=True)
        _init(env_file)
    names = [_read(env_file)["COMPOSE_PROJECT_NAME"] for env_file in (first, second)]
    assert names[0] != names[1]
    assert names[0].startswith("segshuffle-a-") and names[1].startswith("segshuffle-b-")
    _init(first)  # the same checkout keeps its name
    assert _read(first)["COMPOSE_PROJECT_NAME"] == names[0]


def test_ports_move_past_a_busy_one_and_the_admin_urls_follow(tmp_path: Path) -> None:
    """With 8080..8081 (or any of the six) taken, the next free offset of 10 is chosen for
    all six; the admin URLs name the chosen ports."""
    import socket

    taken = []
    try:
        for port in (8080, 8443):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue  # already in use here: busy either way
            sock.listen()
            taken.append(sock)
        env_file = tmp_path / ".env"
        _init(env_file)
    finally:
        for sock in taken:
            sock.close()
    values = _read(env_file)
    ports = [int(values[name]) for name in PORT_NAMES]
    offset = ports[0] - 8080
    assert offset > 0 and offset % 10 == 0
    assert ports == [p + offset for p in (8080, 8081, 8443, 8444, 8180, 8181)]
    assert values["SEGSHUFFLE_SERVER_URL"] == f"http://127.0.0.1:{ports[0]}"
    assert values["SEGSHUFFLE_SHUFFLER_URL"] == f"http://127.0.0.1:{ports[1]}"


def test_force_rotates_secrets_but_keeps_the_deployment(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    _init(env_file, "--project", "mine", "--port-offset", "30")
    before = _read(env_file)
    assert before["COMPOSE_PROJECT_NAME"] == "mine"
    assert before["SEGSHUFFLE_SERVER_PUBLISH_PORT"] == "8110"
    _init(env_file, "--force")
    after = _read(env_file)
    assert _deployment(after) == _deployment(before)
    assert after["SEGSHUFFLE_ADMIN_TOKEN"] != before["SEGSHUFFLE_ADMIN_TOKEN"]


def test_an_env_file_from_before_gets_ports_and_urls_and_keeps_its_name(tmp_path: Path) -> None:
    """Volumes belong to the project name: an existing file's name is never changed."""
    env_file = tmp_path / ".env"
    _init(env_file)
    old = [line for line in env_file.read_text().splitlines()
           if not re.match(r"(COMPOSE_PROJECT_NAME|SEGSHUFFLE_\w+_(PORT|URL))=", line)]
    env_file.write_text("\n".join(["COMPOSE_PROJECT_NAME=segshuffle", *old]) + "\n")
    tokens = {k: v for k, v in _read(env_file).items() if k.endswith("_TOKEN")}
    _init(env_file)
    values = _read(env_file)
    assert values["COMPOSE_PROJECT_NAME"] == "segshuffle"
    assert all(values[name] for name in PORT_NAMES)
    assert values["SEGSHUFFLE_SERVER_URL"].startswith("http://127.0.0.1:")
    assert {k: values[k] for k in tokens} == tokens
    assert env_file.read_text().count("COMPOSE_PROJECT_NAME=") == 1


@pytest.mark.parametrize("flags", [["--project", "Bad Name"], ["--project"],
                                   ["--port-offset", "-1"], ["--port-offset", "x"],
                                   ["--nope"]])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, flags: list[str]) -> None:
    result = _init(tmp_path / ".env", *flags, check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "[init-secrets]" in result.stderr
    assert not (tmp_path / ".env").exists()


def test_the_env_file_loads_into_a_shell_for_segshuffle_admin(tmp_path: Path) -> None:
    """README/deploy README: ``set -a; . deploy/.env; set +a`` gives ``segshuffle admin``
    its tokens and its URLs (the ports chosen for this deployment)."""
    env_file = tmp_path / ".env"
    _init(env_file, "--port-offset", "40")
    script = (f"set -euo pipefail; set -a; . {shlex.quote(str(env_file))}; set +a; "
              f"{shlex.quote(sys.executable)} -c 'import os; "
              f"from segshuffle.cli.main import build_parser as b; "
              f"a = b(\"admin\").parse_args([\"admin\", \"status\", \"x\"]); "
              f"c = b(\"admin\").parse_args([\"admin\", \"campaign\", \"list\"]); "
              f"print(a.shuffler, c.server, bool(os.environ[\"SEGSHUFFLE_ADMIN_TOKEN\"]))'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["http://127.0.0.1:8121", "http://127.0.0.1:8120", "True"]
