"""Datasets: the bundled MSNBC file, transaction files, fitting to s items, synthetic data."""

from __future__ import annotations

import gzip
import hashlib
from collections import Counter

import numpy as np
import pytest

from segshuffle.core.randomizers import fit_set
from segshuffle.datasets import (
    CollectionSource,
    SetCollection,
    fit_population,
    load_msnbc,
    load_transactions,
    msnbc_path,
    parse_transactions,
    synthetic_source,
)
from segshuffle.datasets.msnbc import MSNBC_USERS, parse_msnbc


@pytest.fixture(scope="module")
def msnbc() -> SetCollection:
    return load_msnbc()


def test_bundled_file_is_the_documented_one():
    digest = hashlib.sha256(msnbc_path().read_bytes()).hexdigest()
    assert digest == "fd8237495186aebb558608bd7d62dee5591b186de2ecb4910ff3a8c06ab36824"
    readme = (msnbc_path().parent / "README.md").read_text()
    assert digest in readme and "CC BY 4.0" in readme and "thanks to msnbc.com" in readme


@pytest.mark.slow
def test_msnbc_matches_the_published_statistics(msnbc):
    # Statistics from the dataset's README: users, set sizes and per-category holders.
    assert msnbc.n_users == MSNBC_USERS
    assert msnbc.item_count == 17
    assert msnbc.names[0] == "frontpage" and msnbc.names[-1] == "travel"
    sizes = np.bincount(msnbc.set_sizes(), minlength=18)
    assert sizes[0] == 0
    assert sizes[1:5].tolist() == [601_384, 214_392, 94_711, 43_321]
    assert sizes[17] == 13
    assert msnbc.holders().tolist() == [
        313_181, 175_286, 121_948, 121_719, 24_987, 217_101, 80_514, 95_615, 90_192,
        50_606, 57_597, 112_183, 76_948, 119_138, 29_200, 2_082, 11_006,
    ]
    # The first sequences of the UCI description: "1 1", "2", "3 2 2 4 2 2 2 3 3", "5".
    assert [msnbc.user_items(u).tolist() for u in range(4)] == [[0], [1], [1, 2, 3], [4]]


def test_msnbc_parser_rejects_other_files():
    with pytest.raises(ValueError, match="Sequences"):
        parse_msnbc(b"1 2 3\n4 5\n")
    with pytest.raises(ValueError, match="categories"):
        parse_msnbc(b"% header\n\na b c\n\n% Sequences:\n\n1 2\n")


def test_transactions_format(tmp_path):
    text = (b"# a comment\r\n"
            b"3 1 1 7\r\n"
            b"\r\n"
            b"   % another comment\r\n"
            b"7\t3\r\n"
            b"12")
    parsed = parse_transactions(text)
    assert parsed.n_users == 3
    assert parsed.names == ("1", "3", "7", "12")
    assert [parsed.user_items(u).tolist() for u in range(3)] == [[0, 1, 2], [1, 2], [3]]
    path = tmp_path / "sets.txt.gz"
    path.write_bytes(gzip.compress(text))
    again = load_transactions(path)
    assert np.array_equal(again.items, parsed.items)
    assert np.array_equal(again.indptr, parsed.indptr)


def test_transactions_fixed_mapping():
    parsed = parse_transactions(b"1 2\n3\n", first_id=1, item_count=3)
    assert parsed.items.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=r"line 2: item id 4 outside 1\.\.3"):
        parse_transactions(b"1 2\n4\n", first_id=1, item_count=3)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"1 2\n3 x\n", "line 2: malformed item id"),
        (b"1 -2\n", "line 1: malformed"),
        (b"1 2.5\n", "line 1: malformed"),
        (b"1234567890\n", "too large"),
        (b"", "no users"),
        (b"# only a comment\n\n", "no users"),
    ],
)
def test_malformed_transactions(content, message):
    with pytest.raises(ValueError, match=message):
        parse_transactions(content)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_transactions(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="directory"):
        load_transactions(tmp_path)
    broken = tmp_path / "broken.gz"
    broken.write_bytes(b"\x1f\x8bnot really gzip")
    with pytest.raises(ValueError, match="gzip"):
        load_transactions(broken)


def test_fit_population_is_spec_section_6(rng):
    collection = SetCollection.from_sets([[0, 1, 2, 3, 4, 5], [2], [], [1, 3]], item_count=6)
    s = 3
    fitted = fit_population(collection, np.arange(4), s, rng)
    assert fitted.shape == (4, s)
    for row, user in zip(fitted, range(4), strict=True):
        original = set(collection.user_items(user).tolist())
        assert len(set(row.tolist())) == s  # distinct
        real = {int(i) for i in row if i < 6}
        padding = {int(i) for i in row if i >= 6}
        assert real <= original
        assert len(real) == min(len(original), s)
        assert padding <= set(range(6, 6 + s))


def test_fit_population_has_fit_sets_distribution(rng):
    # Down-sampling is uniform and padding ids are uniform, as in core.randomizers.fit_set.
    collection = SetCollection.from_sets([[0, 1, 2, 3, 4]] * 20_000 + [[1]] * 20_000,
                                         item_count=5)
    fitted = fit_population(collection, np.arange(40_000), 2, rng)
    big = Counter(map(tuple, fitted[:20_000].tolist()))
    assert len(big) == 10  # every 2-subset of 5 items
    assert max(big.values()) / min(big.values()) < 1.25  # ~2000 each
    padded = fitted[20_000:]
    assert (padded[:, 0] == 1).all()
    assert abs(np.mean(padded[:, 1] == 5) - 0.5) < 0.02
    reference = Counter(
        fit_set([0, 1, 2, 3, 4], 2, 5, rng) for _ in range(2000)
    )
    assert set(reference) == set(big)


@pytest.mark.slow
def test_collection_source_samples_without_replacement(msnbc, rng):
    source = CollectionSource("msnbc", msnbc)
    population = source.draw(5000, 4, rng)
    assert population.items.shape == (5000, 4)
    assert population.domain_size == 21 and population.item_count == 17
    assert (np.diff(population.items, axis=1) > 0).all()
    freq = population.frequencies()
    assert freq.shape == (21,)
    assert freq.sum() == pytest.approx(4.0)
    # frontpage is held by 31.6% of all users; a 5000-user sample is close to that.
    assert abs(freq[0] - 313_181 / MSNBC_USERS) < 0.03
    with pytest.raises(ValueError, match="cannot sample"):
        source.draw(MSNBC_USERS + 1, 4, rng)


def test_synthetic_source_is_uniform(rng):
    population = synthetic_source(128).draw(20_000, 8, rng)
    assert population.domain_size == 128
    assert (np.diff(population.items, axis=1) > 0).all()
    freq = population.frequencies()
    # Each item is held with probability s/T = 1/16; binomial sd over 20000 users ~0.0017.
    assert np.abs(freq - 8 / 128).max() < 0.01
    with pytest.raises(ValueError):
        synthetic_source(4).draw(10, 5, rng)


def test_level_holders(rng):
    population = synthetic_source(10).draw(300, 3, rng)
    levels = rng.integers(0, 3, size=300)
    holders = population.level_holders(levels, 3)
    assert holders.shape == (3, 10)
    assert np.array_equal(holders.sum(axis=0), population.holders())
    assert holders[1].sum() == 3 * np.sum(levels == 1)
