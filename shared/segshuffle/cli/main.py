"""Entry point of the ``segshuffle`` command.

Each subcommand lives in its own module exposing ``register(subparsers)``, which
adds its parser and sets ``handler`` to a function ``(args) -> int``.  Modules
are imported only when needed, so ``segshuffle optimize`` does not pay for the
web stack.

Errors: a :class:`ValueError` (bad input) or :class:`CommandError` raised by a
handler is printed as one line ``segshuffle: error: ...`` and the command exits
with status 2, the same status argparse uses for malformed flags.  A command stopped by
a signal it handles raises :class:`~segshuffle.cli.errors.Interrupted`: one line
``segshuffle: interrupted by SIGTERM`` and status 128 + the signal's number.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from segshuffle.cli.errors import CommandError, Interrupted

__all__ = ["CommandError", "build_parser", "main"]

SUBCOMMANDS = {
    "optimize": "segshuffle.cli.optimize",
    "audit": "segshuffle.cli.audit",
    "demo": "segshuffle.cli.demo",
    "reproduce": "segshuffle.cli.reproduce",
    "serve": "segshuffle.cli.serve",
    "admin": "segshuffle.cli.admin",
}

#: Each subcommand's one-line help, shown by ``segshuffle --help`` without importing it
#: (a test checks that it is the help the module registers).
SUMMARIES = {
    "optimize": "choose the blanket rate m and the Poisson rates lambda_k",
    "audit": "upper and lower user-level epsilon of one (m, lambda) setting",
    "demo": "run the shuffler and the server locally with simulated users",
    "reproduce": "run the paper's experiments (baselines, m sweep) and write CSVs and figures",
    "serve": "run the shuffler or the server",
    "admin": "operator commands: campaigns, status, release, results, invitations",
}

EXIT_USAGE = 2

#: Optional top-level modules and the extra that installs them.
OPTIONAL_MODULES = {
    "numpy": "numeric",
    "scipy": "numeric",
    "fastapi": "server",
    "starlette": "server",
    "uvicorn": "server",
    "matplotlib": "experiments",
}


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage on errors; we print one clear line.

    A value that starts with a minus and a digit (``--levels -1,2``) is a value, not an
    unknown flag: no flag of ours looks like a number.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def missing_module_message(exc: ModuleNotFoundError) -> str:
    """One line naming the extra that provides a missing optional module."""
    top = (exc.name or "").split(".")[0]
    extra = OPTIONAL_MODULES.get(top)
    if extra is None:
        return str(exc)
    return (f"this command needs the '{extra}' extra (module {top!r} is missing): "
            f"pip install 'segshuffle[{extra}]'")


def error_line(exc: Exception) -> str:
    """The one line a refusal prints: its message, or for a validation error of a model
    (pydantic's ``ValidationError`` is a ``ValueError``, and its text spans several lines
    in the library's words) its first refusal in the project's words."""
    pydantic_core = sys.modules.get("pydantic_core")  # loaded if such an error exists
    if pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError):
        from segshuffle.wire.validation import summary

        return summary(exc)
    return str(exc)


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the ``selected`` subcommand's module is imported (none without
    one: ``segshuffle --version`` and ``--help`` import no protocol or web code)."""
    parser = _OneLineParser(
        prog="segshuffle",
        description="Segmented private data aggregation in the multi-message shuffle model.",
    )
    from segshuffle import __version__

    parser.add_argument("--version", action="version", version=f"segshuffle {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND",
                                       parser_class=_OneLineParser)
    subparsers.required = True
    for name, module_name in SUBCOMMANDS.items():
        if name != selected:  # not imported: --version and --help stay light
            subparsers.add_parser(name, help=SUMMARIES[name])
            continue
        module = importlib.import_module(module_name)
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in arguments if not a.startswith("-")), None)
    if selected not in SUBCOMMANDS:
        selected = None
    try:
        parser = build_parser(selected)
    except ModuleNotFoundError as exc:  # a subcommand whose optional parts are missing
        sys.stderr.write(f"segshuffle: error: {missing_module_message(exc)}\n")
        return EXIT_USAGE
    try:
        args = parser.parse_args(arguments)
        status = int(args.handler(args) or 0)
        # Write buffered output now, inside this handler: a closed pipe met at the
        # interpreter's exit flush would print a traceback-like warning instead.
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # The reader went away (``segshuffle optimize ... | head``): say so once on stderr,
        # and keep the interpreter from tripping over the closed stdout at exit.
        _silence_stdout()
        sys.stderr.write("segshuffle: error: the output was closed before it was written\n")
        return EXIT_USAGE
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in OPTIONAL_MODULES:
            raise
        sys.stderr.write(f"segshuffle: error: {missing_module_message(exc)}\n")
        return EXIT_USAGE
    except (ValueError, CommandError) as exc:
        sys.stderr.write(f"segshuffle: error: {error_line(exc)}\n")
        return EXIT_USAGE
    except Interrupted as exc:
        sys.stderr.write(f"segshuffle: {exc}\n")
        return exc.exit_status
    except KeyboardInterrupt:
        sys.stderr.write("segshuffle: interrupted\n")
        return 130


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that its flush at exit meets no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
