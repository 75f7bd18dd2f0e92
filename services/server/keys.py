"""The campaigns' HPKE private keys: one 0600 PEM file per campaign in the key directory.

Keys are kept apart from the database so the database can be backed up or
inspected without the secrets (and the key directory mounted as a secret volume).
A key file is written once, atomically, before the campaign row that uses it; a
crash between the two leaves an unused file, never a campaign without its key.
"""

from __future__ import annotations

import threading
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from segshuffle.crypto import generate_private_key, load_private_key, save_private_key


class KeyStore:
    """Creates, stores and caches per-campaign private keys."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._cache: dict[str, X25519PrivateKey] = {}
        self._lock = threading.Lock()

    def path(self, campaign_id: str) -> Path:
        return self.directory / f"{campaign_id}.pem"

    def create(self, campaign_id: str) -> X25519PrivateKey:
        """A fresh key for a new campaign, written to disk; refuses to replace a used one.

        A leftover file of a campaign that was never created (crash between the key
        and the row) is replaced: the caller only calls this for an unknown id.
        """
        key = generate_private_key()
        path = self.path(campaign_id)
        with self._lock:
            if path.exists():
                path.unlink()
            save_private_key(path, key)
            self._cache[campaign_id] = key
        return key

    def get(self, campaign_id: str) -> X25519PrivateKey:
        with self._lock:
            key = self._cache.get(campaign_id)
            if key is None:
                key = load_private_key(self.path(campaign_id))
                self._cache[campaign_id] = key
            return key

    def writable(self) -> bool:
        return self.directory.is_dir() and self.directory.stat().st_mode & 0o200 != 0
