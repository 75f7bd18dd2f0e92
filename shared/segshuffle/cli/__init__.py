"""The ``segshuffle`` command line (SPEC section 8)."""
