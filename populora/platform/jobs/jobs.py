"""Background jobs, the caller's side: launch ``populora train`` or ``populora eval`` detached from the caller
(locally or as a Ray Job), find it again, stop it. The job's side, the process that runs it, is ``supervisor.py``;
its record and status ``job_record.py``; the line it waits in ``queue.py``.

The web UI launches runs from a Streamlit session, which dies with a browser refresh; threads started there are
orphaned (streamlit#10229). So a job is a separate process group started with ``start_new_session=True`` and
everything about it lives on disk, one directory per job under the jobs dir:

    <jobs_dir>/<job_id>/job.json    argv, pid, created time, config path
    <jobs_dir>/<job_id>/config.yaml the validated config the run was started with
    <jobs_dir>/<job_id>/log.txt     stdout + stderr of the run
    <jobs_dir>/<job_id>/exit_code   written by the supervisor when the run ends
    <jobs_dir>/<job_id>/run_id      the MLflow run id, written by the trainer (runlayout.record_job_run)

The process we start is a small supervisor (``python -m populora.platform.jobs.supervisor supervise <job dir>``) that
runs the real argv, waits for it and records its exit code, so the status survives the UI process; the launcher
still reaps it when it exits (``reap``), or a long-lived UI collects <defunct> supervisors. Stopping sends SIGINT to the whole process group: the trainer catches KeyboardInterrupt, tags
the run ``stopped`` and ends it KILLED in MLflow.

A pid alone does not name a process for long: after a reboot, or once the supervisor is gone, the same number
can belong to anything. So ``job.json`` also holds the supervisor's start time (psutil), and a job is ours only
while a process with that pid AND that start time exists; otherwise it is "lost", and nothing is ever signalled.

Training and evaluation jobs wait in the machine's one queue (``platform/jobs/queue.py``) for a slot: at most
``queue.max_parallel()`` run at once (one per GPU on a GPU box, one on CPU, or ``POPULORA_MAX_PARALLEL_JOBS``),
in launch order; the others show "queued" and their place in line. How many slots a job holds at once (``need``)
is the caller's to say: the platform counts slots and never reads what a training's config means (a training on
N local GPUs: ``training.config.job_slots``).

The job knows its run without parsing the trainer's output: the launcher sets ``POPULORA_JOB_ID`` and
``POPULORA_JOB_DIR`` in the trainer's environment; the trainer tags its run ``populora.job_id=<id>`` and writes
``<job dir>/run_id``. A Ray Job's trainer runs on the cluster, away from the job dir: its run is found by the tag.

Every argv is a list; user-typed values reach the trainer only inside the YAML file, never through a shell.

Ray: ``launch_training(..., ray_address=ADDR)`` submits the run as a Ray Job instead (``ray_jobs.py``): the job
dir then holds ``job.json`` and ``ray_workdir/config.yaml`` (what Ray uploads), status and stop go through Ray's
Jobs API, and ``log.txt`` is a copy of the job's logs refreshed whenever the log is read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

from populora.platform.jobs import lost_runs, queue, ray_jobs, supervisor
from populora.platform.store import runlayout
from populora.platform.store.tracking import Tracker
from populora.platform.jobs.job_record import EXIT_FILE, STOP_FILE, Job, jobs_dir


def max_parallel() -> int:
    """The queue's slot count (``queue.max_parallel``): one limit for every kind of job."""
    return queue.max_parallel()


# ====================================================================== start / stop / list
def start(argv: list[str], name: str = "", env: dict[str, str] | None = None, root: str | Path | None = None,
          job_id: str | None = None, slots: int | None = None, files: dict[str, str] | None = None,
          kind: str = "train", queue_dir: str | Path | None = None, need: int = 1, max_restarts: int = 0) -> Job:
    """Start ``argv`` (a list, never a shell string) in a new session under a supervisor; return the Job.
    With ``slots``, the supervisor first waits in the queue (``queue_dir``, default ``queue.queue_dir()``;
    status "queued") until it is first in line and ``need`` of the ``slots`` slots are free (at most all of them).
    ``files`` ({name: text}) are written into the job dir before anything starts (the argv may name them)."""
    if not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv):
        raise TypeError("argv must be a list of strings (jobs never go through a shell)")
    root = Path(root or jobs_dir())
    job_id = job_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    job_dir = root / job_id
    job_dir.mkdir(parents=True, exist_ok=False)
    for file_name, text in (files or {}).items():
        (job_dir / file_name).write_text(text)
    job = Job(id=job_id, argv=list(argv), dir=str(job_dir), created=time.time(), name=name, env=dict(env or {}),
              slots=slots, kind=kind, queue=str(queue_dir or queue.queue_dir()) if slots else None,
              need=max(1, min(need, slots or 1)), max_restarts=max_restarts, host=socket.gethostname())
    job.save()
    proc = None
    try:
        if slots:  # in line from its launch, before its supervisor exists: launch order is queue order
            queue.enter(job)
        with open(job.log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", supervisor.MODULE, "supervise", str(job_dir)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=os.getcwd(), env={**_inherited_env(), **QUIET_ENV, **job.env, **_link_env(job)})
        job.pid = proc.pid
        try:
            job.pid_started = psutil.Process(proc.pid).create_time()
        except psutil.Error:  # already gone (it failed at once): its exit code tells
            pass
        job.save()
    except BaseException as err:  # no supervisor (or one whose pid is not on record: it could not be stopped)
        _failed_to_start(job, proc, err)
        raise
    reap(proc)
    return job


def _failed_to_start(job: Job, proc: subprocess.Popen | None, err: BaseException) -> None:
    """A launch that failed half-way (the supervisor could not start: no memory, no processes left; or its pid
    could not be saved: a full disk) ends failed at once: the supervisor, if it started, stopped with its
    session; out of the queue (its ticket would hold the first place); the reason in its log and exit code 1
    where the disk still takes them (else its status reads "lost" once ``START_GRACE_S`` has passed)."""
    if proc is not None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # it has run nothing yet that needs a clean stop: it waits for a slot or starts
        reap(proc)
    if job.slots:
        with contextlib.suppress(OSError):
            queue.leave(job)
    with contextlib.suppress(OSError):
        with open(job.log_path, "a") as log:
            log.write(f"error: the job could not start: {type(err).__name__}: {err}\n")
    with contextlib.suppress(OSError):
        Path(job.dir, EXIT_FILE).write_text("1")


def reap(proc: subprocess.Popen) -> None:
    """Wait for the supervisor in a daemon thread, so that once it exits it is reaped, not left a zombie under
    the launcher: the UI server is long-lived and starts many jobs (the walk found three <defunct> supervisors
    after three jobs). Its status never needed the wait (the exit code is on disk); the launcher's exit ends the
    thread."""
    threading.Thread(target=proc.wait, name=f"reap supervisor {proc.pid}", daemon=True).start()


# a job's log is read as text, one line per step: no Hugging Face progress bars (transformers' "Loading weights",
# hub downloads) nor any other library's tqdm bar (TQDM_DISABLE: tqdm's own env default, e.g. transformers' GGUF
# "Converting and de-quantizing" bar, 17 redraws of one line in a job's log); the trainer's phase is in
# progress.json instead (platform/progress.py). Our own bars (the evaluation's) pass ``disable`` explicitly and stay
QUIET_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}


def _inherited_env() -> dict[str, str]:
    """The launcher's environment minus the UI's own secret: a training run has no use for the login token."""
    return {k: v for k, v in os.environ.items() if k != "POPULORA_UI_TOKEN"}


def _link_env(job: Job) -> dict[str, str]:
    """What the trainer needs to link its run to the job (tag and ``run_id`` file)."""
    return {runlayout.ENV_JOB_ID: job.id, runlayout.ENV_JOB_DIR: job.dir}


def launch_training(config_yaml: str, name: str = "", env: dict[str, str] | None = None,
                    root: str | Path | None = None, ray_address: str | None = None, need: int = 1,
                    max_restarts: int = 0) -> Job:
    """Write the (already validated) config to the job dir and start ``populora train --config`` on it: here,
    waiting in the machine's queue until ``need`` of its slots are free, or as a Ray Job on the cluster at
    ``ray_address`` (Ray schedules those; ``need`` is not used). Every local job waits in the one queue (a sweep's
    ``--parallel`` only caps how many of its own runs are in it at once). The caller sizes ``need`` from the
    config (``training.config.job_slots``): the platform does not read training's schema. ``max_restarts``: the
    supervisor resumes it from its last checkpoint after a transient failure, up to that many times (restart.py;
    local jobs only: a Ray Job has no supervisor of ours)."""
    return _launch("train", config_yaml, name, env, root, ray_address, need, max_restarts)


def launch_eval(config_yaml: str, name: str = "", env: dict[str, str] | None = None,
                root: str | Path | None = None, ray_address: str | None = None) -> Job:
    """``populora eval --config`` on the (already validated) ``EvalConfig`` YAML, as ``launch_training`` runs a
    training: same supervisor, log, stop and queue (one slot). A stopped evaluation resumes where it stopped when
    launched again with the same config (its finished pairs are kept in its out dir)."""
    return _launch("eval", config_yaml, name, env, root, ray_address, 1)


def launch_resume(run_id: str, name: str = "", env: dict[str, str] | None = None, root: str | Path | None = None,
                  need: int = 1, step: int | None = None, max_restarts: int = 0) -> Job:
    """``populora train --resume RUN_ID`` as a job (the Runs page's Resume): same supervisor, log, stop and queue
    as a launched training, holding ``need`` slots (sized by the caller from the run's config, as for a launch).
    The job knows its run from the start (``run_id`` is written before it runs), so the run's page shows this
    job's log and state at once, also while it waits in the queue."""
    root = Path(root or jobs_dir())
    job_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    argv = [sys.executable, "-m", "populora.cli", "train", "--resume", run_id, "--quiet"]
    argv += ["--step", str(step)] if step is not None else []  # a named checkpoint, else the newest intact one
    return start(argv, name=name or f"resume {run_id[:8]}", env=env, root=root, job_id=job_id, slots=max_parallel(),
                 files={runlayout.RUN_ID_FILE: run_id}, kind="train", need=need, max_restarts=max_restarts)


def launch_fork(run_id: str, step: int, overrides: list[str], name: str = "", env: dict[str, str] | None = None,
                root: str | Path | None = None, need: int = 1, max_restarts: int = 0) -> Job:
    """``populora train --fork RUN_ID --step N --set ...`` as a job (the Runs and Lineage pages' Fork): a new run,
    queued like a launch; the trainer tells the job its new run's id once it exists."""
    argv = [sys.executable, "-m", "populora.cli", "train", "--fork", run_id, "--step", str(step), "--quiet"]
    argv += [a for o in overrides for a in ("--set", o)]
    return start(argv, name=name or f"fork of {run_id[:8]} @{step}", env=env, root=Path(root or jobs_dir()),
                 slots=max_parallel(), kind="train", need=need, max_restarts=max_restarts)


def latest_for_run(run_id: str, root: str | Path | None = None) -> Job | None:
    """The newest job of ``run_id`` (its launch, or the latest resume of it), or None if none ran it from here.
    The newest, not the first: after a resume the run's state and log are the resume's."""
    return next((j for j in list_jobs(root) if j.run_id == run_id), None)


CONFIG_FILE = "config.yaml"  # a launched training's or evaluation's config, in its job dir (read by its argv)


def _launch(kind: str, config_yaml: str, name: str, env: dict[str, str] | None, root: str | Path | None,
            ray_address: str | None, need: int, max_restarts: int = 0) -> Job:
    root = Path(root or jobs_dir())
    job_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    if ray_address:
        return _submit_ray(kind, config_yaml, name, dict(env or {}), root, ray_address, f"populora-{job_id}")
    # the config is in place before the supervisor reads the argv that names it
    argv = [sys.executable, "-m", "populora.cli", kind, "--config", str(root / job_id / CONFIG_FILE)]
    argv += ["--quiet"] if kind == "train" else []
    return start(argv, name=name, env=env, root=root, job_id=job_id, slots=max_parallel(),
                 files={CONFIG_FILE: config_yaml}, kind=kind, need=need, max_restarts=max_restarts)


def _submit_ray(kind: str, config_yaml: str, name: str, env: dict[str, str], root: Path, address: str, job_id: str) -> Job:
    job_dir = root / job_id
    workdir = job_dir / "ray_workdir"
    workdir.mkdir(parents=True)
    (workdir / "config.yaml").write_text(config_yaml)
    job = Job(id=job_id, argv=ray_jobs.ENTRYPOINTS[kind].split(), dir=str(job_dir), created=time.time(), name=name,
              env=env, ray_address=address, kind=kind)
    job.save()
    try:
        ray_jobs.submit(address, str(workdir), job_id, {**env, runlayout.ENV_JOB_ID: job_id}, name, kind)
    except ray_jobs.RayJobError:
        shutil.rmtree(job_dir, ignore_errors=True)  # nothing was started: leave no job behind
        raise
    return job


def _wait_stopped(job: Job, timeout_s: float) -> str:
    """The job's status once it is no longer running, or its last status at the deadline (each read of a Ray
    Job's status is an HTTP request, so it is read once per poll)."""
    deadline = time.time() + timeout_s
    status = job.status
    while time.time() < deadline and status in ("running", "starting", "queued"):
        time.sleep(0.2)
        status = job.status
    return status


# How long a stopped job may take to end before SIGKILL. Longer than MLflow's sqlite busy_timeout (20 s,
# mlflow/store/db/utils.py): the trainer's stop writes to the store (the run stopped, its member runs ended), and a
# write waiting on the store's lock (a reader, another writer) may wait that long; killed then, the run stayed
# RUNNING, the job was "lost" and the store kept a hot journal (seen in make test: a resume stopped while the test
# read the same store). A stop normally ends in about a second. tests/ui/test_ui_jobs.py checks it against MLflow's.
STOP_GRACE_S = 60.0


def stop(job: Job, timeout_s: float = STOP_GRACE_S) -> str:
    """SIGINT the job's process group (the trainer marks its run stopped); SIGKILL if it has not ended within
    ``timeout_s``. A Ray Job is stopped through Ray (SIGTERM, which the trainer treats like SIGINT, then SIGKILL)."""
    if job.ray_address:
        if job.status in ("running", "starting"):
            ray_jobs.stop(job.ray_address, job.id)
            status = _wait_stopped(job, timeout_s + ray_jobs.STOP_WAIT_S)
            if status == "stopped":  # Ray reports it once the entrypoint and its children are gone, SIGKILL or not
                _end_killed_run(job, f"stopped through Ray; its trainer was killed after Ray's grace "
                                     f"({ray_jobs.STOP_WAIT_S} s) before it ended its run")
            return status
        return job.status
    deadline = time.time() + 10
    while job.status == "starting" and time.time() < deadline:  # a SIGINT now would kill the supervisor itself
        time.sleep(0.1)
    if job.status not in ("running", "starting", "queued"):
        return job.status  # lost or ended: nothing of ours to signal
    Path(job.dir, STOP_FILE).touch()  # before the signal: however the process ends now, it was our stop
    if not _signal_group(job, signal.SIGINT):
        return job.status
    killed = _wait_stopped(job, timeout_s) in ("running", "starting", "queued") and _signal_group(job, signal.SIGKILL)
    # the supervisor writes the exit code, then exits: stopped means gone (CI saw it still up just after the code)
    deadline = time.time() + 10
    while job.process() is not None and time.time() < deadline:
        time.sleep(0.05)
    if killed and job.process() is None:
        _end_killed_run(job, f"stopped; its trainer was killed after {timeout_s:.0f} s before it ended its run")
    return job.status


def _end_killed_run(job: Job, reason: str) -> None:
    """A training job's run its stop killed before the trainer ended it (still RUNNING, its process gone): end it
    stopped, as the trainer would have, instead of leaving it to read crashed once its heartbeat is stale. Best
    effort: the store may be what held the trainer up; ``populora runs --reap`` ends it later then."""
    if job.kind != "train" or (run_id := job.run_id) is None:
        return
    try:
        lost_runs.end_dead(Tracker(job.env.get("MLFLOW_TRACKING_URI")), run_id, reason, status=runlayout.STOPPED)
    except Exception as err:  # noqa: BLE001 - the stop itself is done; say why the run still reads running
        print(f"could not end run {run_id} stopped in MLflow: {type(err).__name__}: {str(err)[:200]}", file=sys.stderr)


def stop_soon(job: Job) -> None:
    """The UI's Stop: the stop is recorded now (the job reads "stopping" at once, ``state.py``) and sent and followed
    (the wait, SIGKILL after the grace) in a daemon thread, so the page's rerun is not held until the job ended
    (it showed "running" without its button for seconds). A Ray Job is stopped the same way, in the thread."""
    if not job.ray_address and job.status in ("running", "starting", "queued"):
        Path(job.dir, STOP_FILE).touch()
    threading.Thread(target=stop, args=(job,), name=f"stop job {job.id}", daemon=True).start()


def _signal_group(job: Job, sig: int) -> bool:
    """Signal the job's process group, only if its supervisor is still the process we started (pid and start
    time) and still leads its own group (it was started with start_new_session). True if signalled."""
    proc = job.process()
    try:
        if proc is None or os.getpgid(proc.pid) != proc.pid:
            return False
        os.killpg(proc.pid, sig)
        return True
    except ProcessLookupError:
        return False


def list_jobs(root: str | Path | None = None) -> list[Job]:
    """Every job under the jobs dir, newest first; unreadable job dirs are skipped."""
    root = Path(root or jobs_dir())
    jobs = []
    for job_file in root.glob("*/job.json") if root.is_dir() else []:
        try:
            jobs.append(Job.load(job_file.parent))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(jobs, key=lambda j: j.created, reverse=True)


def get_job(job_id: str, root: str | Path | None = None) -> Job | None:
    job_dir = Path(root or jobs_dir()) / job_id
    return Job.load(job_dir) if (job_dir / "job.json").is_file() else None
