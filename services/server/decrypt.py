"""Opening a chunk of ciphertexts, in a process pool when it is large.

HPKE decryption is CPU-bound (one X25519 operation per message, about 60 us), so
a large chunk is split into slices that worker processes open in parallel.  The
worker function is pure: raw private key, ``info`` and ciphertexts in, one
:data:`Outcome` per ciphertext out.  Workers are started with ``forkserver`` (the
server process has threads; forking it is unsafe), and every one of them, the fork
server included, dies with the server however it dies (:mod:`.child_guard`).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from segshuffle.crypto import DecryptError, open_, private_key_from_bytes
from segshuffle.wire.plaintext import PlaintextError, decode_plaintext

from . import child_guard

Outcome = tuple[int, int, bytes] | str
"""(kind, value, nonce) of a well-formed plaintext, or the problem name of the failure
(``decrypt-failed`` or ``invalid-message``)."""


@functools.lru_cache(maxsize=64)
def _key(raw: bytes) -> X25519PrivateKey:
    return private_key_from_bytes(raw)


def open_chunk(private_key: bytes, info: bytes, ciphertexts: Sequence[bytes]) -> list[Outcome]:
    """Decrypt and strictly decode every ciphertext; never raises for a bad message."""
    key = _key(private_key)
    outcomes: list[Outcome] = []
    for ciphertext in ciphertexts:
        try:
            plaintext = decode_plaintext(open_(key, info, ciphertext))
        except DecryptError:
            outcomes.append("decrypt-failed")
        except PlaintextError:
            outcomes.append("invalid-message")
        else:
            outcomes.append((int(plaintext.kind), plaintext.value, plaintext.nonce))
    return outcomes


class Decryptor:
    """Opens chunks in-process when small, across a process pool when large.

    ``workers`` <= 1 disables the pool; ``threshold`` is the chunk size from which
    the pool is used (below it, shipping the work costs more than it saves).
    """

    def __init__(self, workers: int = 0, threshold: int = 2000) -> None:
        self.workers = workers if workers > 0 else (os.cpu_count() or 1)
        self.threshold = max(1, threshold)
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self.workers, mp_context=child_guard.fork_server_context(),
                    initializer=child_guard.watch_server, initargs=(os.getpid(),))
            return self._pool

    def open(self, private_key: bytes, info: bytes, ciphertexts: Sequence[bytes]
             ) -> list[Outcome]:
        if self.workers <= 1 or len(ciphertexts) < self.threshold:
            return open_chunk(private_key, info, ciphertexts)
        size = -(-len(ciphertexts) // self.workers)
        slices = [list(ciphertexts[i:i + size]) for i in range(0, len(ciphertexts), size)]
        executor = self._executor()
        try:
            futures = [executor.submit(open_chunk, private_key, info, part) for part in slices]
            outcomes: list[Outcome] = []
            for future in futures:
                outcomes.extend(future.result())
        except BrokenProcessPool:
            # A worker died (killed, out of memory, broken interpreter): drop the pool so
            # the next large chunk starts a fresh one, and open this chunk in-process.
            self._discard(executor)
            return open_chunk(private_key, info, ciphertexts)
        return outcomes

    def _discard(self, executor: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is executor:
                self._pool = None
        executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
