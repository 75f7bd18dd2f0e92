"""The pure protocol core: no I/O, no network, no clocks.

Modules, one job each:

- :mod:`~segshuffle.core.validation`: argument checks shared by the library and the CLI.
- :mod:`~segshuffle.core.rules`: what every party computes identically (n_min, the
  honest count h, default delta) and the caps on every input.
- :mod:`~segshuffle.core.blanket`: the two blanket modes and their message geometry.
- :mod:`~segshuffle.core.hockey_stick`: the hockey-stick divergence of the two-bin count
  pair, evaluated per total count.
- :mod:`~segshuffle.core.privacy_loss`: discretised privacy loss distributions of item
  pairs with independent bins, and their composition.
- :mod:`~segshuffle.core.poisson_comparison`: the Poisson law a binomial blanket total
  dominates up to a slack.
- :mod:`~segshuffle.core.full_view`: divergences of exhibited datasets' views (lower bounds).
- :mod:`~segshuffle.core.accounting`: user-level guarantees on the server's full view:
  lambda search, epsilon search, upper and lower bounds (docs/protocol.md, section 4).
- :mod:`~segshuffle.core.optimizer`: blanket rate m and Poisson rates lambda_k minimising
  the MSE bound (docs/protocol.md section 5, dropouts in section 2).
- :mod:`~segshuffle.core.levels`: the level histogram, exact or through K-ary randomized
  response.
- :mod:`~segshuffle.core.randomizers`: the client-side randomizers (Poisson, blanket,
  set fitting).
- :mod:`~segshuffle.core.estimator`: unbiased frequency estimates and standard errors.
- :mod:`~segshuffle.core.simulate`: a vectorised, seeded simulation of the whole protocol.
"""
