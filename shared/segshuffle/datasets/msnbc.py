"""The MSNBC.com anonymous web data (UCI), bundled with the package.

989,818 users, each with the sequence of page categories (ids 1..17) they
visited on September 28, 1999.  We keep each user's *set* of distinct
categories and map category id k to item k - 1.  The file, its license (CC BY
4.0, "available thanks to msnbc.com") and its format are described in
``data/README.md`` beside this module.

The parsed collection is cached per process: the first call takes about a
second, later calls are free.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path

from .transactions import SetCollection, parse_transactions, read_bytes

MSNBC_FILE = "msnbc990928.seq.gz"
MSNBC_ITEMS = 17
MSNBC_USERS = 989_818
_SEQUENCES_MARKER = b"% Sequences:"


def msnbc_path() -> Path:
    """Location of the bundled ``msnbc990928.seq.gz``."""
    return Path(str(resources.files("segshuffle.datasets").joinpath("data", MSNBC_FILE)))


def parse_msnbc(data: bytes, source: str = MSNBC_FILE) -> SetCollection:
    """Parse the MSNBC ``.seq`` text: a header naming the 17 categories, then one user a line."""
    marker = data.find(_SEQUENCES_MARKER)
    if marker < 0:
        raise ValueError(f"{source}: not an MSNBC sequence file (no '% Sequences:' header)")
    header_lines = data[:marker].decode("ascii", errors="replace").splitlines()
    named = [line.split() for line in header_lines if line.strip() and not line.startswith("%")]
    if len(named) != 1 or len(named[0]) != MSNBC_ITEMS:
        raise ValueError(f"{source}: expected one header line naming {MSNBC_ITEMS} categories")
    names = tuple(named[0])
    body_start = data.index(b"\n", marker) + 1
    skipped_lines = data.count(b"\n", 0, body_start)
    parsed = parse_transactions(data[body_start:], source=source, first_id=1,
                                item_count=MSNBC_ITEMS, line_offset=skipped_lines)
    return SetCollection(indptr=parsed.indptr, items=parsed.items, item_count=MSNBC_ITEMS,
                         names=names)


@functools.lru_cache(maxsize=4)
def _load_cached(path: str) -> SetCollection:
    return parse_msnbc(read_bytes(path), source=os.path.basename(path))


def load_msnbc(path: str | os.PathLike[str] | None = None) -> SetCollection:
    """The MSNBC users' category sets (items 0..16), from the bundled file by default."""
    return _load_cached(str(Path(path) if path is not None else msnbc_path()))
