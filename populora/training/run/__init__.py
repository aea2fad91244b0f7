"""A run's life on disk and in MLflow: checkpoints, forks, faults and out-of-memory advice, preflight, what a run logs,
members' logged models, and sweeps of runs.
"""
