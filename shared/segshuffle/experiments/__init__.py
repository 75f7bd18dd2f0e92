"""The paper's experiments: baselines, sweeps, figures."""
