"""A closed stream in its release order, from one pass over its rows in key order.

The release order (:mod:`.permutation`) sorts a stream's messages by their tags
``t_i = AES-128(K_order, r_i)``.  Reading the rows in that order one lookup at a time
costs a random B-tree descent per message, several times the cost of reading the
table in key order.  This module reads it in key order once and sorts outside the
database, in bounded memory (an external distribution sort):

**Pass 1** (:meth:`ShuffledStream.build`).  The rows come in key order a page at a
time (:meth:`ShufflerStorage.sealed_rows`, keyset pages of :data:`PAGE_ROWS`).  Each
row is unsealed (:mod:`.vault`) and its tag computed (one AES call per page); it
belongs to bucket ``j = floor(t / 2^(128 - b))``, the top ``b`` bits of its tag, one
of ``2^b`` buckets.  Every tag in bucket ``j`` is below every tag in bucket ``j + 1``,
so the buckets in turn, each sorted by tag, are the stream sorted by tag: exactly the
release order, chunk for chunk (a resumed or a second forwarder sends byte-identical
chunks, as before).  The unsealed messages are buffered in key order, each page's
joined into one string, about :data:`BUFFER_BYTES` at a time; a full buffer is put
in bucket order by one stable sort of its bucket numbers (numpy's radix sort of
16-bit keys) and one gather of its messages (of rows of a byte matrix when they all
have one length, as a round's ciphertexts do), and goes to a spill file as one
*record* per bucket present, each sealed with AES-256-GCM under an ephemeral key
``E`` (nonce: the record's number).

Pass 1's Python work is a few operations per message, per page and per record, and a
buffer holds a fixed number of bytes, so its cost per message does not depend on the
stream's size.  (Distributing each page to the buckets' own buffers instead took a
Python step per bucket present in every page: ``2^b / PAGE_ROWS`` steps per message,
``b`` growing with the stream, so the cost per message grew with the round.)

**Pass 2** (:meth:`ShuffledStream.messages`).  Positions ``[start, stop)`` lie in the
buckets whose cumulative counts span them; a bucket is read back (its records opened,
its tags sorted) when first needed and kept while it is in use, at most
:data:`CACHED_BUCKETS` at once, so chunks asked for in order (the forwarder's window)
read each bucket once.

Cost per message: a row read in key order, one unseal, a slice of bulk AES over the
spill each way, and its share of two sorts (a buffer's counting sort by bucket, a
bucket's sort by tag), each over a number of messages that does not grow with the
round.  Memory: the bucket index (offsets and counts), pass 1's buffer (about
:data:`BUFFER_BYTES`) and at most :data:`CACHED_BUCKETS` buckets of about
:data:`BUCKET_MESSAGES` messages; never the round.

What is on disk: the spill file never has a name (it is unlinked when created), its
records are sealed under ``E``, which is drawn for this stream, kept only in this
object and dropped with it.  After the release (or a crash) the file's former blocks
are ciphertext under a key nobody holds, so no stored bit ties a row to its position.
While a release runs, whoever watches this process's writes sees the sizes of the
records: how many rows of each buffer (a range of row keys) fall in each bucket, never
which.  The shuffler's host is trusted while it runs (the README's threat
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
BUFFER_BYTES = 16 << 20
"""Pass 1 buffers about this many bytes of messages (and their tags) before writing
them as records: few records per bucket (each is a seal, a write and a read), bounded
memory (the buffer, and its copy in bucket order while it is written)."""
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


def _pack(tags: bytes, lengths: np.ndarray, ciphertexts: bytes | memoryview) -> bytes:
    """A record's plaintext: ``count || tags || lengths || ciphertexts`` (big-endian u32s;
    ``ciphertexts`` concatenated, of ``lengths``)."""
    return b"".join((_COUNT.pack(len(lengths)), tags, lengths.astype(">u4").tobytes(),
                     ciphertexts))


def in_order(joined: bytes, lengths: np.ndarray, order: np.ndarray
             ) -> tuple[memoryview, np.ndarray]:
    """The messages concatenated in ``joined`` (of ``lengths``) rearranged into ``order``
    (indices), concatenated, and their lengths in that order.

    Messages of one length (a stream's ciphertexts, in practice) are the rows of a byte
    matrix: one gather of rows, no Python step per message; else each is sliced."""
    length = int(lengths[0]) if len(lengths) else 0
    if length and bool(np.all(lengths == length)):
        rows = np.frombuffer(joined, dtype=np.uint8).reshape(-1, length)
        return memoryview(np.take(rows, order, axis=0)).cast("B"), lengths
    ends = np.cumsum(lengths)
    pieces = zip((ends - lengths)[order].tolist(), ends[order].tolist(), strict=True)
    return memoryview(b"".join([joined[a:b] for a, b in pieces])), lengths[order]


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


@dataclass
class _Buffer:
    """Pass 1's unsealed messages not yet written, in key order: per page, its tags and
    its messages each concatenated, and the messages' lengths."""

    tags: list[bytes] = field(default_factory=list)
    messages: list[bytes] = field(default_factory=list)
    lengths: list[np.ndarray] = field(default_factory=list)
    size: int = 0
    """Bytes of messages and tags held."""

    def add(self, tags: bytes, messages: list[bytes]) -> None:
        joined = b"".join(messages)
        self.tags.append(tags)
        self.messages.append(joined)
        self.lengths.append(np.fromiter(map(len, messages), dtype=np.int64,
                                        count=len(messages)))
        self.size += len(joined) + len(tags)

    def take(self) -> tuple[bytes, bytes, np.ndarray]:
        """The buffered tags, messages (each concatenated) and the messages' lengths;
        the buffer is then empty."""
        taken = (b"".join(self.tags), b"".join(self.messages),
                 np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64))
        self.tags, self.messages, self.lengths, self.size = [], [], [], 0
        return taken


class ShuffledStream:
    """One stream of a closed round, readable by release position (module docstring)."""

    def __init__(self, bits: int, directory: Path | None = None) -> None:
        self._bits = bits
        self._buckets = [_Bucket() for _ in range(1 << bits)]
        self._buffer = _Buffer()
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
            buffer = shuffled._buffer
            for page in keyset_pages(rows, page_rows or PAGE_ROWS):
                buffer.add(key.order_tags(b"".join([row_key for row_key, _ in page])),
                           key.open_rows(campaign_id, round_number, stream, page))
                if buffer.size >= BUFFER_BYTES:
                    shuffled._write_buffer()
            shuffled._write_buffer()
            shuffled._starts = np.concatenate(
                ([0], np.cumsum([b.count for b in shuffled._buckets], dtype=np.int64)))
        except BaseException:
            shuffled.close()
            raise
        return shuffled

    def _write_buffer(self) -> None:
        """Write pass 1's buffer as one record per bucket present in it, and empty it.

        One counting sort puts the buffer in bucket order (the order within a bucket is
        of no account: a bucket is sorted by tag when it is read back), then each
        bucket's run is a slice."""
        tags, joined, lengths = self._buffer.take()
        if not len(lengths):
            return
        buckets = buckets_of(tags, self._bits).astype(np.uint16)  # b <= 16: a radix sort
        order = np.argsort(buckets, kind="stable")
        tags = np.frombuffer(tags, dtype=f"V{ROW_KEY_BYTES}")[order].tobytes()
        ordered, lengths = in_order(joined, lengths, order)
        del joined
        counts = np.bincount(buckets, minlength=len(self._buckets))
        edges = np.concatenate(([0], np.cumsum(counts)))
        bounds = edges.tolist()
        offsets = np.concatenate(([0], np.cumsum(lengths)))[edges].tolist()
        for bucket in np.flatnonzero(counts).tolist():
            start, stop = bounds[bucket], bounds[bucket + 1]
            self._write_record(bucket, tags[start * ROW_KEY_BYTES:stop * ROW_KEY_BYTES],
                               lengths[start:stop], ordered[offsets[bucket]:offsets[bucket + 1]])

    def _write_record(self, bucket: int, tags: bytes, lengths: np.ndarray,
                      ciphertexts: memoryview) -> None:
        """Append one sealed record of ``bucket``'s messages (``ciphertexts`` concatenated,
        of ``lengths``, with their ``tags``)."""
        plaintext = _pack(tags, lengths, ciphertexts)
        number = self._records
        self._records += 1
        sealed = self._cipher.encrypt(number.to_bytes(12, "big"), plaintext,
                                      _AAD + bucket.to_bytes(4, "big"))
        offset = self._spill.seek(0, os.SEEK_END)
        self._spill.write(sealed)
        entry = self._buckets[bucket]
        entry.records.append((number, offset, len(sealed)))
        entry.count += len(lengths)

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
