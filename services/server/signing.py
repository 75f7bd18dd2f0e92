"""The server's long-term Ed25519 document-signing key: one 0600 PKCS#8 PEM file.

The key signs the campaign documents the shuffler relays (:mod:`segshuffle.crypto.documents`);
apps ship its public key so that a relay cannot substitute a view or an HPKE key.  The
file is created on first start when missing and reused afterwards: a new key would make
every app that ships the old one refuse the server.  By default it lives in a
``signing`` subdirectory of the key directory, apart from the campaign key files
``<key_dir>/<campaign_id>.pem`` (a campaign id can never name a subdirectory).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from segshuffle.crypto.invitations import issuer_key_pem, write_private_file
from segshuffle.private_files import make_private_folder, report_open

DEFAULT_DIRECTORY = "signing"
DEFAULT_NAME = "document-signing-key.pem"


class SigningKeyError(Exception):
    """The signing key file exists but cannot be used (unreadable, not an Ed25519 key)."""


def default_path(key_directory: str | os.PathLike[str]) -> Path:
    return Path(key_directory) / DEFAULT_DIRECTORY / DEFAULT_NAME


def load_or_create(path: str | os.PathLike[str]) -> tuple[Ed25519PrivateKey, bool]:
    """The key of ``path`` and whether it was just created (mode 0600, atomically).

    Raises :class:`SigningKeyError` with a one-line message when the file exists but is
    unreadable or holds anything but an unencrypted Ed25519 private key; a missing file
    is never a reason to replace one that exists.  Its missing folders are made private
    (0700); an existing file that others may read is reported, not refused.
    """
    target = Path(path)
    if not target.exists():
        key = Ed25519PrivateKey.generate()
        try:
            make_private_folder(target.parent)
            write_private_file(target, [issuer_key_pem(key)])
            return key, True
        except FileExistsError:
            pass  # another process created it meanwhile: use that one
        except OSError as exc:
            raise SigningKeyError(f"cannot create the document-signing key {target}: "
                                  f"{exc.strerror}") from None
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"cannot read the document-signing key {target}: "
                              f"{exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise SigningKeyError(f"the document-signing key {target} is not an unencrypted PEM "
                              "private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"the document-signing key {target} is not an Ed25519 key")
    report_open([target])  # a private key others may read
    return key, False
