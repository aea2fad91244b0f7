"""Tests only: Python runs this at start-up in every process the tests start (tests/conftest.py puts this folder
on PYTHONPATH); see scratch_sqlite.py."""

import scratch_sqlite

scratch_sqlite.install()
