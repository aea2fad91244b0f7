"""A ``populora train`` or ``populora eval`` typed in a terminal waits in the machine's one job queue like a job from
the UI.

Without this a terminal's training ran beside a league that held the only slot while ``populora jobs`` said 0
running: two trainings on one GPU slow each other down or do not fit. So the command, outside any job, puts itself
in line (``queue.py``) as the job it is: a record under ``<jobs dir>/.terminal/<id>`` (its log is the terminal, so
it is not among the jobs dir's listed jobs) holding this process's pid and start time, a ticket, and once first in
line the slots it needs (file locks the OS frees when the process ends, however it ends). ``populora jobs`` and the
UI's queue show it (kind ``train`` or ``eval``, name ``terminal: ...``) running or waiting with its place, and count it against
the slots; ``populora jobs --stop ID`` stops it as it stops any job. Inside a job (the UI's, a sweep's, a resume's,
``--max-restarts``' supervisor) the job already holds the slot: nothing more is taken.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from pathlib import Path

import psutil

from populora.platform.jobs import queue
from populora.platform.jobs.job_record import EXIT_FILE, READY_FILE, SLOT_FILE, Job, jobs_dir
from populora.platform.store import runlayout as rl

FOLDER = ".terminal"  # under the jobs dir: records of terminal commands (not listed as the dir's jobs)


def record(argv: list[str], name: str, need: int = 1, root: str | Path | None = None, kind: str = "train") -> Job:
    """This process as a job of ``kind`` in line for ``need`` of the queue's slots (its ticket written: launch
    order)."""
    job_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    job_dir = Path(root or jobs_dir()) / FOLDER / job_id
    job_dir.mkdir(parents=True)
    slots = queue.max_parallel()
    job = Job(id=job_id, argv=list(argv), dir=str(job_dir), created=time.time(), pid=os.getpid(), name=name,
              pid_started=psutil.Process().create_time(), slots=slots, kind=kind, queue=str(queue.queue_dir()),
              need=max(1, min(need, slots)), host=socket.gethostname())
    job.save()
    queue.enter(job)
    Path(job_dir, READY_FILE).touch()
    return job


@contextlib.contextmanager
def in_line(argv: list[str], name: str, need: int = 1, say=print, kind: str = "train"):
    """Hold ``need`` slots of the machine's queue for the block (waiting for them first, saying so), as the job
    ``record`` makes; yields the Job (None inside a job: its supervisor holds the slot). The job's end, however
    the block ends, frees the slots and the ticket and records the exit (0, or 1 on an error, 130 on a stop)."""
    if rl.job_dir_from_env() is not None:
        yield None
        return
    job = record(argv, name, need, kind=kind)
    code, held = 1, None
    try:
        place = queue.position(job)
        if place not in (None, 1) or not _free(job):
            say(f"waiting in the machine's job queue ({queue.queue_dir()}): #{place or 1} in line for "
                f"{job.need} of {job.slots} slot(s); `populora jobs` lists what runs (job {job.id})")
        held = queue.wait_for_slot(job)
        Path(job.dir, SLOT_FILE).write_text("held")
        yield job
        code = 0
    except KeyboardInterrupt:
        code = 130
        raise
    finally:
        with contextlib.suppress(OSError):
            Path(job.dir, EXIT_FILE).write_text(str(code))
        if held is not None:
            held.release()
        with contextlib.suppress(OSError):
            queue.leave(job)


def _free(job: Job) -> bool:
    """Whether enough slots are free right now (a look, no lock kept): else the command says it waits."""
    running = sum(e.job.need for e in queue.snapshot(job.queue) if e.position is None and e.job.id != job.id)
    return job.slots - running >= job.need


def name_of(argv: list[str]) -> str:
    """The job's name as ``populora jobs`` and the Runs page list it.

    >>> name_of(["train", "--config", "configs/smoke.yaml"])
    'terminal: populora train --config configs/smoke.yaml'
    """
    return "terminal: populora " + " ".join(argv)[:120]

