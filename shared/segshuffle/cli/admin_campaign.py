"""``segshuffle admin campaign|status|release|results``: run a campaign over HTTP.

- ``campaign create --id ID (--items FILE | --domain-size D) --set-size S --levels E1,..``
  (``POST /v1/campaigns`` on the server), ``campaign list`` (``GET /v1/campaigns``),
  ``campaign show ID``, ``campaign abort ID [--reason TEXT]``: the server's admin API
  (``SEGSHUFFLE_ADMIN_TOKEN`` or ``--token-file``).
- ``status ID [--watch]``: the campaign phase and, per round, participants against the
  threshold and the release state, from the shuffler (no token).
- ``release ID --round R [--when-ready] [--wait]``: the shuffler's operator API
  (``SEGSHUFFLE_OPERATOR_TOKEN`` or ``--token-file``).  ``--when-ready`` first waits, with a
  progress line on standard error, until the round has reached its release threshold
  (round 2: once the server has published the parameters), bounded by ``--timeout``.
- ``results ID --format table|json|csv|png [--out FILE]`` (:mod:`.admin_results`).

URLs from ``--server`` (default http://127.0.0.1:8080) and ``--shuffler`` (default
http://127.0.0.1:8081).  For https URLs whose certificates a private CA signed (the TLS
profile of deploy/), ``--ca-file FILE`` or ``SEGSHUFFLE_CA_FILE`` names the CA
certificate to trust instead of the system's store.  Every failure is one line on
standard error and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from segshuffle.client.errors import ServiceError
from segshuffle.client.tls import CA_FILE_ENV
from segshuffle.core import rules

from ._args import field_message, float_list, integer, number
from .errors import CommandError

if TYPE_CHECKING:
    from segshuffle.testing.operator import OperatorClient

ADMIN_TOKEN_ENV = "SEGSHUFFLE_ADMIN_TOKEN"
"""The same names as :mod:`segshuffle.testing.operator`'s (a test checks), spelled out here
so that building the parser imports neither httpx nor pydantic: every ``segshuffle admin``
command, and its ``--help``, starts without loading what it does not use."""
OPERATOR_TOKEN_ENV = "SEGSHUFFLE_OPERATOR_TOKEN"

DEFAULT_SERVER = "http://127.0.0.1:8080"
DEFAULT_SHUFFLER = "http://127.0.0.1:8081"
SERVER_URL_ENV = "SEGSHUFFLE_SERVER_URL"
SHUFFLER_URL_ENV = "SEGSHUFFLE_SHUFFLER_URL"
"""Where ``--server`` / ``--shuffler`` default from (deploy/init-secrets.sh writes both into
deploy/.env with the deployment's published ports, so ``set -a; . deploy/.env; set +a``
gives every admin command its URLs and tokens)."""
DEFAULT_MIN_USERS = 100
MAX_ITEMS_FILE_BYTES = 32 * 1024 * 1024
DEFAULT_WATCH_TIMEOUT = 24 * 3600.0
DEFAULT_RELEASE_TIMEOUT = 600.0
DEFAULT_READY_TIMEOUT = 3600.0
MAX_RELEASE_TIMEOUT = 7 * 86400.0
ENDED = ("done", "failed", "aborted")
BAR_WIDTH = 30


def _common(server: bool, shuffler: bool, token: str | None) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    if server:
        add_server_url(parent)
    if shuffler:
        parent.add_argument("--shuffler", metavar="URL",
                            default=os.environ.get(SHUFFLER_URL_ENV, "").strip()
                            or DEFAULT_SHUFFLER,
                            help=f"the shuffler's base URL (default ${SHUFFLER_URL_ENV}, "
                                 f"else {DEFAULT_SHUFFLER})")
    if token:
        parent.add_argument("--token-file", metavar="FILE",
                            help=f"file holding the token (default: ${token})")
    add_ca_file(parent)
    parent.add_argument("--json", action="store_true", help="print JSON")
    return parent


def add_server_url(parser: argparse.ArgumentParser, note: str = "") -> None:
    """``--server URL``, default ``$SEGSHUFFLE_SERVER_URL``, else :data:`DEFAULT_SERVER`."""
    parser.add_argument("--server", metavar="URL",
                        default=os.environ.get(SERVER_URL_ENV, "").strip() or DEFAULT_SERVER,
                        help=f"the server's base URL{note} (default ${SERVER_URL_ENV}, "
                             f"else {DEFAULT_SERVER})")


def add_ca_file(parser: argparse.ArgumentParser) -> None:
    """``--ca-file FILE``: the private CA trusted for https URLs (default
    ``$SEGSHUFFLE_CA_FILE``, else the system's trust store)."""
    parser.add_argument("--ca-file", metavar="FILE",
                        help=f"PEM certificate(s) of the CA that signed the services' TLS "
                             f"certificates, trusted instead of the system's store "
                             f"(default: ${CA_FILE_ENV} if set)")


def ca_file(args: argparse.Namespace) -> str | None:
    """The CA file of ``--ca-file`` or ``SEGSHUFFLE_CA_FILE``; ``None``: the system's store."""
    chosen = getattr(args, "ca_file", None) or os.environ.get(CA_FILE_ENV, "").strip()
    return chosen or None


def register(commands: Any) -> None:
    """Add ``campaign``, ``status``, ``release`` and ``results`` to ``segshuffle admin``."""
    server = _common(True, False, ADMIN_TOKEN_ENV)
    campaign = commands.add_parser(
        "campaign", help="create, list, show or abort campaigns (server, admin token)",
        description="The server's campaign administration (SEGSHUFFLE_ADMIN_TOKEN or "
                    "--token-file).")
    actions = campaign.add_subparsers(dest="campaign_command", metavar="ACTION",
                                      parser_class=type(campaign))
    actions.required = True

    create = actions.add_parser("create", parents=[server], help="create a campaign")
    create.add_argument("--id", required=True, dest="campaign_id", metavar="ID")
    domain = create.add_mutually_exclusive_group(required=True)
    domain.add_argument("--items", metavar="FILE", help="item names, one per line")
    domain.add_argument("--domain-size", type=integer, metavar="D",
                        help="number of items (ids 0..D-1, no names)")
    create.add_argument("--set-size", type=integer, required=True, metavar="S",
                        help="items each user reports at most")
    create.add_argument("--levels", type=float_list, required=True, metavar="E1,..",
                        help="the privacy levels (epsilons) users choose from")
    create.add_argument("--delta", type=number, metavar="X", help="default: 0.01 / n")
    create.add_argument("--min-users", type=integer, default=DEFAULT_MIN_USERS, metavar="N",
                        help=f"the fewest participants either round is released with "
                             f"(default {DEFAULT_MIN_USERS}); round 2 waits for N users "
                             f"whatever --dropout-tolerance says, so to let a share T of "
                             f"the n round-1 participants drop out, choose N <= "
                             f"ceil((1 - T) n)")
    create.add_argument("--dropout-tolerance", type=number, metavar="T",
                        help="share of the n round-1 participants that may miss round 2 "
                             f"(default {rules.DEFAULT_DROPOUT_TOLERANCE:g}): round 2 is "
                             "released with max(N, ceil((1 - T) n)) participants and the "
                             "epsilons are accounted for "
                             "ceil((1 - T) n) users; with N equal to n no one may drop out")
    create.add_argument("--fake-tolerance", type=number, metavar="F",
                        help="tolerated share of fake round-2 participants (default 0)")
    create.add_argument("--blanket-mode", choices=("slots", "independent"))
    create.add_argument("--level-privacy", type=number, metavar="EPS",
                        help="protect the level choice with EPS (default: levels exact)")
    create.set_defaults(handler=campaign_create)

    listing = actions.add_parser("list", parents=[server], help="list campaigns and phases")
    listing.set_defaults(handler=campaign_list)
    show = actions.add_parser("show", parents=[server], help="show one campaign")
    show.add_argument("campaign_id", metavar="ID")
    show.set_defaults(handler=campaign_show)
    abort = actions.add_parser("abort", parents=[server],
                               help="end a campaign in round 1 or 2 without results")
    abort.add_argument("campaign_id", metavar="ID")
    abort.add_argument("--reason", metavar="TEXT", help="why (1-500 characters)")
    abort.set_defaults(handler=campaign_abort)

    status = commands.add_parser(
        "status", parents=[_common(False, True, None)],
        help="participants per round against the threshold, release state, phase",
        description="Read the campaign's phase and round status from the shuffler (no "
                    "token). --watch redraws until the campaign ends, Ctrl-C or --timeout.")
    status.add_argument("campaign_id", metavar="ID")
    status.add_argument("--watch", action="store_true", help="redraw until the campaign ends")
    status.add_argument("--interval", type=number, default=2.0, metavar="S",
                        help="seconds between redraws (default 2)")
    status.add_argument("--timeout", type=number, default=DEFAULT_WATCH_TIMEOUT, metavar="S",
                        help="stop watching after S seconds (default 86400)")
    status.set_defaults(handler=status_command)

    release = commands.add_parser(
        "release", parents=[_common(False, True, OPERATOR_TOKEN_ENV)],
        help="release a round on the shuffler (operator token)",
        description="Permute a round and forward it to the server "
                    "(SEGSHUFFLE_OPERATOR_TOKEN or --token-file). --when-ready first waits "
                    "until the round has reached its release threshold.")
    release.add_argument("campaign_id", metavar="ID")
    release.add_argument("--round", type=integer, required=True, choices=(1, 2),
                         dest="round_number", metavar="R")
    release.add_argument("--when-ready", action="store_true",
                         help="first wait until the round has its required participants "
                              "(a progress line on standard error), then release; exit 2 "
                              "if the campaign ends or --timeout passes first")
    release.add_argument("--wait", action="store_true",
                         help="until the server acknowledged the round")
    release.add_argument("--interval", type=number, default=2.0, metavar="S",
                         help="--when-ready: seconds between checks (default 2)")
    release.add_argument("--timeout", type=number, default=None, metavar="S",
                         help=f"the whole command at most S seconds, waiting for the "
                              f"threshold and for the acknowledgement together (default "
                              f"{DEFAULT_RELEASE_TIMEOUT:g}, with --when-ready "
                              f"{DEFAULT_READY_TIMEOUT:g})")
    release.set_defaults(handler=release_command)

    results = commands.add_parser(
        "results", parents=[server], help="the estimates and the privacy report",
        description="Fetch the results (admin token). csv also writes the privacy report to "
                    "<out without suffix>.privacy.json; png needs the 'experiments' extra.")
    results.add_argument("campaign_id", metavar="ID")
    results.add_argument("--format", choices=("table", "json", "csv", "png"), default="table")
    results.add_argument("--out", metavar="FILE", help="file to write (csv and png need it)")
    results.set_defaults(handler=results_command)


# -- helpers ------------------------------------------------------------------------------------

@contextmanager
def _client(args: argparse.Namespace, token_env: str | None) -> Iterator[OperatorClient]:
    """The operator client of the command's URLs and token; a refusal or a network error
    of the services becomes one :class:`CommandError` line."""
    from segshuffle.testing.operator import OperatorClient, base_url, read_token

    token = read_token(args.token_file, token_env) if token_env else None
    client = OperatorClient(
        server=base_url(args.server, "--server") if hasattr(args, "server") else "",
        shuffler=base_url(args.shuffler, "--shuffler") if hasattr(args, "shuffler") else "",
        admin_token=token if token_env == ADMIN_TOKEN_ENV else None,
        operator_token=token if token_env == OPERATOR_TOKEN_ENV else None,
        ca_file=ca_file(args))
    try:
        yield client
    except ServiceError as exc:
        raise CommandError(str(exc)) from None
    finally:
        client.close()


def _emit(args: argparse.Namespace, document: Any, text: str) -> None:
    sys.stdout.write(json.dumps(document) + "\n" if args.json else text.rstrip("\n") + "\n")
    sys.stdout.flush()


def _campaign_id(value: str) -> str:
    from segshuffle.wire.models import ID_PATTERN

    if not re.fullmatch(ID_PATTERN.removeprefix("^").removesuffix("$"), value):
        raise ValueError(f"campaign id must be 1-64 letters, digits, '.', '_' or '-', "
                         f"got {value[:80]!r}")
    return value


def _read_items(path: str) -> list[str]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_ITEMS_FILE_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --items {path}: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    if len(raw) > MAX_ITEMS_FILE_BYTES:
        raise ValueError(f"--items {path} is larger than {MAX_ITEMS_FILE_BYTES} bytes")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _describe(view: Any) -> str:
    config = view.config
    lines = [f"campaign {view.id}: {view.phase}"
             + (f" ({view.end_reason})" if view.end_reason else ""),
             f"  domain {config.domain_size} items, set size {config.set_size}, levels "
             f"{', '.join(f'{e:g}' for e in config.levels)}, min users {config.min_users}",
             f"  config hash {view.config_hash}, key id {view.key_id}"]
    if view.parameters is not None:
        epsilons = ", ".join("-" if e is None else f"{e:.3f}" for e in view.parameters.epsilons)
        lines.append(f"  round-2 parameters published: epsilon upper bounds {epsilons}")
    return "\n".join(lines)


# -- campaign -----------------------------------------------------------------------------------

def campaign_create(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from segshuffle.wire.models import CampaignCreate

    body: dict[str, Any] = {"id": _campaign_id(args.campaign_id), "set_size": args.set_size,
                            "levels": args.levels, "min_users": args.min_users}
    if args.items is not None:
        body["items"] = _read_items(args.items)
    else:
        body["domain_size"] = args.domain_size
    optional = {"delta": args.delta, "dropout_tolerance": args.dropout_tolerance,
                "fake_tolerance": args.fake_tolerance, "blanket_mode": args.blanket_mode,
                "level_privacy": args.level_privacy}
    body.update({key: value for key, value in optional.items() if value is not None})
    try:
        CampaignCreate.model_validate(body)
    except ValidationError as exc:
        raise ValueError(f"invalid campaign: {field_message(exc.errors()[0])}") from None
    with _client(args, ADMIN_TOKEN_ENV) as client:
        view = client.create_campaign(body)
    _emit(args, view.model_dump(mode="json"), "created " + _describe(view))
    return 0


def campaign_list(args: argparse.Namespace) -> int:
    with _client(args, ADMIN_TOKEN_ENV) as client:
        campaigns = client.list_campaigns()
    rows = [f"{c.id}\t{c.phase}" for c in campaigns]
    _emit(args, [c.model_dump(mode="json") for c in campaigns],
          "\n".join(rows) if rows else "no campaigns")
    return 0


def campaign_show(args: argparse.Namespace) -> int:
    with _client(args, ADMIN_TOKEN_ENV) as client:
        view = client.campaign(_campaign_id(args.campaign_id))
    _emit(args, view.model_dump(mode="json"), _describe(view))
    return 0


def campaign_abort(args: argparse.Namespace) -> int:
    with _client(args, ADMIN_TOKEN_ENV) as client:
        view = client.abort(_campaign_id(args.campaign_id), args.reason)
    _emit(args, view.model_dump(mode="json"),
          f"campaign {view.id}: {view.phase}"
          + (f" ({view.end_reason})" if view.end_reason else ""))
    return 0


# -- status -------------------------------------------------------------------------------------

def _snapshot(client: OperatorClient, campaign_id: str) -> dict[str, Any]:
    """The phase and the status of each round that has begun (round 2 begins when the
    server publishes its parameters)."""
    view = client.relayed_view(campaign_id)
    rounds = [client.round_status(campaign_id, 1)]
    if view.parameters is not None:
        rounds.append(client.round_status(campaign_id, 2))
    return {"campaign_id": campaign_id, "phase": view.phase, "end_reason": view.end_reason,
            "rounds": [{key: status.get(key) for key in (
                "round", "participants", "required", "state", "reason", "last_error",
                "waiting_for")}
                for status in rounds]}


def _bar(done: int, total: int) -> str:
    filled = BAR_WIDTH if total <= 0 else min(BAR_WIDTH, BAR_WIDTH * done // total)
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def _render(snapshot: dict[str, Any]) -> str:
    lines = [f"campaign {snapshot['campaign_id']}: {snapshot['phase']}"
             + (f" ({snapshot['end_reason']})" if snapshot["end_reason"] else "")]
    for status in snapshot["rounds"]:
        line = (f"  round {status['round']} {_bar(status['participants'], status['required'])} "
                f"{status['participants']}/{status['required']} participants, "
                f"{status['state']}")
        why = status.get("reason") or status.get("last_error")
        if not why and status.get("waiting_for"):
            why = f"waiting for {status['required']} participants, set by " \
                  f"{status['waiting_for']}"
        lines.append(line + (f": {why}" if why else ""))
    return "\n".join(lines)


def status_command(args: argparse.Namespace) -> int:
    cid = _campaign_id(args.campaign_id)
    if not 0.1 <= args.interval <= 3600:
        raise ValueError(f"--interval must be between 0.1 and 3600 seconds, got "
                         f"{args.interval:g}")
    if not 0 < args.timeout <= 366 * 86400:
        raise ValueError(f"--timeout must be positive and at most a year, got {args.timeout:g}")
    redraw = args.watch and not args.json and sys.stdout.isatty()
    deadline = time.monotonic() + args.timeout
    with _client(args, None) as client:
        while True:
            snapshot = _snapshot(client, cid)
            if redraw:
                sys.stdout.write("\x1b[H\x1b[J")
            _emit(args, snapshot, _render(snapshot))
            if not args.watch or snapshot["phase"] in ENDED:
                return 0
            if time.monotonic() + args.interval > deadline:
                raise ValueError(f"campaign {cid} still {snapshot['phase']} after "
                                 f"--timeout {args.timeout:g}s")
            time.sleep(args.interval)


# -- release and results ------------------------------------------------------------------------

def _progress(view: Any, status: dict[str, Any], round_number: int) -> str:
    """The line ``release --when-ready`` prints while it waits."""
    if round_number == 2 and view.parameters is None:
        return (f"waiting for round 2 of {view.id}: round 1 is not released and its "
                f"parameters not published yet ({status['participants']} round-2 "
                f"participants so far)")
    return (f"waiting for round {round_number} of {view.id}: "
            f"{_bar(status['participants'], status['required'])} "
            f"{status['participants']}/{status['required']} participants")


def wait_until_ready(client: OperatorClient, cid: str, round_number: int, *,
                     deadline: float, timeout: float, interval: float) -> None:
    """Poll the shuffler until round ``round_number`` may be released: it is open, its
    participants have reached the threshold the shuffler enforces (``required``), and for
    round 2 the server has published the parameters; or it is already released or
    releasing (the release request then reports it).  A progress line goes to standard
    error whenever it changes.  Raises :class:`CommandError` if the campaign fails or is
    aborted, or at ``deadline`` (``time.monotonic()``); a service that does not answer
    or answers 5xx is asked again until then."""
    last = ""
    while True:
        try:
            view = client.relayed_view(cid)
            if view.phase in ("failed", "aborted"):
                raise CommandError(
                    f"campaign {cid} {view.phase}"
                    + (f" ({view.end_reason})" if view.end_reason else "")
                    + f" before round {round_number} reached its release threshold")
            status = client.round_status(cid, round_number)
        except ServiceError as exc:
            if not exc.transient:
                raise
            line = f"waiting for round {round_number} of {cid}: {exc} (asking again)"
        else:
            if status["state"] != "open":
                return
            opened = round_number == 1 or view.parameters is not None
            if opened and status["participants"] >= status["required"]:
                sys.stderr.write(_progress(view, status, round_number) + ", ready\n")
                return
            line = _progress(view, status, round_number)
        if line != last:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
            last = line
        if time.monotonic() + interval > deadline:
            raise CommandError(f"round {round_number} of {cid} did not reach its release "
                               f"threshold within --timeout {timeout:g}s ({last}); "
                               f"not released")
        time.sleep(interval)


def release_command(args: argparse.Namespace) -> int:
    cid = _campaign_id(args.campaign_id)
    timeout = args.timeout
    if timeout is None:
        timeout = DEFAULT_READY_TIMEOUT if args.when_ready else DEFAULT_RELEASE_TIMEOUT
    if not 0 < timeout <= MAX_RELEASE_TIMEOUT:
        raise ValueError(f"--timeout must be positive and at most 7 days, got {timeout:g}")
    if not 0.1 <= args.interval <= 3600:
        raise ValueError(f"--interval must be between 0.1 and 3600 seconds, got "
                         f"{args.interval:g}")
    deadline = time.monotonic() + timeout
    with _client(args, OPERATOR_TOKEN_ENV) as client:
        if args.when_ready:
            wait_until_ready(client, cid, args.round_number, deadline=deadline,
                             timeout=timeout, interval=args.interval)
        answer, acknowledged = client.release(
            cid, args.round_number, wait=args.wait,
            timeout=max(1.0, deadline - time.monotonic()))
    answer["acknowledged"] = acknowledged
    state = "released and acknowledged by the server" if acknowledged else \
        "released, still forwarding to the server"
    _emit(args, answer, f"round {args.round_number} of {cid} {state}: "
                        f"{answer.get('messages')} messages in {answer.get('chunks')} "
                        f"chunk(s), batch {answer.get('batch_id')}")
    return 0


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot write {path}: {exc.strerror}") from None


def results_command(args: argparse.Namespace) -> int:
    from . import admin_results

    cid = _campaign_id(args.campaign_id)
    if args.format in ("csv", "png") and args.out is None:
        raise ValueError(f"--format {args.format} needs --out FILE")
    if args.format == "png":
        import matplotlib  # noqa: F401  (before any request: the missing extra is one line)
    with _client(args, ADMIN_TOKEN_ENV) as client:
        results = client.results(cid)
    out = None if args.out is None else Path(args.out)
    written = [] if out is None else [str(out)]
    if args.format == "png":
        assert out is not None
        try:
            admin_results.write_png(results, out)
        except OSError as exc:
            raise ValueError(f"cannot write {out}: {exc.strerror}") from None
    elif args.format == "csv":
        assert out is not None
        _write_text(out, admin_results.to_csv(results))
        companion = admin_results.privacy_path(out)
        _write_text(companion, admin_results.privacy_document(results))
        written.append(str(companion))
    else:
        text = (admin_results.to_json(results) if args.format == "json"
                else admin_results.to_table(results))
        if out is None:
            sys.stdout.write(text)
            return 0
        _write_text(out, text)
    _emit(args, {"campaign_id": cid, "format": args.format, "files": written},
          f"wrote {' and '.join(written)}")
    return 0
