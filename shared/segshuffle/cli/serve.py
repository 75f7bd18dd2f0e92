"""``segshuffle serve shuffler|server``: run one service under uvicorn.

Settings come from environment variables (``SEGSHUFFLE_SHUFFLER_*``,
``SEGSHUFFLE_SERVER_*``; see each service's ``settings`` module); the flags
below override them.  Secrets (admin, shuffler and operator tokens) and the
enrollment mode are read from the environment only, never from flags, so
they do not show in process listings.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._args import integer

LOG_LEVELS = ("debug", "info", "warning", "error")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the shuffler or the server",
        description="Run one service until interrupted. Settings come from "
                    "SEGSHUFFLE_SHUFFLER_* / SEGSHUFFLE_SERVER_* environment variables; "
                    "flags override them. Tokens are read from the environment only.",
    )
    services = parser.add_subparsers(dest="service", metavar="SERVICE",
                                     parser_class=type(parser))
    services.required = True

    shuffler = services.add_parser(
        "shuffler", help="enrollment, anonymous submissions, shuffling and release",
        description="Needs SEGSHUFFLE_SHUFFLER_SERVER_TOKEN, SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN "
                    "and the invitation issuer's public key SEGSHUFFLE_SHUFFLER_INVITATION_KEYS "
                    "('segshuffle admin issuer-key' prints it) in the environment. "
                    "SEGSHUFFLE_SHUFFLER_ENROLLMENT=open admits anyone instead: unsafe against "
                    "fake users, for tests only.")
    _common(shuffler, default_port=8081)
    shuffler.add_argument("--server-url", help="base URL of the server (analyzer)")
    shuffler.add_argument("--min-users", type=integer,
                          help="the shuffler's floor on participants per release")
    shuffler.add_argument("--auto-release", type=integer, metavar="N",
                          help="release a round automatically at N participants (0: never)")
    shuffler.add_argument("--chunk-size", type=integer,
                          help="ciphertexts per chunk forwarded to the server")
    shuffler.set_defaults(handler=run)

    server = services.add_parser(
        "server", help="campaigns, keys, aggregation, optimization and decoding",
        description="Needs SEGSHUFFLE_SERVER_ADMIN_TOKEN and "
                    "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN in the environment.")
    _common(server, default_port=8080)
    server.add_argument("--key-dir", help="directory of the campaigns' private key files")
    server.add_argument("--signing-key-file",
                        help="the Ed25519 document-signing key (PEM), created if missing "
                             "(default: <key dir>/signing/document-signing-key.pem)")
    server.add_argument("--allow-insecure-parameters", action="store_true", default=None,
                        help="accept campaigns with fixed, unaccounted parameters (tests only)")
    server.add_argument("--decrypt-workers", type=integer,
                        help="processes that decrypt large chunks (0: one per CPU)")
    server.set_defaults(handler=run)


def _common(parser: argparse.ArgumentParser, default_port: int) -> None:
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=integer,
                        help=f"listen port (default {default_port}; 0 picks a free port)")
    parser.add_argument("--database", help="SQLite database file")
    parser.add_argument("--log-level", choices=LOG_LEVELS)
    parser.add_argument("--log-format", choices=("json", "text"),
                        help="log lines as JSON objects (default) or plain text")


def run(args: argparse.Namespace) -> int:
    """Start the service; a store or signing key it cannot use is one line on stderr and
    exit status 1."""
    import fastapi  # noqa: F401  (both services need the server extra)
    import uvicorn  # noqa: F401

    from segshuffle.services.server.signing import SigningKeyError
    from segshuffle.services.sqlite_base import UnusableDatabaseError

    try:
        return _run(args)
    except (UnusableDatabaseError, SigningKeyError) as exc:
        sys.stderr.write(f"segshuffle: error: {exc}\n")
        return 1


def _run(args: argparse.Namespace) -> int:
    common = {"host": args.host, "port": args.port, "database": args.database,
              "log_level": args.log_level, "log_format": args.log_format}
    if args.service == "shuffler":
        from segshuffle.services import shuffler

        settings = shuffler.Settings.from_env(
            **common, server_url=args.server_url, min_users=args.min_users,
            auto_release=args.auto_release, chunk_size=args.chunk_size,
        )
        return int(shuffler.run(settings) or 0)
    from segshuffle.services import server

    server_settings = server.Settings.from_env(
        **common, key_dir=args.key_dir, signing_key_file=args.signing_key_file,
        allow_insecure_parameters=args.allow_insecure_parameters,
        decrypt_workers=args.decrypt_workers,
    )
    return int(server.run(server_settings) or 0)
