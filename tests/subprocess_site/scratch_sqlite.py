"""Tests only: every sqlite connection commits without waiting for the disk (``PRAGMA synchronous=OFF``).

A test's MLflow store is thrown away, so a power cut is nothing it must survive; what a crashed or killed
*process* leaves (the kill -9 tests) is sqlite's as before: a commit is in the OS's page cache once ``commit()``
returns, synchronous or not. Each commit's fsync was measured at ~20 ms on the 2-core machine under load (0.9 ms
without it), and a short `populora train` of 3 steps commits 315 times: ~6 s of every trainer subprocess spent
waiting on the disk while its core idled, and a synthetic UI store (~5000 commits) mostly a wait.

The test process installs it (tests/conftest.py), and so does every Python process the tests start: conftest puts
this folder on ``PYTHONPATH``, where ``sitecustomize`` installs it at start-up (the trainer, the UI server, the jobs
it launches, Ray's workers). A folder of its own ``sitecustomize`` (tests/ui/oracle_site) installs it too.
"""

import sqlite3

_connect = sqlite3.connect


def _scratch_connect(*args, **kwargs):
    conn = _connect(*args, **kwargs)
    conn.execute("PRAGMA synchronous=OFF")
    return conn


def install() -> None:
    """Patch ``sqlite3.connect`` (and ``sqlite3.dbapi2.connect``, which SQLAlchemy's pysqlite dialect calls)."""
    sqlite3.connect = sqlite3.dbapi2.connect = _scratch_connect
