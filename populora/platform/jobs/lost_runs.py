"""Runs whose trainer died without ending them, ended FAILED by a process that knows it is dead.

A trainer killed outright leaves its MLflow run (and its member runs) RUNNING. Readers only *show* such a run as
crashed, from its stale heartbeat (``heartbeat.py``); the store is changed only here, by

- the job supervisor, which saw its trainer end without ending the run (a SIGKILL, the OOM killer; ``restart.py``),
- ``jobs.stop``, whose stop outlasted its grace and killed the trainer (the run then ends stopped, not failed),
- ``populora runs --reap``: every run shown crashed whose trainer process is not alive on this machine (one still
  alive here is hung, not dead, and is left alone: the line says how to stop it).

Ending one is what the trainer would have done: tag ``populora.status=failed`` and ``populora.error`` (why), its
description (how to resume), end the member runs still open and the run FAILED. It then reads failed, not crashed,
with Resume offered as for any failed run; a resume reopens it and beats again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from populora.platform.jobs import heartbeat
from populora.platform.store import runlayout as rl


def resume_line(run_id: str) -> str:
    return f"resume with `populora train --resume {run_id}`"


def end_dead(tracker, run_id: str, reason: str, status: str = rl.FAILED) -> bool:
    """End the run FAILED for ``reason`` (its trainer is known to be dead), with every member run still open.
    ``status`` stopped: the trainer was killed by a stop it did not finish within its grace (``jobs.stop``), and
    the run reads stopped (KILLED), as if the trainer had ended it; ``reason`` is then its note, not an error.
    False if the run had already ended (nothing to do: its trainer ended it, or another reaper did)."""
    run = tracker.get_run(run_id)
    if run.info.status != rl.MLFLOW_STATUS[rl.RUNNING]:
        return False
    tags = {rl.STATUS: status, rl.NOTE: f"{reason}; {resume_line(run_id)}"}
    if status == rl.FAILED:
        tags[rl.ERROR] = reason[:5000]
    tracker.set_tags(run_id, tags)
    ended = rl.MLFLOW_STATUS[status]
    for child in tracker.children(run_id):
        if child.info.status == rl.MLFLOW_STATUS[rl.RUNNING]:
            tracker.end_run(child.info.run_id, ended)
    tracker.end_run(run_id, ended)
    return True


@dataclass
class Reaped:
    run_id: str
    name: str
    silent_s: float
    done: bool      # ended FAILED now
    why: str        # what was done, or why not


def reap(tracker, limit: float | None = None, now: float | None = None) -> list[Reaped]:
    """``populora runs --reap``: end FAILED every run whose status says running and whose heartbeat is older than
    ``limit`` (``heartbeat.limit_s()``), unless its trainer process still lives on this machine."""
    limit = heartbeat.limit_s() if limit is None else limit
    now = time.time() if now is None else now
    runs, _ = rl.search_runs(tracker.client)
    out = []
    for run in runs:
        tags = run.data.tags
        if run.info.status != rl.MLFLOW_STATUS[rl.RUNNING] or tags.get(rl.STATUS, rl.RUNNING) != rl.RUNNING:
            continue
        beat = heartbeat.Beat.parse(tags.get(rl.HEARTBEAT))
        if not heartbeat.is_stale(beat, now, limit):
            continue
        silent = now - beat.t
        if heartbeat.process_alive(beat):
            out.append(Reaped(run.info.run_id, run.info.run_name, silent, False,
                              f"left running: its trainer (pid {beat.pid}) is alive on this machine but silent for "
                              f"{heartbeat.describe_silence(silent)} (hung?); stop it with `kill {beat.pid}` "
                              f"(or populora jobs --stop JOB), then reap again"))
            continue
        where = "" if heartbeat.process_alive(beat) is False else f" (last seen on {beat.host})"
        reason = (f"lost: the trainer (pid {beat.pid}{where}) sent no heartbeat for "
                  f"{heartbeat.describe_silence(silent)} and was ended by populora runs --reap")
        done = end_dead(tracker, run.info.run_id, reason)
        out.append(Reaped(run.info.run_id, run.info.run_name, silent, done,
                          f"ended FAILED; {resume_line(run.info.run_id)}" if done else "already ended"))
    return out
