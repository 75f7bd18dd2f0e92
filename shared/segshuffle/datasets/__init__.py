"""Datasets: MSNBC, synthetic set-valued data, and transaction files.

- :mod:`~segshuffle.datasets.transactions`: the CSR set collection and a vectorised
  parser for transaction files (one user per line, whitespace-separated item ids);
- :mod:`~segshuffle.datasets.msnbc`: the bundled MSNBC.com data (UCI, CC BY 4.0);
- :mod:`~segshuffle.datasets.population`: populations of users holding exactly s items
  (docs/protocol.md section 2), drawn from a collection or synthesised.
"""

from .msnbc import load_msnbc, msnbc_path
from .population import (
    CollectionSource,
    DatasetSource,
    Population,
    SyntheticSource,
    fit_population,
    synthetic_source,
)
from .transactions import SetCollection, load_transactions, parse_transactions

__all__ = [
    "CollectionSource",
    "DatasetSource",
    "Population",
    "SetCollection",
    "SyntheticSource",
    "fit_population",
    "load_msnbc",
    "load_transactions",
    "msnbc_path",
    "parse_transactions",
    "synthetic_source",
]
