"""The pure protocol core: no I/O, no network, no clocks.

Modules, one job each:

- :mod:`~segshuffle.core.validation`: argument checks shared by the library and the CLI.
- :mod:`~segshuffle.core.hockey_stick`: the hockey-stick divergence of the variation-ratio
  count pair, evaluated per total count (SPEC section 3).
- :mod:`~segshuffle.core.accounting`: item- and user-level guarantees of the protocol:
  lambda search, epsilon search, upper and lower bounds.
- :mod:`~segshuffle.core.optimizer`: blanket rate m and Poisson rates lambda_k minimising
  the MSE bound (SPEC section 4, dropouts of section 5).
- :mod:`~segshuffle.core.levels`: the level histogram, exact or through K-ary randomized
  response.
- :mod:`~segshuffle.core.randomizers`: the client-side randomizers (Poisson, blanket,
  set fitting).
- :mod:`~segshuffle.core.estimator`: unbiased frequency estimates and standard errors.
- :mod:`~segshuffle.core.simulate`: a vectorised, seeded simulation of the whole protocol.
"""
