"""The paper's experiments: baselines, sweeps, figures.

- :mod:`~segshuffle.experiments.privset`: PrivSet's subset exponential mechanism;
- :mod:`~segshuffle.experiments.balls_into_bins`: the balls-into-bins protocol;
- :mod:`~segshuffle.experiments.calibration`: both calibrated at the user level;
- :mod:`~segshuffle.experiments.settings`: the paper's figures, levels and shares;
- :mod:`~segshuffle.experiments.methods`: the five baselines and the segmented protocol
  in both blanket modes, planned per panel and run per repeat;
- :mod:`~segshuffle.experiments.runner`: all cores, deterministic seeding, progress;
- :mod:`~segshuffle.experiments.report` and :mod:`~segshuffle.experiments.plotting`:
  CSV rows, summaries and figures;
- :mod:`~segshuffle.experiments.compare`: an earlier run beside a new one, its published
  parameters re-audited by the user-level accountant.
"""
