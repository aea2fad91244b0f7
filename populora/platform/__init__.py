"""Shared pieces: config loading, tracking, the sandbox, the model backend, jobs.

Named ``populora.platform`` (never a top-level ``platform`` package, which would shadow Python's own
``platform`` module and break torch's import).
"""
