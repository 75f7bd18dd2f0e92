"""The shuffle is uniform: chi-square tests on the CSPRNG Fisher-Yates permutation."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from scipy import stats

from segshuffle.services.shuffler.permutation import random_permutation, shuffled

RELEASES = 3000
SIZE = 12


def _marked_positions(releases: int, size: int, **kwargs: object) -> list[int]:
    counts = [0] * size
    for _ in range(releases):
        order = random_permutation(size, **kwargs)  # type: ignore[arg-type]
        counts[order.index(0)] += 1  # where the marked message (index 0) ended up
    return counts


def test_marked_message_position_is_uniform() -> None:
    counts = _marked_positions(RELEASES, SIZE)
    result = stats.chisquare(counts)
    assert result.pvalue > 0.01, (counts, result)


def test_all_orderings_of_four_are_equally_likely() -> None:
    observed = Counter(tuple(random_permutation(4)) for _ in range(RELEASES))
    expected = list(itertools.permutations(range(4)))
    assert set(observed) == set(expected)
    result = stats.chisquare([observed[p] for p in expected])
    assert result.pvalue > 0.01, (observed, result)


def test_chi_square_detects_a_biased_shuffle() -> None:
    # The classic bug: drawing j from the whole range instead of {0..i}.  The same test
    # must reject it, otherwise the uniformity test above could not fail.
    rng = random.Random(7)

    def naive(n: int) -> list[int]:
        order = list(range(n))
        for i in range(n - 1, 0, -1):
            j = rng.randrange(n)
            order[i], order[j] = order[j], order[i]
        return order

    observed = Counter(tuple(naive(3)) for _ in range(20000))
    # 27 equally likely draw sequences map onto 6 orderings: 4/27 or 5/27 each.
    assert stats.chisquare([observed[p] for p in itertools.permutations(range(3))]).pvalue < 0.01


def test_permutation_is_a_bijection_and_shuffled_keeps_items() -> None:
    for n in (0, 1, 2, 17, 1000):
        assert sorted(random_permutation(n)) == list(range(n))
    items = [f"m{i}" for i in range(50)]
    assert sorted(shuffled(items)) == sorted(items)


def test_negative_size_is_refused() -> None:
    with pytest.raises(ValueError):
        random_permutation(-1)
