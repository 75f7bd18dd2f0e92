"""Round keys: the shuffler's data at rest is readable only while its round is open.

Every (campaign, round) gets a fresh 32-byte root key K from the operating system's
CSPRNG, written to its own 0600 file in the key directory and held in memory.  Two
keys are derived from it with HKDF-SHA256 (RFC 5869, no salt):

- K_seal = HKDF(K, info="segshuffle/v1/shuffler/seal", 32 bytes): every ciphertext a
  user submits is stored as ``nonce || AES-256-GCM(K_seal, nonce, c, aad)`` with a
  random 96-bit nonce and ``aad`` binding campaign, round, stream and the row's key,
  so the database never holds the bytes the server later receives;
- K_order = HKDF(K, info="segshuffle/v1/shuffler/order", 16 bytes): the release order
  (:mod:`.permutation`) sorts the rows by AES-128(K_order, row key), a secret
  permutation of 128-bit blocks, so no order is ever written to disk.

After the server has acknowledged the round, :meth:`RoundKeys.destroy` overwrites and
removes the key file and forgets the key (crypto-shredding): whatever copies of the
database, its WAL or its backups exist, the stored rows can no longer be matched to
the released batch.  The directory is meant for memory-backed storage (``tmpfs``):
on such a mount the key file survives a process crash but never reaches a disk.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from segshuffle.private_files import make_private_folder, report_open

from .storage_api import StoredMessage

ROOT_KEY_BYTES = 32
NONCE_BYTES = 12
ROW_KEY_BYTES = 16
"""Row keys are 128-bit, one AES block each (:func:`order_tags`)."""
HMAC_BLOCK_BYTES = 64
"""SHA-256's block size, the width of HMAC's pads."""
_AAD_DOMAIN = b"segshuffle/v1/shuffler/at-rest\x00"


class RoundKeyMissingError(RuntimeError):
    """The key of a round is gone: its stored rows cannot be read (or were shredded)."""


def _derive(root: bytes, label: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=label).derive(root)


def _hmac_pad_states(key: bytes) -> tuple[Any, Any]:
    """SHA-256 states after absorbing ``key ^ ipad`` and ``key ^ opad`` (RFC 2104).

    HMAC-SHA256(K, m) = H((K ^ opad) || H((K ^ ipad) || m)) with K zero-padded to the
    64-byte block: starting each message from copies of these two states computes
    exactly that, without re-keying per message (``hmac.new`` or ``hmac.digest`` redo
    both pad blocks on every call, which made a submission's row keys twice as slow)."""
    if len(key) > HMAC_BLOCK_BYTES:
        raise ValueError("a key longer than the block would be hashed first")
    block = key.ljust(HMAC_BLOCK_BYTES, b"\x00")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in block)),
            hashlib.sha256(bytes(b ^ 0x5C for b in block)))


class RoundKey:
    """The derived keys of one round: sealing rows and ordering them."""

    def __init__(self, root: bytes) -> None:
        if len(root) != ROOT_KEY_BYTES:
            raise ValueError(f"a round key has {ROOT_KEY_BYTES} bytes, got {len(root)}")
        self._seal = AESGCM(_derive(root, b"segshuffle/v1/shuffler/seal", 32))
        self._order = _derive(root, b"segshuffle/v1/shuffler/order", 16)
        self._rows_inner, self._rows_outer = _hmac_pad_states(
            _derive(root, b"segshuffle/v1/shuffler/row", 32))

    @staticmethod
    def _aad_prefix(campaign_id: str, round_number: int, stream: str) -> bytes:
        """The associated data of a stored row up to its row key, which ends it:
        ``domain || campaign || 0 || round || 0 || stream || 0``."""
        return (_AAD_DOMAIN + campaign_id.encode() + b"\x00" + str(round_number).encode()
                + b"\x00" + stream.encode() + b"\x00")

    def seal(self, campaign_id: str, round_number: int, stream: str, row_key: bytes,
             ciphertext: bytes) -> bytes:
        """The stored form of one submitted ciphertext."""
        (sealed,) = self.seal_many(campaign_id, round_number, [(stream, row_key, ciphertext)])
        return sealed

    def seal_many(self, campaign_id: str, round_number: int,
                  messages: Sequence[tuple[str, bytes, bytes]]) -> list[bytes]:
        """The stored forms of (stream, row key, ciphertext) ``messages``: each
        ``nonce || AES-256-GCM(K_seal, nonce, ciphertext, aad)`` under its own random
        96-bit nonce, the nonces of all of them drawn in one call to the OS generator
        (and the associated data's prefix built once per stream)."""
        nonces = secrets.token_bytes(NONCE_BYTES * len(messages))
        encrypt = self._seal.encrypt
        prefixes: dict[str, bytes] = {}
        sealed = []
        for number, (stream, row_key, ciphertext) in enumerate(messages):
            prefix = prefixes.get(stream)
            if prefix is None:
                prefix = prefixes[stream] = self._aad_prefix(campaign_id, round_number, stream)
            nonce = nonces[number * NONCE_BYTES:(number + 1) * NONCE_BYTES]
            sealed.append(nonce + encrypt(nonce, ciphertext, prefix + row_key))
        return sealed

    def open(self, campaign_id: str, round_number: int, stream: str, row_key: bytes,
             stored: bytes) -> bytes:
        """The submitted ciphertext back from its stored form (raises on tampering)."""
        (opened,) = self.open_many(campaign_id, round_number, stream, [row_key], [stored])
        return opened

    def open_many(self, campaign_id: str, round_number: int, stream: str,
                  row_keys: Sequence[bytes], stored: Sequence[bytes]) -> list[bytes]:
        """:meth:`open` of many rows of one stream (a release chunk): the associated
        data's prefix is built once (raises on the first tampered row)."""
        return self.open_rows(campaign_id, round_number, stream,
                              list(zip(row_keys, stored, strict=True)))

    def open_rows(self, campaign_id: str, round_number: int, stream: str,
                  rows: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        """:meth:`open` of (row key, stored) pairs of one stream, as the storage reads
        them: the associated data's prefix is built once (raises on the first tampered
        row)."""
        prefix = self._aad_prefix(campaign_id, round_number, stream)
        decrypt = self._seal.decrypt
        return [decrypt(stored[:NONCE_BYTES], stored[NONCE_BYTES:], prefix + key)
                for key, stored in rows]

    def row_keys(self, ciphertexts: Sequence[bytes]) -> list[bytes]:
        """The row key of each submitted ciphertext: HMAC-SHA256(K_row, ciphertext) cut to
        128 bits.

        Keyed by the round's secret, so a row key tells nobody without the round key
        anything about its ciphertext (to them it is as random as a drawn one), and it
        is gone, with the key, once the round is released.  Deterministic, so a
        ciphertext stored twice in one stream of a round has one row key twice: the
        table's primary key refuses the replay (another token resending a ciphertext
        it saw would otherwise raise the round's participant count and threshold).
        """
        inner, outer = self._rows_inner, self._rows_outer
        keys = []
        for ciphertext in ciphertexts:
            digest = inner.copy()
            digest.update(ciphertext)
            tag = outer.copy()
            tag.update(digest.digest())
            keys.append(tag.digest()[:ROW_KEY_BYTES])
        return keys

    def order_tags(self, row_keys: bytes) -> bytes:
        """AES-128(K_order, k) of each 16-byte row key in ``row_keys`` (concatenated).

        AES under a secret key is a pseudorandom permutation of 128-bit blocks, so the
        tags of distinct row keys are distinct and, to anyone without K_order,
        indistinguishable from uniformly random ones.
        """
        if len(row_keys) % ROW_KEY_BYTES:
            raise ValueError("row keys are concatenated 16-byte blocks")
        encryptor = Cipher(algorithms.AES(self._order), modes.ECB()).encryptor()
        return encryptor.update(row_keys) + encryptor.finalize()


def seal_submission(key: RoundKey, campaign_id: str, round_number: int,
                    streams: Mapping[str, Sequence[bytes]]) -> list[StoredMessage]:
    """One user's messages as stored: each under its keyed row key
    (:meth:`RoundKey.row_keys`), sealed (:meth:`RoundKey.seal_many`); the nonces of all
    of them are drawn in one call to the OS generator."""
    flat = [(stream, ciphertext) for stream, ciphertexts in streams.items()
            for ciphertext in ciphertexts]
    row_keys = key.row_keys([ciphertext for _, ciphertext in flat])
    sealed = key.seal_many(campaign_id, round_number,
                           [(stream, row_key, ciphertext)
                            for (stream, ciphertext), row_key in zip(flat, row_keys,
                                                                     strict=True)])
    return [StoredMessage(stream, row_key, stored)
            for (stream, _), row_key, stored in zip(flat, row_keys, sealed, strict=True)]


KEY_RECHECK_SECONDS = 1.0
"""How often at most a cached round key's file is looked at (is the round over?)."""


@dataclass
class _CachedKey:
    """A round key in memory, its file, and when the file was last seen to exist."""

    key: RoundKey
    path: Path
    checked: float


class RoundKeys:
    """The key files of the rounds that are open or being released, and their cache.

    Several shuffler replicas may share the directory (docs/architecture.md,
    "Replicas"): a round's key file is created by exactly one of them (written to a
    temporary file, then linked to its name, which fails if the name exists), and a
    replica that loses that race reads the winner's file, which is complete by then.
    So one round never has two keys.  A cached key is used only while its file
    exists: once another replica has destroyed it (the round is over), this process
    forgets it too, at the first use after at most ``recheck_seconds`` (the file is
    looked at no more often than that, not on every submission; a submission sealed
    meanwhile with the old key is refused by storage, since the round is closed).
    """

    def __init__(self, directory: str | Path, *,
                 recheck_seconds: float = KEY_RECHECK_SECONDS) -> None:
        if recheck_seconds < 0:
            raise ValueError(f"recheck_seconds must not be negative, got {recheck_seconds}")
        self.directory = make_private_folder(directory)  # 0700, any missing parent too
        report_open([self.directory])
        self.recheck_seconds = recheck_seconds
        self._keys: dict[tuple[str, int], _CachedKey] = {}
        self._lock = threading.Lock()

    def _path(self, campaign_id: str, round_number: int) -> Path:
        name = hashlib.sha256(f"{campaign_id}\x00{round_number}".encode()).hexdigest()[:32]
        return self.directory / f"round-{name}.key"

    def missing(self, rounds: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """The ``rounds`` whose key file is gone (their stored rows cannot be read)."""
        return [(c, r) for c, r in rounds if not self._path(c, r).exists()]

    def writable(self) -> bool:
        """Whether new key files can be created (readiness)."""
        return self.directory.is_dir() and os.access(self.directory, os.W_OK | os.X_OK)

    def get(self, campaign_id: str, round_number: int, *, create: bool = False) -> RoundKey:
        """The round's key, loaded from its file or (``create``) made on first use."""
        slot = (campaign_id, round_number)
        with self._lock:
            cached = self._keys.get(slot)
            if cached is not None:
                now = time.monotonic()
                if now - cached.checked < self.recheck_seconds:
                    return cached.key
                if cached.path.exists():
                    cached.checked = now
                    return cached.key
                del self._keys[slot]  # destroyed by another replica: the round is over
            path = self._path(campaign_id, round_number)
            try:
                root = path.read_bytes()
            except FileNotFoundError:
                if not create:
                    raise RoundKeyMissingError(
                        f"the key of campaign {campaign_id!r} round {round_number} is gone"
                    ) from None
                root = self._write_new(path)
            key = RoundKey(root)
            self._keys[slot] = _CachedKey(key, path, time.monotonic())
            return key

    @staticmethod
    def _write_new(path: Path) -> bytes:
        """A fresh root key linked to ``path``, or the key another process linked first."""
        root = secrets.token_bytes(ROOT_KEY_BYTES)
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                os.write(descriptor, root)
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            try:
                os.link(temporary, path)  # atomic, and never replaces an existing key
            except FileExistsError:
                return path.read_bytes()  # another replica won: its file is complete
        finally:
            temporary.unlink(missing_ok=True)
        _sync_directory(path.parent)
        return root

    def destroy(self, campaign_id: str, round_number: int) -> None:
        """Forget the round's key and overwrite and remove its file (idempotent).

        Only for a round storage has finished (released, failed or discarded): no
        replica can add to it any more, and another replica still forwarding it finds
        it finished when it next asks.
        """
        path = self._path(campaign_id, round_number)
        with self._lock:
            self._keys.pop((campaign_id, round_number), None)
            _shred(path)

    def sweep_finished(self, finished: Iterable[tuple[str, int]]) -> int:
        """Destroy the key files left of the ``finished`` rounds; returns how many.

        Run at start with the rounds storage says are over: a replica that crashed
        between finishing a round in storage and destroying its key left the file.
        Only files of finished rounds are touched, never one another replica may be
        creating or using for an open round; a key made for a submission that never
        committed is the round's key all the same and goes when the round ends.
        """
        destroyed = 0
        for campaign_id, round_number in finished:
            path = self._path(campaign_id, round_number)
            if path.exists():
                self.destroy(campaign_id, round_number)
                destroyed += 1
        return destroyed


def _shred(path: Path) -> None:
    """Overwrite a key file with zeros, remove it, and make the removal durable."""
    try:
        descriptor = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return
    try:
        os.write(descriptor, b"\x00" * ROOT_KEY_BYTES)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    path.unlink(missing_ok=True)
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """Make a created or removed directory entry durable."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
