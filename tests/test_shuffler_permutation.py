"""The release order is uniform, secret-keyed and reproducible (services/shuffler/permutation.py).

The keys are derived from counters, so every test here is deterministic: a chi-square
test that passes passes every time, and the negative controls show it can fail.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter

import numpy as np
from scipy import stats

from segshuffle.services.shuffler.permutation import release_order, tag_order
from segshuffle.services.shuffler.vault import RoundKey

RELEASES = 3000
SIZE = 12


def _bytes(label: str, i: int, n: int) -> bytes:
    out = b""
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(f"{label}/{i}/{counter}".encode()).digest()
        counter += 1
    return out[:n]


def _key(i: int) -> RoundKey:
    return RoundKey(_bytes("root", i, 32))


def _row_keys(i: int, n: int) -> bytes:
    return _bytes("rows", i, 16 * n)


def test_order_is_a_permutation() -> None:
    for n in (0, 1, 2, 17, 1000):
        order = release_order(_key(n), _row_keys(n, n))
        assert sorted(order.tolist()) == list(range(n))


def test_marked_message_position_is_uniform() -> None:
    counts = [0] * SIZE
    for i in range(RELEASES):
        order = release_order(_key(i), _row_keys(i, SIZE)).tolist()
        counts[order.index(0)] += 1  # where the first message to arrive ended up
    result = stats.chisquare(counts)
    assert result.pvalue > 0.01, (counts, result)


def test_all_orderings_of_four_are_equally_likely() -> None:
    observed = Counter(tuple(release_order(_key(i), _row_keys(i, 4)).tolist())
                       for i in range(RELEASES))
    expected = list(itertools.permutations(range(4)))
    assert set(observed) == set(expected)
    result = stats.chisquare([observed[p] for p in expected])
    assert result.pvalue > 0.01, (observed, result)


def test_chi_square_detects_an_order_that_ignores_the_key() -> None:
    # Negative control: sorting by the row keys alone, when they grow with arrival, keeps
    # the arrival order; the same test must reject it.
    counts = [0] * SIZE
    for _ in range(RELEASES):
        row_keys = b"".join(j.to_bytes(16, "big") for j in range(SIZE))
        packed = np.frombuffer(row_keys, dtype=">u8").reshape(-1, 2)
        order = np.lexsort((packed[:, 1], packed[:, 0])).tolist()
        counts[order.index(0)] += 1
    assert stats.chisquare(counts).pvalue < 0.01


def test_order_is_reproducible_and_depends_on_the_key() -> None:
    rows = _row_keys(7, 500)
    first = release_order(_key(1), rows)
    assert np.array_equal(first, release_order(_key(1), rows))  # resumed forwarding
    assert not np.array_equal(first, release_order(_key(2), rows))


def test_release_position_is_independent_of_arrival() -> None:
    n = 20_000
    order = release_order(_key(3), _row_keys(3, n))
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    rho = stats.spearmanr(np.arange(n), position).statistic
    assert abs(rho) < 0.03  # |rho| < 4.2 standard errors (1 / sqrt(n - 1))


def test_tags_are_ordered_as_128_bit_numbers_also_when_high_halves_tie() -> None:
    """The order sorts by the high 64 bits when they all differ; tags that share them
    (nearly never, but possible) are still ordered by the whole 128 bits."""
    random_tags = _row_keys(11, 3000)
    shared = _bytes("high", 1, 8)
    tied = b"".join(shared + _bytes("low", i, 8) for i in range(50)) + _row_keys(12, 50)
    for tags in (random_tags, tied):
        numbers = [int.from_bytes(tags[i:i + 16], "big") for i in range(0, len(tags), 16)]
        assert tag_order(tags).tolist() == sorted(range(len(numbers)), key=numbers.__getitem__)
