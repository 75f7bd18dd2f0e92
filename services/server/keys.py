"""The campaigns' HPKE private keys: one 0600 PEM file per key in the key directory.

Keys are kept apart from the database so the database can be backed up or
inspected without the secrets (and the key directory mounted as a secret volume).

Several server replicas may share the key directory (and one database), so a key
file is named by its campaign *and its key id*: ``<campaign>~<key id>.pem`` (``~``
cannot occur in a campaign id, so no two names collide).  It is written before the
campaign row that records the key id, once, atomically (a temporary file linked to
its final name, which fails rather than replace an existing file), and loading uses
the key id recorded in the row.  So:

- two replicas racing to create the same campaign each write their own key file;
  the database's primary key decides which row is inserted, and the loser's file is
  an orphan that no row names: harmless (as is the file of a crash between the key
  and the row);
- a file is never replaced, so the private key behind a stored public key never
  changes.

Deployments before this layout named the file ``<campaign>.pem``; such a file is
still read when no ``<campaign>~<key id>.pem`` exists, and used only if its public
key has the key id the row records.
"""

from __future__ import annotations

import threading
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from segshuffle.crypto import generate_private_key, load_private_key, save_private_key
from segshuffle.crypto.hpke import key_id_for
from segshuffle.private_files import make_private_folder, report_open

SEPARATOR = "~"
"""Between the campaign id and the key id in a key file's name (never in a campaign id)."""


class KeyStore:
    """Creates, stores and caches per-campaign private keys, each under its key id."""

    def __init__(self, directory: str | Path) -> None:
        """Keys in ``directory``, made private (0700, with any missing parent) if missing;
        an existing one that others may use is reported: its file names are the
        campaigns' ids."""
        self.directory = make_private_folder(directory)
        report_open([self.directory])
        self._cache: dict[tuple[str, str], X25519PrivateKey] = {}
        self._lock = threading.Lock()

    def key_path(self, campaign_id: str, key_id: str) -> Path:
        """Where the key ``key_id`` of a campaign is written."""
        return self.directory / f"{campaign_id}{SEPARATOR}{key_id}.pem"

    def legacy_path(self, campaign_id: str) -> Path:
        """Where deployments before key-id names kept a campaign's key."""
        return self.directory / f"{campaign_id}.pem"

    def path(self, campaign_id: str, key_id: str) -> Path:
        """The file holding the campaign's key ``key_id``: its own, else the legacy one."""
        path = self.key_path(campaign_id, key_id)
        if path.is_file():
            return path
        legacy = self.legacy_path(campaign_id)
        return legacy if legacy.is_file() else path

    def create(self, campaign_id: str) -> X25519PrivateKey:
        """A fresh key for a new campaign, written to its own file (never replacing one).

        The caller records the key's id in the campaign row; if that insert loses (the
        campaign exists), the file is an orphan nobody loads.
        """
        key = generate_private_key()
        save_private_key(self.key_path(campaign_id, key_id_for(key)), key)
        with self._lock:
            self._cache[(campaign_id, key_id_for(key))] = key
        return key

    def get(self, campaign_id: str, key_id: str) -> X25519PrivateKey:
        """The campaign's private key whose key id is ``key_id`` (the row's); raises
        ``OSError`` if no file holds it and ``ValueError`` if the file holds another."""
        slot = (campaign_id, key_id)
        with self._lock:
            key = self._cache.get(slot)
            if key is not None:
                return key
            key = load_private_key(self.path(campaign_id, key_id))
            if key_id_for(key) != key_id:
                raise ValueError(f"the key file of campaign {campaign_id!r} does not hold "
                                 f"key {key_id}")
            self._cache[slot] = key
            return key

    def writable(self) -> bool:
        return self.directory.is_dir() and self.directory.stat().st_mode & 0o200 != 0
