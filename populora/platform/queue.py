"""A local job queue: run many background jobs (``jobs.py``) with at most K at a time.

Each item is started by a caller-supplied function that returns a ``jobs.Job`` (a local supervised process or a
Ray Job: both report ``status`` and ``run_id`` the same way). The queue polls: it starts items while fewer than K
run, tells the caller once each job's MLflow run id is known (so it can tag the run), and returns every item's
final status. A job's run id is the one its trainer links to the job (``<job dir>/run_id``, or the run tagged
``populora.job_id`` for a Ray Job: ``jobs.Job.run_id``), never a line of its log. Nothing here knows about training: the sweep (``populora.training.sweep``) builds the items.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from populora.platform import jobs

ACTIVE = ("running", "starting", "queued")  # queued: waiting for a launch slot (platform/jobs.py)


@dataclass
class Item:
    key: str                              # unique within the queue
    start: Callable[[], jobs.Job]         # starts the job (called once, when a slot is free)
    job: jobs.Job | None = None           # set when started (or adopted: a job already running from an earlier queue)
    run_id: str | None = None
    status: str = "pending"               # pending | running | starting | finished | failed | stopped | lost
    info: dict = field(default_factory=dict)


def run(items: list[Item], parallel: int = 1, on_started: Callable[[Item], None] | None = None,
        on_run_id: Callable[[Item], None] | None = None, on_end: Callable[[Item], None] | None = None,
        poll_s: float = 1.0) -> list[Item]:
    """Run ``items`` with at most ``parallel`` active at once; returns them with their final status.

    Items that already carry a running ``job`` are adopted (they count against ``parallel``). A KeyboardInterrupt
    stops the jobs this call is waiting on, then propagates.
    """
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    pending = [i for i in items if i.job is None]
    active = [i for i in items if i.job is not None]
    try:
        while pending or active:
            while pending and len(active) < parallel:
                item = pending.pop(0)
                item.job, item.status = item.start(), "starting"
                active.append(item)
                if on_started:
                    on_started(item)
            for item in list(active):
                _poll(item, on_run_id)
                if item.status not in ACTIVE:
                    active.remove(item)
                    if on_end:
                        on_end(item)
            if pending or active:
                time.sleep(poll_s)
    except KeyboardInterrupt:
        for item in active:
            item.status = jobs.stop(item.job)
        raise
    return items


def _poll(item: Item, on_run_id) -> None:
    status = item.job.status
    if item.run_id is None:
        item.run_id = item.job.run_id  # read while it runs: the trainer links its run to the job as it starts it
        if item.run_id and on_run_id:
            on_run_id(item)
    item.status = status
