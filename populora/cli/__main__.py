"""``python -m populora.cli ...``: the ``populora`` command (jobs and Ray Jobs start it this way)."""

from populora.cli import entry

entry()
