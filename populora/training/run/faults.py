"""How a training run names the fault that ended it: a full disk (wherever it was hit) becomes the one-line
DiskFull of ``platform.diskspace`` with this run's resume command, so the CLI prints it, the run's MLflow error tag
holds it, and the job log ends with it.

A full disk under a local sqlite store would also refuse the write that ends the run FAILED (sqlite needs room for
its rollback journal even to update a row), leaving it RUNNING. So each trainer keeps a small reserve file beside
such a store (``.<db>.reserve``, RESERVE_BYTES) and gives it up when a disk fills, just before the run's end status
is written; the next trainer on that store makes it again once there is room.
"""

from __future__ import annotations

import logging
from pathlib import Path

from populora.platform import diskspace

RESERVE_BYTES = 1 << 20  # sqlite's journal for the end status and the error tag: a few pages; the rest is slack
STORE_MODULES = ("mlflow", "sqlalchemy", "sqlite3", "requests", "urllib3")  # errors raised by a write to the store


def resume_hint(run_id: str, checkpoint_step: int) -> str:
    """How to go on once space is freed: the resume command (from the last checkpoint), or a new run before any.

    >>> resume_hint("abc", 2)
    'resume with `populora train --resume abc` (it restarts after the checkpoint of step 2)'
    >>> resume_hint("abc", 0)
    'start the run again (it failed before its first checkpoint)'
    """
    if checkpoint_step <= 0:
        return "start the run again (it failed before its first checkpoint)"
    return f"resume with `populora train --resume {run_id}` (it restarts after the checkpoint of step {checkpoint_step})"


def explained(err: BaseException, run_id: str, store_uri: str, run_dir: Path | None, checkpoint_step: int) -> BaseException:
    """``err`` as a DiskFull carrying this run's resume hint if it says a disk or quota is full, else ``err``.
    A write not named where it happened (``diskspace.writing``) is named by where it failed: the MLflow store for
    the store's errors, else the file the OS named or the run dir."""
    if not isinstance(err, Exception):  # a stop (KeyboardInterrupt) stays a stop
        return err
    if _from_store(err):
        full = diskspace.as_disk_full(err, f"run {run_id}'s records in the MLflow store", diskspace.store_location(store_uri))
    else:
        full = diskspace.as_disk_full(err, f"the files of run {run_id}", run_dir or Path.cwd())
    if full is None:
        return err
    full.resume = resume_hint(run_id, checkpoint_step)
    if full is not err:
        full.__cause__ = err
    release_store_space(store_uri)
    return full


class _NoFullDiskTracebacks(logging.Filter):
    """Drops MLflow's own "SQLAlchemy database error" record (with its traceback and SQL) when the error is a full
    disk: the run's one line says it, and error.txt keeps the whole traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and diskspace.disk_full_errno(record.exc_info[1]))


MLFLOW_DB_LOGGER = "mlflow.store.db.utils"  # logs every failed sqlalchemy write with logger.exception


def quiet_store_tracebacks() -> None:
    """Install the filter once on MLflow's store logger (the trainer's process: ``populora train``)."""
    logger = logging.getLogger(MLFLOW_DB_LOGGER)
    if not any(isinstance(f, _NoFullDiskTracebacks) for f in logger.filters):
        logger.addFilter(_NoFullDiskTracebacks())


def reserve_path(store_uri: str) -> Path | None:
    """The reserve file of a local sqlite store (None for any other store: a server's disk is its own)."""
    if not store_uri.startswith("sqlite:///"):
        return None
    db = Path(diskspace.store_location(store_uri))
    return db.with_name(f".{db.name}.reserve")


def reserve_store_space(store_uri: str) -> None:
    """Make the store's reserve file if it has none (best effort: on a disk already too full, none)."""
    path = reserve_path(store_uri)
    if path is None or path.exists() or not path.parent.is_dir():
        return
    try:
        with open(path, "wb") as fh:
            fh.write(b"\0" * RESERVE_BYTES)  # written, not truncated to size: a sparse file would hold no blocks
    except OSError:
        path.unlink(missing_ok=True)


def release_store_space(store_uri: str) -> None:
    path = reserve_path(store_uri)
    if path is not None:
        path.unlink(missing_ok=True)


def _from_store(err: BaseException | None) -> bool:
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if type(err).__module__.split(".")[0] in STORE_MODULES:
            return True
        err = err.__cause__ or err.__context__
    return False
