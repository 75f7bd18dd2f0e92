"""Both services' settings: every setting by flag or environment, secrets never by flag,
flags over the environment, one-line refusals that name the variable and hide secrets."""

from __future__ import annotations

import argparse

import pytest

from segshuffle.cli.main import build_parser, main
from segshuffle.services.configuration import (
    ServiceSettings,
    add_flags,
    is_secret,
    settings_from_flags,
)
from segshuffle.services.server.settings import Settings as ServerSettings
from segshuffle.services.shuffler.settings import Settings as ShufflerSettings

ADMIN = "admin-token-" + "a" * 20
SHUFFLER = "shuffler-token-" + "s" * 20
SERVER_ENV = {"SEGSHUFFLE_SERVER_ADMIN_TOKEN": ADMIN,
              "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": SHUFFLER}
SHUFFLER_ENV = {"SEGSHUFFLE_SHUFFLER_SERVER_TOKEN": SHUFFLER,
                "SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN": "operator-token-" + "o" * 20,
                "SEGSHUFFLE_SHUFFLER_ENROLLMENT": "open"}
SERVICES = [("server", ServerSettings), ("shuffler", ShufflerSettings)]


def _serve_parser(service: str) -> argparse.ArgumentParser:
    parser = build_parser("serve")
    serve = next(a for a in parser._subparsers._group_actions  # type: ignore[union-attr]
                 if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    return next(a for a in serve._subparsers._group_actions  # type: ignore[union-attr]
                if isinstance(a, argparse._SubParsersAction)).choices[service]


@pytest.mark.parametrize(("service", "settings_class"), SERVICES)
def test_every_setting_but_the_secrets_is_a_serve_flag(
        service: str, settings_class: type[ServiceSettings]) -> None:
    flags = {option for action in _serve_parser(service)._actions
             for option in action.option_strings}
    for name in settings_class.model_fields:
        flag = "--" + name.replace("_", "-")
        if is_secret(name):
            assert flag not in flags, f"the secret {name} must not be a flag"
        else:
            assert flag in flags, f"segshuffle serve {service} lacks {flag}"


@pytest.mark.parametrize(("service", "settings_class", "env"),
                         [("server", ServerSettings, SERVER_ENV),
                          ("shuffler", ShufflerSettings, SHUFFLER_ENV)])
def test_a_flag_wins_over_the_environment(service: str, settings_class: type[ServiceSettings],
                                          env: dict[str, str], environment, tmp_path) -> None:
    prefix = settings_class.prefix()
    environment({**env, prefix + "MAX_BODY_BYTES": "2048", prefix + "LOG_LEVEL": "WARNING",
                 prefix + "BODY_TIMEOUT": "12.5"})
    args = _serve_parser(service).parse_args(
        ["--max-body-bytes", "4096", "--database", str(tmp_path / "db")])
    settings = settings_class.from_env(**settings_from_flags(args, settings_class))
    assert settings.max_body_bytes == 4096  # the flag
    assert settings.log_level == "warning"  # the environment, normalised
    assert settings.body_timeout == 12.5
    assert settings.database == str(tmp_path / "db")


def test_boolean_and_choice_flags(environment) -> None:
    environment({**SERVER_ENV, "SEGSHUFFLE_SERVER_ALLOW_INSECURE_PARAMETERS": "true"})
    parser = argparse.ArgumentParser()
    add_flags(parser, ServerSettings)
    args = parser.parse_args(["--no-allow-insecure-parameters", "--synchronous", "EXTRA"])
    settings = ServerSettings.from_env(**settings_from_flags(args, ServerSettings))
    assert (settings.allow_insecure_parameters, settings.synchronous) == (False, "EXTRA")
    assert ServerSettings.from_env().allow_insecure_parameters is True


@pytest.mark.parametrize(("env", "expected"), [
    ({"SEGSHUFFLE_SHUFFLER_ENROLL_RATE": "-1"}, "SEGSHUFFLE_SHUFFLER_ENROLL_RATE (--enroll-rate)"),
    ({"SEGSHUFFLE_SHUFFLER_SERVER_URL": "ftp://x"}, "http:// or https://"),
    ({"SEGSHUFFLE_SHUFFLER_TRUSTED_PROXIES": "not-a-network"}, "TRUSTED_PROXIES"),
    ({"SEGSHUFFLE_SHUFFLER_ENROLLMENT": "invitations"}, "issuer public key"),
    ({"SEGSHUFFLE_SHUFFLER_FORWARD_TIMEOUT": "7200"}, "3600"),
    ({"SEGSHUFFLE_SHUFFLER_SUBMIT_RATE": "inf"}, "SUBMIT_RATE"),
])
def test_shuffler_refusals_are_one_line(env: dict[str, str], expected: str,
                                        environment) -> None:
    environment({**SHUFFLER_ENV, **env})
    with pytest.raises(ValueError) as refused:
        ShufflerSettings.from_env()
    assert expected in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_refused_secret_is_never_echoed(environment) -> None:
    environment({"SEGSHUFFLE_SERVER_ADMIN_TOKEN": "tiny secret",
                 "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": SHUFFLER})
    with pytest.raises(ValueError) as refused:
        ServerSettings.from_env()
    assert "SEGSHUFFLE_SERVER_ADMIN_TOKEN" in str(refused.value)
    assert "tiny" not in str(refused.value)


def test_tokens_are_not_in_the_settings_repr(environment) -> None:
    environment(SERVER_ENV)
    settings = ServerSettings.from_env()
    assert ADMIN not in repr(settings) and SHUFFLER not in repr(settings)
    assert settings.admin_token == ADMIN


def test_settings_are_frozen(environment) -> None:
    environment(SERVER_ENV)
    settings = ServerSettings.from_env()
    with pytest.raises(ValueError):
        settings.port = 1  # type: ignore[misc]


def test_serve_refuses_bad_settings_in_one_line(environment, capsys) -> None:
    environment(SHUFFLER_ENV)
    assert main(["serve", "shuffler", "--port", "70000", "--upstream-connections", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--port" in err[0] and "--upstream-connections" in err[0]
