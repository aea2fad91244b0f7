"""How ``populora train`` ends on a failure a person should not have to read a traceback for, and
``populora train --max-restarts N`` from a terminal (the supervisor's restarts, platform/jobs/restart.py).

- a transient failure (a lost Ray worker, the MLflow store unreachable past the client's retries): one line, the
  resume command, exit 75 (``restart.TEMPFAIL``) and ``<job dir>/failure.json`` for a supervisor with restarts left;
- a CUDA out-of-memory: one line naming the phase, the setting to lower and `populora plan`'s figure for it
  (training/run/oom.py), exit 1; the line is the run's MLflow description too.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import psutil
import torch

from populora.platform.jobs import jobs, queue, restart, supervisor, terminal
from populora.platform.store import runlayout as rl
from populora.platform.jobs.job_record import Job
from populora.training.run import oom


def failure_code(err: Exception, trainer) -> int | None:
    """The exit code ``populora train`` ends with after printing one line for ``err``; None: not one of ours (the
    caller re-raises it, traceback and all)."""
    if trainer is not None and _out_of_memory(err):  # also a data-parallel worker's, wrapped in WorkerLost
        message = oom.explain(err, trainer.cfg, trainer.run_id, trainer.step_index + 1, trainer.checkpointed)
        print(f"\nerror: {message}", file=sys.stderr, flush=True)
        try:
            trainer.log.tracker.set_tags(trainer.run_id, {rl.NOTE: message})
        except Exception:  # noqa: BLE001 - the line above is what matters; the run is FAILED already
            pass
        return 1
    cause = restart.transient_cause(err)
    if cause is None:
        return None
    where = (trainer.stop_line() if trainer is not None
             else "it happened while the run was being set up: run the same command again")
    print(f"\nerror: {cause}: {err}\n{where}", file=sys.stderr, flush=True)
    step = trainer.step_index + 1 if trainer is not None else None
    restart.write_failure(cause, step, f"{cause} at step {step or 0}: {str(err)[:300]}")
    return restart.TEMPFAIL


def _out_of_memory(err: BaseException | None) -> bool:
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, torch.OutOfMemoryError):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def own_argv(args) -> list[str]:
    """``populora train``'s command line again, without ``--max-restarts`` (what the supervisor runs)."""
    out = ["--config", args.config] if args.config else []
    out += [a for s in args.set for a in ("--set", s)]
    out += ["--resume", args.resume] if args.resume else []
    out += ["--fork", args.fork] if args.fork else []
    out += ["--step", str(args.step)] if args.step is not None else []
    out += ["--ray", args.ray] if args.ray else []
    out += ["--force"] if getattr(args, "force", False) else []
    return out + (["--quiet"] if args.quiet else [])


def train_supervised(args) -> int:
    """``populora train ... --max-restarts N`` in a terminal: this process becomes the job supervisor of the
    same command (its output here, a private job dir for the records), which restarts it up to N times."""
    if args.max_restarts < 0:
        print("error: --max-restarts N takes N >= 0", file=sys.stderr)
        return 2
    if rl.job_dir_from_env() is not None:
        print("error: --max-restarts is for a terminal; inside a job the job's own restarts apply (Launch's "
              "'restarts' field)", file=sys.stderr)
        return 2
    if args.baseline:
        print("error: --max-restarts restarts one run; train the population and --baseline as two commands",
              file=sys.stderr)
        return 2
    job_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    job_dir = Path(jobs.jobs_dir()) / ".terminal" / job_id  # not listed among the jobs: its log is this terminal
    job_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "populora.cli", "train", *own_argv(args)]
    job = Job(id=job_id, argv=argv, dir=str(job_dir), created=time.time(), name=terminal.name_of(argv[3:]),
              max_restarts=args.max_restarts, pid=os.getpid(), pid_started=psutil.Process().create_time(),
              slots=queue.max_parallel(), queue=str(queue.queue_dir()))  # in the machine's one queue (terminal.py)
    job.save()
    queue.enter(job)
    os.environ[rl.ENV_JOB_DIR] = str(job_dir)  # the trainer writes its run id, heartbeat and failures there
    restart.say(f"up to {args.max_restarts} restart(s) from the last checkpoint on a transient failure "
                f"(records: {job_dir})")
    code = supervisor.supervise(job_dir)
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N
