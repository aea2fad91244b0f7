"""Compute: the per-adapter ledger of what every adapter spent, the budget as a stopping rule, the work of a step
counted from a config, and the compute-matched single-agent baseline.
"""
