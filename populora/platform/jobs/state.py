"""The one state machine of runs and jobs: what ``populora runs``, ``populora jobs`` and the UI's pages (Runs,
Launch, Compare, League; ``populora league --wait``) show, from one function, so no two of them disagree.

Inputs (read elsewhere, passed in): the run's status as the store says it, heartbeat applied (``runlayout.status``:
running | finished | failed | stopped | crashed | silent; None before the trainer made its run), the status of the
run's current job (``Job.status``: queued | starting | running | finished | failed | stopped | lost; None for a
run started in a terminal outside any job), whether a stop was sent to that job, and whether the job is a resume
of an existing run. The states::

    queued ──> starting ──> running ──> stopping ──> stopped ──> resume queued ──> resuming ──> running
                               │  └──> finished                  (Resume, in the one queue)
                               ├──> failed                        failed / crashed ──> resume queued ...
                               ├──> crashed   (its trainer gone, or on a machine that cannot be checked from here)
                               └──> silent    (its trainer alive on this machine, not beating: SIGSTOP, hung)

``stopping`` is the time between Stop and the trainer's end (it writes its state, then the run reads stopped);
``silent`` is never resumed (one writer per run: ``lease.py``); ``lost`` is a job's only (its supervisor vanished).
"""

from __future__ import annotations

from pathlib import Path

from populora.platform.jobs.job_record import STOP_FILE  # written by jobs.stop before it signals

QUEUED, STARTING, RUNNING, STOPPING, STOPPED = "queued", "starting", "running", "stopping", "stopped"
RESUME_QUEUED, RESUMING, FINISHED, FAILED, CRASHED, SILENT, LOST = (
    "resume queued", "resuming", "finished", "failed", "crashed", "silent", "lost")
STATES = (QUEUED, STARTING, RUNNING, STOPPING, STOPPED, RESUME_QUEUED, RESUMING, FINISHED, FAILED, CRASHED, SILENT, LOST)
STORE = (RUNNING, FINISHED, FAILED, STOPPED, CRASHED, SILENT)           # what runlayout.status gives
JOB = (QUEUED, STARTING, RUNNING, FINISHED, FAILED, STOPPED, LOST)      # what Job.status gives
ACTIVE_JOB = (QUEUED, STARTING, RUNNING)
RESUMABLE = (STOPPED, FAILED, CRASHED)                                  # Resume is offered (never for silent)
ICONS = {RUNNING: "🟢", FINISHED: "✅", FAILED: "❌", STOPPED: "⏹️", CRASHED: "💥", STARTING: "⏳", QUEUED: "🕒",
         LOST: "❔", STOPPING: "⏳", SILENT: "⏸️", RESUME_QUEUED: "🕒", RESUMING: "⏳"}


def job_state(job: str, stop_sent: bool) -> str:
    """A job's state: its status, or stopping once a stop was sent to it and it has not ended yet.

    >>> job_state("running", True), job_state("queued", False), job_state("stopped", True)
    ('stopping', 'queued', 'stopped')
    """
    return STOPPING if stop_sent and job in ACTIVE_JOB else job


def run_state(store: str | None, job: str | None, stop_sent: bool = False, resume: bool = False) -> str:
    """A run's state from the store's ``store`` status and its current job's ``job`` status (None: none), whether
    a stop was sent to that job, and whether the job is a ``resume`` of the run.

    >>> run_state(None, "queued"), run_state("running", "running", stop_sent=True), run_state("stopped", "queued", resume=True)
    ('queued', 'stopping', 'resume queued')
    >>> run_state("running", "lost"), run_state("silent", "queued", resume=True), run_state("stopped", None)
    ('crashed', 'silent', 'stopped')
    """
    active = job in ACTIVE_JOB
    if store == SILENT:  # alive but not beating: whatever waits for it, the trainer still holds the run
        return SILENT
    if active and stop_sent:
        return STOPPING
    if store is None:  # the trainer has not made its run yet (the model loads) or never did
        if job is None:
            return STARTING
        return {RUNNING: STARTING, LOST: FAILED}.get(job, job)
    if store == RUNNING:
        # the store says running but its job ended without ending it: the trainer died (kill -9, OOM killer)
        return CRASHED if job in (FAILED, LOST, STOPPED) else RUNNING
    if active and resume and store in RESUMABLE:
        return RESUME_QUEUED if job == QUEUED else RESUMING
    return store


def label(state: str, place: int | None = None) -> str:
    """The state as shown, with the place in line of a queued one.

    >>> label(RESUME_QUEUED, 2), label(QUEUED), label(RUNNING, 3)
    ('resume queued (#2)', 'queued', 'running')
    """
    return f"{state} (#{place})" if place and state in (QUEUED, RESUME_QUEUED) else state


def icon(state: str) -> str:
    return ICONS.get(state.split(" (")[0], "•")


MLFLOW = {"running": RUNNING, "scheduled": QUEUED, "finished": FINISHED, "failed": FAILED, "killed": STOPPED}


def of_mlflow(status: str) -> str:
    """The state of a run that has only MLflow's status (a league's run, written once its fit is done): KILLED is
    what a stop leaves, so it reads stopped, as a training run's does.

    >>> of_mlflow("KILLED"), of_mlflow("finished"), of_mlflow("RUNNING")
    ('stopped', 'finished', 'running')
    """
    return MLFLOW.get(status.lower(), status.lower())


# ====================================================================== from the records (side effects at the edge)



def stop_sent(job) -> bool:
    return job is not None and Path(job.dir, STOP_FILE).exists()


def of_job(job) -> str:
    """``job_state`` of a ``Job`` (its status read once)."""
    return job_state(job.status, stop_sent(job))


def of_run(store: str | None, job=None) -> str:
    """``run_state`` of a run whose store status is ``store`` and whose current job is ``job`` (None: none). A
    resume job names its run from the start (``launch_resume`` writes ``run_id``), its argv says ``--resume``."""
    if job is None:
        return run_state(store, None)
    return run_state(store, job.status, stop_sent(job), "--resume" in job.argv)
