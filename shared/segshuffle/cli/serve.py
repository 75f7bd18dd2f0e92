"""``segshuffle serve shuffler|server``: run one service under uvicorn.

Every setting of a service (see each service's ``settings`` module) can be given as a
flag (``--field-name``), as an environment variable (``SEGSHUFFLE_SHUFFLER_*``,
``SEGSHUFFLE_SERVER_*``), or left at its default; a flag wins over the environment.
Secrets (the admin, shuffler, server and operator tokens) are read from the environment
or from the files their ``..._TOKEN_FILE`` variables name, never from flags, so they do
not show in process listings.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``serve shuffler`` and ``serve server``, with one flag per setting. The settings
    classes are imported lazily, so the rest of the command line works without the
    ``server`` extra."""
    parser = subparsers.add_parser(
        "serve",
        help="run the shuffler or the server",
        description="Run one service until interrupted. Every setting is a flag or a "
                    "SEGSHUFFLE_SHUFFLER_* / SEGSHUFFLE_SERVER_* environment variable (flags "
                    "win). Tokens come from the environment or ..._TOKEN_FILE files only.",
    )
    services = parser.add_subparsers(dest="service", metavar="SERVICE",
                                     parser_class=type(parser))
    services.required = True

    shuffler = services.add_parser(
        "shuffler", help="enrollment, anonymous submissions, shuffling and release",
        description="Needs SEGSHUFFLE_SHUFFLER_SERVER_TOKEN, SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN "
                    "(or their ..._FILE variants) and the invitation issuer's public key "
                    "(--invitation-keys; 'segshuffle admin issuer-key' prints it). "
                    "--enrollment open admits anyone instead: unsafe against fake users, for "
                    "tests only.")
    server = services.add_parser(
        "server", help="campaigns, keys, aggregation, optimization and decoding",
        description="Needs SEGSHUFFLE_SERVER_ADMIN_TOKEN and SEGSHUFFLE_SERVER_SHUFFLER_TOKEN "
                    "(or their ..._FILE variants) in the environment.")
    try:
        from segshuffle.services.configuration import add_flags
        from segshuffle.services.server.settings import Settings as ServerSettings
        from segshuffle.services.shuffler.settings import Settings as ShufflerSettings
    except ImportError:  # without the server extra, `serve` explains what is missing
        shuffler.set_defaults(handler=run)
        server.set_defaults(handler=run)
        return
    add_flags(shuffler, ShufflerSettings)
    add_flags(server, ServerSettings)
    shuffler.set_defaults(handler=run)
    server.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Start the service. A refused start is one line on stderr: exit status 2 for bad
    input (unusable settings, a directory that cannot hold the service's state, a port
    that cannot be bound, a database that is not the service's), 1 for a store or signing
    key that is there but cannot be used (:mod:`segshuffle.services.exit_status`)."""
    import fastapi  # noqa: F401  (both services need the server extra)
    import uvicorn  # noqa: F401

    from segshuffle.services.exit_status import run_or_refuse
    from segshuffle.services.server.signing import SigningKeyError

    return run_or_refuse("segshuffle", lambda: _run(args), unusable=(SigningKeyError,))


def _run(args: argparse.Namespace) -> int:
    from segshuffle.services.configuration import settings_from_flags

    if args.service == "shuffler":
        from segshuffle.services import shuffler

        settings = shuffler.Settings.from_env(**settings_from_flags(args, shuffler.Settings))
        return int(shuffler.run(settings) or 0)
    from segshuffle.services import server

    server_settings = server.Settings.from_env(**settings_from_flags(args, server.Settings))
    return int(server.run(server_settings) or 0)
