"""A release reads its stream by key ranges and sorts it in a sealed spill
(services/shuffler/shuffled_stream.py): the order is the defined one, chunk for chunk,
the table is never read one row at a time, and the spill holds nothing readable."""

from __future__ import annotations

import bisect
import hashlib
import os
import secrets
import sys
from pathlib import Path

import numpy as np
import pytest

from segshuffle.services.shuffler import shuffled_stream
from segshuffle.services.shuffler.enrollment import token_hash
from segshuffle.services.shuffler.permutation import release_order
from segshuffle.services.shuffler.release import Releaser
from segshuffle.services.shuffler.shuffled_stream import (
    ShuffledStream,
    SpillCorruptedError,
    bucket_bits,
)
from segshuffle.services.shuffler.storage import Storage
from segshuffle.services.shuffler.vault import RoundKey, RoundKeys, seal_submission

CAMPAIGN = "c1"
ROUND = 2


def _ciphertext(index: int, uniform: bool = False) -> bytes:
    """A distinct ciphertext of varying length (lengths travel through the spill), or of
    one length for every index (as a stream's ciphertexts are)."""
    return index.to_bytes(4, "big") + secrets.token_bytes(60 if uniform else 40 + index % 37)


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Storage, RoundKeys, list[bytes]]:
    """A closed round 2 of 1,203 data messages (and other rounds' rows beside it)."""
    return _filled(tmp_path)


def _filled(tmp_path: Path, uniform: bool = False) -> tuple[Storage, RoundKeys, list[bytes]]:
    storage = Storage(tmp_path / "shuffler.sqlite3")
    keys = RoundKeys(tmp_path / "keys")
    key = keys.get(CAMPAIGN, ROUND, create=True)
    sent: list[bytes] = []
    for user in range(0, 1203, 3):
        data = [_ciphertext(i, uniform) for i in range(user, user + 3)]
        sent.extend(data)
        storage.submit(CAMPAIGN, ROUND, token_hash(f"u{user}"), seal_submission(
            key, CAMPAIGN, ROUND, {"levels": [_ciphertext(user)], "data": data}))
    other = keys.get(CAMPAIGN, 1, create=True)
    storage.submit(CAMPAIGN, 1, token_hash("other"),
                   seal_submission(other, CAMPAIGN, 1, {"data": [_ciphertext(9)]}))
    storage.close_round(CAMPAIGN, ROUND, minimum=1, batch_id="b", chunk_size=100,
                        streams=["levels", "data"])
    return storage, keys, sent


def _expected(storage: Storage, key: RoundKey, stream: str) -> list[bytes]:
    """The stream in the defined release order (permutation.release_order), directly."""
    rows = storage.sealed_rows(CAMPAIGN, ROUND, stream, limit=10**6)
    keys = [row_key for row_key, _ in rows]
    opened = key.open_many(CAMPAIGN, ROUND, stream, keys, [sealed for _, sealed in rows])
    return [opened[i] for i in release_order(key, b"".join(keys)).tolist()]


def _build(storage: Storage, key: RoundKey, bits_for: int, directory: Path | None = None,
           page_rows: int = 100) -> ShuffledStream:
    def rows(after: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        return storage.sealed_rows(CAMPAIGN, ROUND, "data", after=after, limit=limit)
    return ShuffledStream.build(key, CAMPAIGN, ROUND, "data", rows, bits_for, directory,
                                page_rows=page_rows)


@pytest.mark.parametrize(("size_hint", "buffer_bytes", "uniform"), [
    (1, shuffled_stream.BUFFER_BYTES, False), (40_000, shuffled_stream.BUFFER_BYTES, False),
    (600_000, shuffled_stream.BUFFER_BYTES, False), (1, 3000, False), (600_000, 3000, False),
    (1, shuffled_stream.BUFFER_BYTES, True), (600_000, 3000, True)])
def test_the_buckets_give_the_defined_order_chunk_for_chunk(
        tmp_path: Path, size_hint: int, buffer_bytes: int, uniform: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One bucket, two, and thirty-two (bucket sizes of 1,203 down to a few dozen, some
    chunks straddling several buckets), from one buffer of pass 1 or from many (each
    bucket then in several records), messages of varying lengths or of one: the same
    order as sorting all tags at once."""
    monkeypatch.setattr(shuffled_stream, "BUFFER_BYTES", buffer_bytes)
    storage, keys, sent = _filled(tmp_path, uniform)
    key = keys.get(CAMPAIGN, ROUND)
    shuffled = _build(storage, key, size_hint)
    expected = _expected(storage, key, "data")
    assert sorted(expected) == sorted(sent) and len(shuffled) == len(sent)
    for chunk in (1, 77, 500, 5000):
        starts = list(range(0, len(sent), chunk))
        got = {start: shuffled.messages(start, start + chunk) for start in starts[::-1]}
        assert [m for start in starts for m in got[start]] == expected
    assert shuffled.messages(len(sent), len(sent) + 5) == []
    records = sum(len(bucket.records) for bucket in shuffled._buckets)
    assert (records > len(shuffled._buckets)) == (buffer_bytes == 3000)
    shuffled.close()


def test_bucket_bits_keep_buckets_near_their_target() -> None:
    target = shuffled_stream.BUCKET_MESSAGES
    assert bucket_bits(0) == bucket_bits(target) == 0
    assert bucket_bits(target + 1) == 1
    assert bucket_bits(5_000_000) == 8  # 153 buckets' worth: 256 of 19,531
    assert bucket_bits(10**12) == shuffled_stream.MAX_BUCKET_BITS


def test_a_release_reads_its_stream_by_key_ranges_only(
        filled: tuple[Storage, RoundKeys, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read of the table during a release is a keyset page (``row_key > ?``), a
    page of PAGE_ROWS rows at a time: no statement asks for particular row keys.  (The
    release used to look up each chunk's keys, several times the CPU of reading the
    table in key order: 36 of 50 CPU-s at 1M users.)"""
    storage, keys, sent = filled
    monkeypatch.setattr(shuffled_stream, "PAGE_ROWS", 256)
    releaser = Releaser(storage, None, keys, chunk_size=100)  # type: ignore[arg-type]
    record = storage.round_record(CAMPAIGN, ROUND)
    assert record is not None
    statements: list[str] = []
    storage._db.set_trace_callback(statements.append)
    try:
        released = [m for index in range(record.chunk_count("data"))
                    for m in releaser.chunk(record, "data", index)]
    finally:
        storage._db.set_trace_callback(None)
    assert released == _expected(storage, keys.get(CAMPAIGN, ROUND), "data")
    reads = [s for s in statements if "FROM pending" in s]
    assert len(reads) == -(-len(sent) // 256) + 1, reads[:3]  # the last page is empty
    assert all("row_key >" in s and "row_key IN" not in s and "row_key =" not in s
               for s in reads)


def test_the_spill_is_unnamed_and_holds_no_ciphertext(
        filled: tuple[Storage, RoundKeys, list[bytes]], tmp_path: Path) -> None:
    """Nothing in the spill directory has a name, and the spill file's bytes contain none
    of the messages (nor their 16-byte prefixes): they are sealed under a key that only
    the stream object holds."""
    storage, keys, sent = filled
    spill = tmp_path / "spill"
    spill.mkdir()
    shuffled = _build(storage, keys.get(CAMPAIGN, ROUND), 600_000, spill)
    assert os.listdir(spill) == []
    contents = os.pread(shuffled._spill.fileno(), 10**8, 0)
    assert len(contents) > sum(map(len, sent))
    assert not any(message[:16] in contents for message in sent)
    shuffled.messages(0, 10)
    shuffled.close()
    assert os.listdir(spill) == []


def test_a_changed_spill_record_is_refused(
        filled: tuple[Storage, RoundKeys, list[bytes]]) -> None:
    storage, keys, _ = filled
    shuffled = _build(storage, keys.get(CAMPAIGN, ROUND), 1)
    descriptor = shuffled._spill.fileno()
    shuffled._spill.flush()
    first = os.pread(descriptor, 1, 40)
    os.pwrite(descriptor, bytes([first[0] ^ 1]), 40)
    with pytest.raises(SpillCorruptedError):
        shuffled.messages(0, 10)
    shuffled.close()


def test_at_most_a_few_buckets_are_held(
        filled: tuple[Storage, RoundKeys, list[bytes]]) -> None:
    storage, keys, sent = filled
    shuffled = _build(storage, keys.get(CAMPAIGN, ROUND), 600_000)
    for start in range(0, len(sent), 50):
        shuffled.messages(start, start + 50)
        assert len(shuffled._cache) <= shuffled_stream.CACHED_BUCKETS
    assert np.all(np.diff(shuffled._starts) >= 0) and shuffled._starts[-1] == len(sent)
    shuffled.close()


def _calls_per_message(messages: int, page_rows: int) -> float:
    """Python and C function calls (``sys.setprofile`` events) per message of putting a
    stream of ``messages`` in its release order and reading every message back, chunks of
    100: the interpreter's work, counted, not timed."""
    key = RoundKey(bytes(range(32)))
    row_keys = sorted(hashlib.sha256(b"row %d" % i).digest()[:16] for i in range(messages))
    sealed = key.seal_many(CAMPAIGN, ROUND, [("data", row_key, b"m%07d" % i + bytes(72))
                                             for i, row_key in enumerate(row_keys)])
    table = list(zip(row_keys, sealed, strict=True))

    def rows(after: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        start = bisect.bisect_right(row_keys, after)
        return table[start:start + limit]

    calls = 0

    def count(frame: object, event: str, argument: object) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        shuffled = ShuffledStream.build(key, CAMPAIGN, ROUND, "data", rows, messages,
                                        page_rows=page_rows)
        released = sum(len(shuffled.messages(start, start + 100))
                       for start in range(0, messages, 100))
    finally:
        sys.setprofile(None)
    shuffled.close()
    assert released == messages
    return calls / messages


def test_the_work_per_message_does_not_grow_with_the_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The number of buckets grows with the stream (2^b of about BUCKET_MESSAGES each);
    pass 1 used to take a Python step per bucket present in every page, so the work per
    message grew with the stream (1.56 times the calls per message at eight times the
    messages here; at a million users a data page of 4,096 rows met 128 buckets). Buckets
    of 64 messages stand for buckets of 32,768, pages of 512 rows for pages of 4,096."""
    monkeypatch.setattr(shuffled_stream, "BUCKET_MESSAGES", 64)
    _calls_per_message(512, page_rows=512)  # first uses (imports, caches) are not counted
    small = _calls_per_message(4096, page_rows=512)  # 64 buckets
    large = _calls_per_message(32768, page_rows=512)  # 512 buckets
    assert large / small < 1.15, (small, large)
