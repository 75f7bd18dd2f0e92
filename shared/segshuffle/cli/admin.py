"""``segshuffle admin ...``: the app operator's commands.

Running a campaign over HTTP (``campaign``, ``status``, ``release``, ``results``) is in
:mod:`.admin_campaign`; the commands here need no network.

- ``admin issuer-key --out FILE``: create the invitation issuer's Ed25519 key pair; the
  private key goes to FILE (PKCS#8 PEM, mode 0600), the public key is printed, for the
  shuffler's ``SEGSHUFFLE_SHUFFLER_INVITATION_KEYS``.  ``admin issuer-key --public-of
  FILE`` prints the public key of an existing private key.
- ``admin invitations ID --count N --out FILE --issuer-key FILE [--expires-in SECONDS]``:
  sign N single-use invitations to campaign ID locally (no HTTP) and write them one per
  line to FILE (mode 0600).  Hand one to each real user; the shuffler enrolls a user once
  per invitation (docs/wire.md, "Invitations").
- ``admin signing-key [--server URL] [--token-file FILE]``: fetch the server's
  document-signing public key (``GET /v1/signing-key`` with the admin token, from
  ``SEGSHUFFLE_ADMIN_TOKEN`` or the file).  Ship it in the app (``server_key``); fetch it
  from the server itself, never through the shuffler.  ``--ca-file FILE`` (or
  ``SEGSHUFFLE_CA_FILE``) trusts a private CA for an https URL.

Every command takes ``--json``.  Bad input is one line on standard error and exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

from . import admin_campaign
from ._args import integer

MAX_COUNT = 1_000_000
MAX_EXPIRES_IN = 366 * 86400
DEFAULT_EXPIRES_IN = 14 * 86400


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "admin", help="operator commands: campaigns, status, release, results, invitations",
        description="Commands of the app operator. Invitations are signed locally with the "
                    "issuer's private key; the shuffler only holds the public key.")
    commands = parser.add_subparsers(dest="admin_command", metavar="ADMIN_COMMAND",
                                     parser_class=type(parser))
    commands.required = True
    admin_campaign.register(commands)

    key = commands.add_parser(
        "issuer-key", help="create the invitation issuer key pair, print the public key",
        description="Write a new Ed25519 private key (PKCS#8 PEM, mode 0600) and print its "
                    "public key for SEGSHUFFLE_SHUFFLER_INVITATION_KEYS.")
    where = key.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", metavar="FILE", help="private key file to create")
    where.add_argument("--public-of", metavar="FILE",
                       help="print the public key of this existing private key file")
    key.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    key.add_argument("--json", action="store_true", help="print one JSON object")
    key.set_defaults(handler=issuer_key)

    invite = commands.add_parser(
        "invitations", help="sign single-use enrollment invitations for a campaign",
        description="Sign N single-use, expiring invitations to a campaign with the issuer "
                    "key and write them one per line (mode 0600). No network access.")
    invite.add_argument("campaign_id", metavar="ID", help="campaign id")
    invite.add_argument("--count", type=integer, required=True, metavar="N",
                        help=f"invitations to sign (1..{MAX_COUNT})")
    invite.add_argument("--out", required=True, metavar="FILE", help="file to create")
    invite.add_argument("--issuer-key", required=True, metavar="FILE",
                        help="the issuer's private key (from 'segshuffle admin issuer-key')")
    invite.add_argument("--expires-in", type=integer, default=DEFAULT_EXPIRES_IN,
                        metavar="SECONDS",
                        help=f"validity from now (default {DEFAULT_EXPIRES_IN}, i.e. 14 days; "
                             f"at most {MAX_EXPIRES_IN})")
    invite.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    invite.add_argument("--json", action="store_true", help="print one JSON object")
    invite.set_defaults(handler=invitations)

    signing = commands.add_parser(
        "signing-key", help="print the server's document-signing public key",
        description="Fetch the server's Ed25519 document-signing public key with the admin "
                    "token (SEGSHUFFLE_ADMIN_TOKEN, or --token-file). Apps ship it as "
                    "server_key and refuse campaign views it did not sign.")
    admin_campaign.add_server_url(signing, ", directly, not through the shuffler")
    signing.add_argument("--token-file", metavar="FILE",
                         help="file holding the admin token (default: SEGSHUFFLE_ADMIN_TOKEN)")
    signing.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                         help="HTTP timeout (default 10)")
    admin_campaign.add_ca_file(signing)
    signing.add_argument("--json", action="store_true", help="print one JSON object")
    signing.set_defaults(handler=signing_key)


def _write(path: str, lines: list[bytes], force: bool) -> None:
    from segshuffle.crypto.invitations import write_private_file

    try:
        write_private_file(path, lines, overwrite=force)
    except FileExistsError:
        raise ValueError(f"{path} exists (--force overwrites it)") from None
    except OSError as exc:
        raise ValueError(f"cannot write {path}: {exc.strerror}") from None


def _print(args: argparse.Namespace, report: dict[str, Any], text: str) -> None:
    sys.stdout.write(json.dumps(report) + "\n" if args.json else text + "\n")


def issuer_key(args: argparse.Namespace) -> int:
    from segshuffle.crypto.invitations import (
        generate_issuer_key,
        issuer_key_pem,
        load_issuer_key,
        public_key_text,
    )

    if args.public_of is not None:
        public = public_key_text(load_issuer_key(args.public_of))
        _print(args, {"public_key": public, "private_key_file": args.public_of}, public)
        return 0
    key = generate_issuer_key()
    _write(args.out, [issuer_key_pem(key)], args.force)
    public = public_key_text(key)
    _print(args, {"public_key": public, "private_key_file": args.out}, public)
    return 0


def invitations(args: argparse.Namespace) -> int:
    from segshuffle.crypto.invitations import load_issuer_key, new_invitation, sign_invitation
    from segshuffle.wire.models import ID_PATTERN

    if not re.match(ID_PATTERN, args.campaign_id):
        raise ValueError(f"campaign id must be 1-64 letters, digits, '.', '_' or '-', "
                         f"got {args.campaign_id!r}")
    if not 1 <= args.count <= MAX_COUNT:
        raise ValueError(f"--count must be between 1 and {MAX_COUNT}, got {args.count}")
    if not 1 <= args.expires_in <= MAX_EXPIRES_IN:
        raise ValueError(f"--expires-in must be between 1 and {MAX_EXPIRES_IN} seconds, "
                         f"got {args.expires_in}")
    key = load_issuer_key(args.issuer_key)
    expires = int(time.time()) + args.expires_in
    lines = [sign_invitation(new_invitation(args.campaign_id, expires), key).encode("ascii")
             + b"\n" for _ in range(args.count)]
    _write(args.out, lines, args.force)
    report = {"campaign_id": args.campaign_id, "count": args.count, "out": args.out,
              "expires": expires}
    _print(args, report, f"wrote {args.count} invitation(s) to campaign {args.campaign_id} "
                         f"to {args.out}, valid until "
                         f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(expires))}")
    return 0


def signing_key(args: argparse.Namespace) -> int:
    import httpx
    from pydantic import ValidationError

    from segshuffle.client.problems import service_error
    from segshuffle.client.tls import CA_FILE_ENV, certificate_error, trust
    from segshuffle.crypto.documents import parse_server_key
    from segshuffle.testing.operator import ADMIN_TOKEN_ENV, base_url, read_token
    from segshuffle.wire.models import SigningKey

    token = read_token(args.token_file, ADMIN_TOKEN_ENV)
    base = base_url(args.server, "--server")
    if not 0 < args.timeout <= 300:
        raise ValueError(f"--timeout must be in (0, 300] seconds, got {args.timeout}")
    verify = trust(admin_campaign.ca_file(args))
    try:
        response = httpx.get(base + "/v1/signing-key", timeout=args.timeout,
                             headers={"Authorization": f"Bearer {token}"}, verify=verify)
    except httpx.HTTPError as exc:
        refused = certificate_error(exc)
        if refused is not None:
            raise ValueError(f"the TLS certificate of {base} is not trusted: {refused} "
                             f"(--ca-file FILE or {CA_FILE_ENV} trusts a private CA)") from None
        raise ValueError(f"cannot reach the server at {base}: {type(exc).__name__}") from None
    if response.status_code >= 400:
        raise ValueError(str(service_error(response, "signing key")))
    try:
        document = SigningKey.model_validate(response.json())
        parse_server_key(document.public_key)
    except (ValueError, ValidationError):
        raise ValueError(f"{base} did not answer with a signing key document") from None
    _print(args, {"server": base, "algorithm": document.algorithm,
                  "public_key": document.public_key}, document.public_key)
    return 0
