"""A closed stream in its release order, from one pass over its rows in key order.

The release order (:mod:`.permutation`) sorts a stream's messages by their tags
``t_i = AES-128(K_order, r_i)``.  Reading the rows in that order one lookup at a time
costs a random B-tree descent per message, several times the cost of reading the
table in key order.  This module reads it in key order once and sorts outside the
database, in bounded memory (an external distribution sort):

**Pass 1** (:meth:`ShuffledStream.build`).  The rows come in key order a page at a
time (:meth:`ShufflerStorage.sealed_rows`, keyset pages of :data:`PAGE_ROWS`).  Each
row is unsealed (:mod:`.vault`), its tag computed (one AES call per page), and it is
put in bucket ``j = floor(t / 2^(128 - b))``, the top ``b`` bits of its tag, one of
``2^b`` buckets.  Every tag in bucket ``j`` is below every tag in bucket ``j + 1``, so
the buckets in turn, each sorted by tag, are the stream sorted by tag: exactly the
release order, chunk for chunk (a resumed or a second forwarder sends byte-identical
chunks, as before).  Each bucket's messages are buffered and go to a spill file
as *records* of at least tens of KiB, each sealed with AES-256-GCM under an ephemeral
key ``E`` (nonce: the record's number).

**Pass 2** (:meth:`ShuffledStream.messages`).  Positions ``[start, stop)`` lie in the
buckets whose cumulative counts span them; a bucket is read back (its records opened,
its tags sorted) when first needed and kept while it is in use, at most
:data:`CACHED_BUCKETS` at once, so chunks asked for in order (the forwarder's window)
read each bucket once.

Cost per message: a row read in key order, one unseal, a slice of bulk AES over the
spill each way, and its share of a sort.  Memory: the bucket index (offsets and
counts), pass 1's buffers (about :data:`BUFFER_BYTES`) and at most
:data:`CACHED_BUCKETS` buckets of about :data:`BUCKET_MESSAGES` messages; never the
round.

What is on disk: the spill file never has a name (it is unlinked when created), its
records are sealed under ``E``, which is drawn for this stream, kept only in this
object and dropped with it.  After the release (or a crash) the file's former blocks
are ciphertext under a key nobody holds, so no stored bit ties a row to its position.
While a release runs, whoever watches this process's writes sees the sizes of the
records: when each bucket's buffer filled as the rows went by in key order, never
which rows it holds.  The shuffler's host is trusted while it runs (the README's threat
model); the guarantee is about what is left afterwards.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .permutation import tag_order
from .vault import ROW_KEY_BYTES, RoundKey

PAGE_ROWS = 4096
"""Rows per keyset page of pass 1."""
BUCKET_MESSAGES = 32768
"""The mean bucket size aimed at: ``2^b`` is the least power of two with ``n / 2^b``
at most this (a bucket of ciphertexts of a few hundred bytes is a few MiB)."""
MAX_BUCKET_BITS = 16
"""At most 65,536 buckets (the index stays small for any round)."""
CACHED_BUCKETS = 3
"""Buckets held in memory at once: the one being sent, the next, and one more for
chunks that straddle a boundary while others are in flight."""
BUFFER_BYTES = 32 << 20
"""Pass 1 buffers about this much of the buckets' messages before writing them: few
records per bucket (each is a seal, a write and a read), bounded memory."""
MIN_RECORD_BYTES = 16 << 10
_SPILL_KEY_BYTES = 32
_COUNT = struct.Struct(">I")
_AAD = b"segshuffle/v1/shuffler/spill\x00"

SealedRows = Callable[[bytes, int], Sequence[tuple[bytes, bytes]]]
"""``(after, limit)`` to at most ``limit`` (row key, sealed) pairs with keys above
``after``, in key order: the storage's :meth:`sealed_rows` of one stream."""


def keyset_pages(rows: SealedRows, page_rows: int) -> Iterator[Sequence[tuple[bytes, bytes]]]:
    """Every page of ``rows`` in key order, each read after the last key of the one
    before, until an empty page."""
    after = b""
    while page := rows(after, page_rows):
        yield page
        after = page[-1][0]


class SpillCorruptedError(RuntimeError):
    """A spill record did not open: the file was changed behind the release."""


def bucket_bits(messages: int) -> int:
    """``b`` for ``messages`` messages: the least with ``messages / 2^b <= BUCKET_MESSAGES``."""
    if messages <= BUCKET_MESSAGES:
        return 0
    return min(MAX_BUCKET_BITS, math.ceil(math.log2(messages / BUCKET_MESSAGES)))


def buckets_of(tags: bytes, bits: int) -> np.ndarray:
    """The bucket of each 16-byte tag in ``tags``: its top ``bits`` bits."""
    high = np.frombuffer(tags, dtype=">u8")[0::2]
    if bits == 0:
        return np.zeros(len(high), dtype=np.int64)
    return (high >> np.uint64(64 - bits)).astype(np.int64)


def _pack(tags: bytes, ciphertexts: Sequence[bytes]) -> bytes:
    """A record's plaintext: ``count || tags || lengths || ciphertexts`` (big-endian u32s)."""
    lengths = np.array(list(map(len, ciphertexts)), dtype=">u4")
    return b"".join((_COUNT.pack(len(ciphertexts)), tags, lengths.tobytes(), *ciphertexts))


def _unpack(record: bytes) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The tags of one record's plaintext and where each ciphertext starts and ends in it
    (inverse of :func:`_pack`)."""
    (count,) = _COUNT.unpack_from(record)
    tags_end = _COUNT.size + ROW_KEY_BYTES * count
    lengths_end = tags_end + 4 * count
    if lengths_end > len(record):
        raise SpillCorruptedError("a spill record is shorter than its count")
    lengths = np.frombuffer(record, dtype=">u4", count=count, offset=tags_end)
    ends = lengths_end + np.cumsum(lengths, dtype=np.int64)
    if (ends[-1] if count else lengths_end) != len(record):
        raise SpillCorruptedError("a spill record's lengths do not add up")
    return record[_COUNT.size:tags_end], ends - lengths, ends


@dataclass(frozen=True)
class _Loaded:
    """A bucket read back: its records' plaintexts joined, and where its messages lie in
    them, in release order."""

    blob: bytes
    starts: list[int]
    ends: list[int]

    def messages(self, start: int, stop: int) -> list[bytes]:
        blob = self.blob
        return [blob[a:b] for a, b in zip(self.starts[start:stop], self.ends[start:stop],
                                          strict=True)]


@dataclass
class _Bucket:
    count: int = 0
    """Messages written to the spill."""
    records: list[tuple[int, int, int]] = field(default_factory=list)
    """(record number, file offset, sealed length) of each of its records."""
    buffered: list[bytes] = field(default_factory=list)
    buffered_tags: list[bytes] = field(default_factory=list)
    buffered_bytes: int = 0
    """Messages of pass 1 not yet written, with their tags, and their size."""


class ShuffledStream:
    """One stream of a closed round, readable by release position (module docstring)."""

    def __init__(self, bits: int, directory: Path | None = None) -> None:
        self._bits = bits
        self._buckets = [_Bucket() for _ in range(1 << bits)]
        self._flush_bytes = max(MIN_RECORD_BYTES, BUFFER_BYTES >> bits)
        """A bucket's buffer becomes a record at this size: all buffers together stay
        within about :data:`BUFFER_BYTES`."""
        self._spill = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 (closed in close)
        self._cipher = AESGCM(os.urandom(_SPILL_KEY_BYTES))
        self._records = 0
        self._starts: np.ndarray = np.zeros(1, dtype=np.int64)
        self._cache: OrderedDict[int, _Loaded] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def build(cls, key: RoundKey, campaign_id: str, round_number: int, stream: str,
              rows: SealedRows, expected: int, directory: Path | None = None,
              page_rows: int | None = None) -> ShuffledStream:
        """Pass 1 over the stream's rows (``rows``, pages of ``page_rows``, by default
        :data:`PAGE_ROWS`); ``expected`` sizes the buckets."""
        shuffled = cls(bucket_bits(expected), directory)
        try:
            for page in keyset_pages(rows, page_rows or PAGE_ROWS):
                tags = key.order_tags(b"".join([row_key for row_key, _ in page]))
                buckets = buckets_of(tags, shuffled._bits)
                order = np.argsort(buckets, kind="stable")
                opened = key.open_rows(campaign_id, round_number, stream,
                                       [page[i] for i in order.tolist()])
                shuffled._add_page(
                    np.frombuffer(tags, dtype=f"V{ROW_KEY_BYTES}")[order].tobytes(),
                    buckets[order], opened)
            for bucket in range(len(shuffled._buckets)):
                shuffled._flush(bucket)
            shuffled._starts = np.concatenate(
                ([0], np.cumsum([b.count for b in shuffled._buckets], dtype=np.int64)))
        except BaseException:
            shuffled.close()
            raise
        return shuffled

    def _add_page(self, tags: bytes, buckets: np.ndarray, opened: list[bytes]) -> None:
        """Put one page's messages, ordered by bucket (``buckets`` ascending, with their
        ``tags``), in their buckets' buffers, a slice per bucket; a buffer that has
        reached :attr:`_flush_bytes` becomes a spill record."""
        bounds = np.searchsorted(buckets, np.arange(len(self._buckets) + 1)).tolist()
        for bucket in np.unique(buckets).tolist():
            start, stop = bounds[bucket], bounds[bucket + 1]
            entry = self._buckets[bucket]
            entry.buffered.extend(opened[start:stop])
            entry.buffered_tags.append(tags[start * ROW_KEY_BYTES:stop * ROW_KEY_BYTES])
            entry.buffered_bytes += sum(map(len, opened[start:stop])) + (
                stop - start) * ROW_KEY_BYTES
            if entry.buffered_bytes >= self._flush_bytes:
                self._flush(bucket)

    def _flush(self, bucket: int) -> None:
        """Write a bucket's buffered messages as one sealed record."""
        entry = self._buckets[bucket]
        if not entry.buffered:
            return
        plaintext = _pack(b"".join(entry.buffered_tags), entry.buffered)
        number = self._records
        self._records += 1
        sealed = self._cipher.encrypt(number.to_bytes(12, "big"), plaintext,
                                      _AAD + bucket.to_bytes(4, "big"))
        offset = self._spill.seek(0, os.SEEK_END)
        self._spill.write(sealed)
        entry.records.append((number, offset, len(sealed)))
        entry.count += len(entry.buffered)
        entry.buffered, entry.buffered_tags, entry.buffered_bytes = [], [], 0

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _load(self, bucket: int) -> _Loaded:
        """One bucket read back, its messages in release order (ascending tag)."""
        plaintexts: list[bytes] = []
        tags: list[bytes] = []
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        base = 0
        self._spill.flush()
        descriptor = self._spill.fileno()
        for number, offset, length in self._buckets[bucket].records:
            sealed = os.pread(descriptor, length, offset)
            try:
                plaintext = self._cipher.decrypt(number.to_bytes(12, "big"), sealed,
                                                 _AAD + bucket.to_bytes(4, "big"))
            except Exception as error:  # InvalidTag, or a short read
                raise SpillCorruptedError(f"spill record {number} did not open") from error
            record_tags, record_starts, record_ends = _unpack(plaintext)
            plaintexts.append(plaintext)
            tags.append(record_tags)
            starts.append(record_starts + base)
            ends.append(record_ends + base)
            base += len(plaintext)
        if not plaintexts:
            return _Loaded(b"", [], [])
        order = tag_order(b"".join(tags))
        return _Loaded(b"".join(plaintexts), np.concatenate(starts)[order].tolist(),
                       np.concatenate(ends)[order].tolist())

    def _bucket(self, bucket: int) -> _Loaded:
        cached = self._cache.get(bucket)
        if cached is None:
            cached = self._load(bucket)
            self._cache[bucket] = cached
            while len(self._cache) > CACHED_BUCKETS:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(bucket)
        return cached

    def messages(self, start: int, stop: int) -> list[bytes]:
        """The unsealed ciphertexts at release positions ``start`` to ``stop - 1``."""
        start, stop = max(0, start), min(stop, len(self))
        found: list[bytes] = []
        if start >= stop:
            return found
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        with self._lock:
            bucket = first
            while len(found) < stop - start:
                begin = int(self._starts[bucket])
                found.extend(self._bucket(bucket).messages(max(start, begin) - begin,
                                                           stop - begin))
                bucket += 1
        return found

    def close(self) -> None:
        """Drop the spill file and the key that reads it."""
        with self._lock:
            self._cache.clear()
            self._spill.close()
