"""Tests only: Python runs this at start-up in every process the tests start (tests/conftest.py puts this folder
on PYTHONPATH); see scratch_sqlite.py, and planted_bugs.py (a planted bug in Ray's workers and the CLI)."""

import planted_bugs
import scratch_sqlite

scratch_sqlite.install()
planted_bugs.plant_at_start()
