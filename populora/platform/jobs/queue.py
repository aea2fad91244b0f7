"""The one job queue of this machine: training runs, sweeps' runs and evaluations wait here for a slot.

One limit per resource: at most ``max_parallel()`` jobs hold a slot at once (one per visible GPU, one on a CPU
box, or ``POPULORA_MAX_PARALLEL_JOBS``), whoever launched them: the Launch page, the Compare page's evaluation
form, a sweep's driver or ``populora`` on the command line. Everything lives on disk under ``queue_dir()``:

    <queue dir>/tickets/<created>-<job id>   one per slotted job, written at launch, removed when its supervisor
                                             ends; holds the job dir (a sweep's jobs live under the sweep's dir)
    <queue dir>/slots/slot-<i>.lock          a slot: a file lock held by the supervisor while its job runs, so
                                             the OS frees it when the supervisor ends, however it ends

Jobs leave the queue in launch order (ticket order): a supervisor takes a free slot only when its job is the
first one still waiting, so ``position`` (1 = next) is what the UI and ``populora jobs`` show. No scheduler
process: each supervisor polls. A ticket whose job ended or whose supervisor vanished is skipped (and removed).

A sweep's ``--parallel K`` is a caller-side driver on top (``training/run/sweep.py``): it starts items while fewer
than K of its own are active; each started job still waits here for a slot.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from populora.platform.jobs.job_record import Job, jobs_dir

ACTIVE = ("running", "starting", "queued")  # queued: waiting for a slot
WAITING = ("starting", "queued")            # a ticket's job that holds no slot yet


def max_parallel() -> int:
    """How many slotted jobs run at once: ``POPULORA_MAX_PARALLEL_JOBS``, else one per visible GPU, else 1.

    Two trainings (or a training and an evaluation) on one GPU or a few CPU cores only slow each other down
    (and may not both fit)."""
    env = os.environ.get("POPULORA_MAX_PARALLEL_JOBS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"POPULORA_MAX_PARALLEL_JOBS={env!r}: give a whole number >= 1")
        return int(env)
    try:
        import torch

        return max(1, torch.cuda.device_count())
    except ImportError:
        return 1


def queue_dir() -> Path:
    """``POPULORA_QUEUE_DIR``, else ``<jobs dir>/.queue``: one per machine (per store) unless told otherwise."""
    return Path(os.environ.get("POPULORA_QUEUE_DIR") or jobs_dir() / ".queue")


# ====================================================================== tickets
def _folder(job: Job) -> Path:
    """The job's queue dir (a job.json written before jobs named their queue: this machine's)."""
    return Path(job.queue or queue_dir())


def _ticket(job: Job) -> Path:
    return _folder(job) / "tickets" / f"{job.created:017.6f}-{job.id}"


def enter(job: Job) -> None:
    """Put a launched job in line (its ticket names its dir)."""
    path = _ticket(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(job.dir)


def leave(job: Job) -> None:
    _ticket(job).unlink(missing_ok=True)


def entries(folder: str | Path | None = None) -> list[Job]:
    """The jobs holding a ticket, in launch order, with the ones that ended or vanished removed."""
    folder = Path(folder or queue_dir()) / "tickets"
    out = []
    for ticket in sorted(folder.iterdir()) if folder.is_dir() else []:
        try:
            job = Job.load(ticket.read_text().strip())
        except (OSError, ValueError, TypeError):
            ticket.unlink(missing_ok=True)  # its job dir was deleted
            continue
        if job.status in ACTIVE:
            out.append(job)
        else:
            ticket.unlink(missing_ok=True)
    return out


def position(job: Job, waiting: list[Job] | None = None) -> int | None:
    """1 for the next job to get a slot, 2 after it, ...; None once it holds one (or is not in the queue)."""
    if waiting is None:
        waiting = [j for j in entries(_folder(job)) if j.status in WAITING]
    ids = [j.id for j in waiting]
    return ids.index(job.id) + 1 if job.id in ids else None


@dataclass
class Entry:
    job: Job
    status: str
    position: int | None  # in line, 1 = next; None: holds a slot


def snapshot(folder: str | Path | None = None) -> list[Entry]:
    """The queue as ``populora jobs`` and the UI show it: running jobs, then the waiting ones in order."""
    found = [(j, j.status) for j in entries(folder)]
    waiting = [j for j, s in found if s in WAITING]
    rows = [Entry(j, s, position(j, waiting)) for j, s in found]
    return sorted(rows, key=lambda e: (e.position is not None, e.position or 0))


class Held(list):
    """The slot locks a job holds (``job.need`` of them); ``release`` frees them all (so does the OS, when the
    holding process ends)."""

    def release(self) -> None:
        for lock in self:
            lock.release()
        self.clear()


def wait_for_slot(job: Job, poll_s: float = 0.5) -> Held:
    """Block until ``job`` is first in line and ``job.need`` of its ``slots`` slot locks are free; return them
    held. All or none: a job that needs several slots takes none while fewer are free, and the jobs behind it
    wait (launch order is kept, so a big job is not starved by small ones). A stop meanwhile raises in the caller
    (supervise's handler)."""
    from filelock import FileLock, Timeout

    folder = _folder(job) / "slots"
    folder.mkdir(parents=True, exist_ok=True)
    need = max(1, min(getattr(job, "need", 1) or 1, job.slots))
    while True:
        if position(job) in (1, None):  # None: our own ticket was not read back (it is being written): try anyway
            held = Held()
            for i in range(job.slots):
                lock = FileLock(str(folder / f"slot-{i}.lock"))
                try:
                    lock.acquire(timeout=0)
                    held.append(lock)
                except Timeout:
                    continue
                if len(held) == need:
                    return held
            held.release()
        time.sleep(poll_s)
