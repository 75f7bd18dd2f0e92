"""Datasets: MSNBC, synthetic set-valued data, and transaction files."""
