"""Static checks of the two-party compose files (deploy/compose.server.yaml and
deploy/compose.shuffler.yaml): each runs only its own service (and, in the ``tls`` profile,
a proxy for it), holds only its own secrets, takes no token through the environment, and
the shuffler party names the server party only through required variables.  The
compose files are parsed with PyYAML; ``docker-compose config`` is asked too when it is
installed."""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .compose_support import compose_command

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
PARTIES = {
    "server": {"file": DEPLOY / "compose.server.yaml", "secrets": {"admin_token",
                                                                    "shuffler_token"},
               "site": "server", "other": "shuffler"},
    "shuffler": {"file": DEPLOY / "compose.shuffler.yaml",
                 "secrets": {"shuffler_token", "operator_token"},
                 "site": "shuffler", "other": "server"},
}
TOKEN_VARIABLES = ("SEGSHUFFLE_ADMIN_TOKEN", "SEGSHUFFLE_SHUFFLER_TOKEN",
                   "SEGSHUFFLE_OPERATOR_TOKEN", "SEGSHUFFLE_ISSUER_PRIVATE_KEY")


def _load(party: str) -> dict[str, Any]:
    document = yaml.safe_load(PARTIES[party]["file"].read_text())
    assert isinstance(document, dict)
    return document


def _environment(service: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (service.get("environment") or {}).items()}


@pytest.mark.parametrize("party", sorted(PARTIES))
def test_each_party_runs_only_its_own_service(party: str) -> None:
    services = _load(party)["services"]
    assert set(services) == {party, "proxy"}
    assert services[party]["command"] == ["serve", party]
    assert "profiles" not in services[party]
    assert services["proxy"]["profiles"] == ["tls"]  # only with COMPOSE_PROFILES=tls
    assert party in services["proxy"]["depends_on"]


@pytest.mark.parametrize("party", sorted(PARTIES))
def test_each_party_holds_only_its_own_secrets(party: str) -> None:
    document = _load(party)
    own: set[str] = PARTIES[party]["secrets"]
    assert set(document["secrets"]) == own
    assert set(document["services"][party]["secrets"]) == own
    assert "secrets" not in document["services"]["proxy"]
    text = PARTIES[party]["file"].read_text()
    # the other party's private material is not even mentioned
    forbidden = {"server": ["operator_token", "ISSUER_PRIVATE", "issuer-key"],
                 "shuffler": ["admin_token", "ADMIN_TOKEN", "ISSUER_PRIVATE", "server-keys",
                              "server-key.pem"]}[party]
    assert not [word for word in forbidden if word in text]


@pytest.mark.parametrize("party", sorted(PARTIES))
def test_no_token_is_passed_in_the_environment(party: str) -> None:
    for name, service in _load(party)["services"].items():
        env = _environment(service)
        assert not [key for key in env if key.endswith("_TOKEN")], (name, env)
        assert not [value for value in env.values()
                    if any(variable in value for variable in TOKEN_VARIABLES)], (name, env)
        files = [value for key, value in env.items() if key.endswith("_TOKEN_FILE")]
        assert all(value.startswith("/run/secrets/") for value in files)


@pytest.mark.parametrize(("party", "module", "prefix"), [
    ("server", "segshuffle.services.server.settings", "SEGSHUFFLE_SERVER_"),
    ("shuffler", "segshuffle.services.shuffler.settings", "SEGSHUFFLE_SHUFFLER_"),
])
def test_the_environment_names_settings_the_service_reads(party: str, module: str,
                                                         prefix: str) -> None:
    settings = importlib.import_module(module).Settings
    if dataclasses.is_dataclass(settings):
        fields = {field.name for field in dataclasses.fields(settings)}
    else:  # pydantic-settings
        fields = set(settings.model_fields)
    for key in _environment(_load(party)["services"][party]):
        assert key.startswith(prefix), key
        field = key.removeprefix(prefix).lower()
        if field.endswith("_token_file"):
            field = field.removesuffix("_file")
        assert field in fields, key


@pytest.mark.parametrize("party", sorted(PARTIES))
def test_the_plain_port_stays_on_loopback_and_the_proxy_serves_only_its_party(
        party: str) -> None:
    services = _load(party)["services"]
    (plain,) = services[party]["ports"]
    assert plain.startswith("127.0.0.1:")
    mounts = [entry.split(":")[-2] for entry in services["proxy"]["volumes"]]
    site = PARTIES[party]["site"]
    other = PARTIES[party]["other"]
    assert f"/etc/nginx/segshuffle/{site}.conf" in mounts
    assert f"/etc/segshuffle/tls/{site}-key.pem" in mounts
    assert not [m for m in mounts if other in m.rsplit("/", 1)[-1]], mounts
    (published,) = services["proxy"]["ports"]
    assert published.endswith(":8443" if party == "server" else ":8444")


def test_the_shuffler_party_reaches_the_server_party_only_by_its_https_url() -> None:
    shuffler = _load("shuffler")["services"]["shuffler"]
    env = _environment(shuffler)
    assert env["SEGSHUFFLE_SHUFFLER_SERVER_URL"].startswith("${SEGSHUFFLE_SERVER_PARTY_URL:?")
    ca = env["SEGSHUFFLE_SHUFFLER_SERVER_CA_FILE"]
    assert any(entry.startswith("${SEGSHUFFLE_SERVER_PARTY_CA:?") and f":{ca}:ro" in entry
               for entry in shuffler["volumes"])
    assert "depends_on" not in shuffler  # the server is another party's machine




@pytest.mark.slow  # 2-3 s on a 2-core machine: the fast tier stays within 3 minutes
def test_docker_compose_accepts_both_party_files(tmp_path: Path) -> None:
    command = compose_command()
    env_file = tmp_path / "party.env"
    subprocess.run([str(DEPLOY / "init-secrets.sh")], check=True, capture_output=True,
                   env={**os.environ, "SEGSHUFFLE_ENV_FILE": str(env_file)}, timeout=60)
    bare = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    ca = tmp_path / "tls" / "certs" / "ca.pem"
    for party, extra in (("server", {}), ("shuffler", {
            "SEGSHUFFLE_SERVER_PARTY_URL": "https://analyzer.example.org:8443",
            "SEGSHUFFLE_SERVER_PARTY_CA": str(ca)})):
        result = subprocess.run([*command, "--env-file", str(env_file), "-f",
                                 str(PARTIES[party]["file"]), "--profile", "tls", "config"],
                                capture_output=True, text=True, env={**bare, **extra},
                                timeout=60)
        assert result.returncode == 0, result.stderr
        rendered = yaml.safe_load(result.stdout)
        assert set(rendered["secrets"]) == PARTIES[party]["secrets"]
    # Without the server party's URL the shuffler party refuses to start, saying why.
    result = subprocess.run([*command, "--env-file", str(env_file), "-f",
                             str(PARTIES["shuffler"]["file"]), "config"],
                            capture_output=True, text=True, env=bare, timeout=60)
    assert result.returncode != 0 and "SEGSHUFFLE_SERVER_PARTY_URL" in result.stderr


def test_the_issuer_key_stays_with_the_shuffler_party() -> None:
    """Whoever holds the issuer key can mint tokens, and with the
    server that is the n-1 attack; the docs say who holds it and the server party's file
    never sees it."""
    assert "ISSUER" not in PARTIES["server"]["file"].read_text()
    assert "SEGSHUFFLE_ISSUER_PUBLIC_KEY" in PARTIES["shuffler"]["file"].read_text()
    guide = (DEPLOY / "README.md").read_text()
    assert "the invitation issuer's private key (it signs the invitations" in guide
    assert "must never reach the server party" in guide
    threat = (DEPLOY.parent / "README.md").read_text()
    assert "The issuer key must be held by a party that does not collude with the server" \
        in threat
