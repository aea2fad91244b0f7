"""The process that runs a job: ``python -m populora.platform.jobs.supervisor supervise <job dir>``.

``jobs.start`` launches this small supervisor in a new session (its own process group) instead of the job's argv
itself, so the job's status survives the process that launched it (a Streamlit session dies with a browser
refresh; the launcher reaps it when it exits, ``jobs.reap``): the supervisor waits in the queue for the job's slots
(if it has any), runs the real argv, waits for it and writes its exit code to ``<job dir>/exit_code``, however it
ends. A trainer that ends failed is told apart, its run ended FAILED if it could not, and resumed up to
``job.max_restarts`` times when the cause was transient (``restart.py``).

Signals: a stop while queued ends the supervisor before anything ran (exit code of the stop, status "stopped").
Once the child runs, a stop (SIGINT to the whole group) is for the child: the supervisor keeps the stop signals
blocked, to outlive the child and write its exit code. Blocked, not ignored: an ignored signal is inherited, so a
stop arriving between fork and the child's reset would be lost; a blocked one stays pending and reaches the child
the moment it unblocks (``_default_signals``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from populora.platform.jobs import queue, restart
from populora.platform.store import runlayout
from populora.platform.jobs.job_record import EXIT_FILE, READY_FILE, SLOT_FILE, STOP_FILE, Job
from populora.platform.jobs.stopping import STOP_SIGNALS, Stopped, raise_stopped, stop_code

MODULE = "populora.platform.jobs.supervisor"  # what ``jobs.start`` runs with ``python -m``


def _default_signals() -> None:
    """In the child, before exec: default dispositions (so Python turns SIGINT into KeyboardInterrupt again), then
    unblock, so a stop that arrived while the supervisor held the signals blocked is delivered now."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def supervise(job_dir: str | Path) -> int:
    """Run the job's argv to completion (after waiting for a slot, if it has slots) and record its exit code
    (even when interrupted)."""
    job = Job.load(job_dir)
    code, slot = 1, None
    if not job.slots:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    for sig in STOP_SIGNALS:
        signal.signal(sig, raise_stopped)  # while queued (signals not blocked yet): stop before anything ran
    Path(job_dir, READY_FILE).touch()
    try:
        if job.slots:
            slot = queue.wait_for_slot(job)
            Path(job_dir, SLOT_FILE).write_text("held")  # out of the line: status "running"
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        code = run_with_restarts(job)
    except Stopped as err:
        code = stop_code(err)  # stopped while queued, before anything ran: "stopped", like a trainer that caught it
    except OSError as err:
        print(f"error: could not start {job.argv[0]!r}: {err}", flush=True)
        code = 127
    finally:
        Path(job_dir, EXIT_FILE).write_text(str(code))
        if slot is not None:
            slot.release()
        if job.slots:
            queue.leave(job)
    return code


def _run(argv: list[str]) -> int:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=_default_signals).wait()


def run_with_restarts(job: Job) -> int:
    """Run the job's argv; while it ends failed for a transient cause and restarts are left, resume its run from
    the last checkpoint after a backoff (``restart.py``). A trainer that died without ending its run (a signal)
    has its run ended FAILED here. Returns the last attempt's exit code (a stop during a backoff: the stop's)."""
    job_dir = Path(job.dir)
    code = _run(job.argv)
    if job.kind != "train":  # an evaluation ends its own way (no run to resume)
        return code
    while (failure := restart.classify(code, Path(job.dir, STOP_FILE).exists(), job_dir)) is not None:
        if code < 0 or job.max_restarts:  # a signal: the trainer said nothing; else it has said why
            restart.say(failure.message)
        # killed by a signal, the trainer could not end its run; otherwise it did (or the store is what failed)
        run_id = restart.end_run(job_dir, failure) if code < 0 else runlayout.read_run_id(job_dir)
        done = restart.history(job_dir)
        go, why = restart.decide(failure, done, job.max_restarts)
        if go and run_id is None:
            go, why = False, "not restarted: the trainer ended before its run existed (nothing to resume)"
        if not go:
            if why and job.max_restarts:
                restart.say(why)
            return code
        n, wait = len(done) + 1, restart.backoff_s(len(done) + 1)
        restart.say(f"restart {n} of {job.max_restarts}: resuming run {run_id} from its last checkpoint in {wait:.0f} s")
        signum = restart.wait_unless_stopped(wait)
        if signum is not None or Path(job.dir, STOP_FILE).exists():
            restart.say("stopped during the backoff: not restarted")
            return 128 + (signum or signal.SIGINT)
        restart.record(job_dir, failure, wait)
        restart.log_restart(run_id, n, failure, wait)
        code = _run(restart.resume_argv(run_id))
    return code


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "supervise":
        sys.exit(supervise(sys.argv[2]))
    print(f"usage: python -m {MODULE} supervise JOB_DIR", file=sys.stderr)
    sys.exit(2)
