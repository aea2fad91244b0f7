"""Background jobs: launch ``populora train`` or ``populora eval`` detached from the caller, find it again, stop it.

The web UI launches runs from a Streamlit session, which dies with a browser refresh; threads started there are
orphaned (streamlit#10229). So a job is a separate process group started with ``start_new_session=True`` and
everything about it lives on disk, one directory per job under the jobs dir:

    <jobs_dir>/<job_id>/job.json    argv, pid, created time, config path
    <jobs_dir>/<job_id>/config.yaml the validated config the run was started with
    <jobs_dir>/<job_id>/log.txt     stdout + stderr of the run
    <jobs_dir>/<job_id>/exit_code   written by the supervisor when the run ends
    <jobs_dir>/<job_id>/run_id      the MLflow run id, written by the trainer (runlayout.record_job_run)

The process we start is a small supervisor (``python -m populora.platform.jobs supervise <job dir>``) that runs
the real argv, waits for it and records its exit code, so the status survives the UI process and needs no
zombie reaping. Stopping sends SIGINT to the whole process group: the trainer catches KeyboardInterrupt, tags
the run ``stopped`` and ends it KILLED in MLflow.

A pid alone does not name a process for long: after a reboot, or once the supervisor is gone, the same number
can belong to anything. So ``job.json`` also holds the supervisor's start time (psutil), and a job is ours only
while a process with that pid AND that start time exists; otherwise it is "lost", and nothing is ever signalled.

Training and evaluation jobs wait in the machine's one queue (``platform/queue.py``) for a slot: at most
``queue.max_parallel()`` run at once (one per GPU on a GPU box, one on CPU, or ``POPULORA_MAX_PARALLEL_JOBS``),
in launch order; the others show "queued" and their place in line.

The job knows its run without parsing the trainer's output: the launcher sets ``POPULORA_JOB_ID`` and
``POPULORA_JOB_DIR`` in the trainer's environment; the trainer tags its run ``populora.job_id=<id>`` and writes
``<job dir>/run_id``. A Ray Job's trainer runs on the cluster, away from the job dir: its run is found by the tag.

Every argv is a list; user-typed values reach the trainer only inside the YAML file, never through a shell.

Ray: ``launch_training(..., ray_address=ADDR)`` submits the run as a Ray Job instead (``ray_jobs.py``): the job
dir then holds ``job.json`` and ``ray_workdir/config.yaml`` (what Ray uploads), status and stop go through Ray's
Jobs API, and ``log.txt`` is a copy of the job's logs refreshed whenever the log is read.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from populora.platform import queue, ray_jobs, runlayout
from populora.platform.job_record import READY_FILE, SLOT_FILE, STOP_FILE, Job, jobs_dir
from populora.platform.stopping import STOP_SIGNALS, Stopped, raise_stopped, stop_code


def max_parallel() -> int:
    """The queue's slot count (``queue.max_parallel``): one limit for every kind of job."""
    return queue.max_parallel()


# ====================================================================== start / stop / list
def start(argv: list[str], name: str = "", env: dict[str, str] | None = None, root: str | Path | None = None,
          job_id: str | None = None, slots: int | None = None, files: dict[str, str] | None = None,
          kind: str = "train", queue_dir: str | Path | None = None, need: int = 1) -> Job:
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
              need=max(1, min(need, slots or 1)))
    job.save()
    if slots:  # in line from its launch, before its supervisor exists: launch order is queue order
        queue.enter(job)
    with open(job.log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "populora.platform.jobs", "supervise", str(job_dir)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=os.getcwd(), env={**_inherited_env(), **job.env, **_link_env(job)})
    job.pid = proc.pid
    try:
        job.pid_started = psutil.Process(proc.pid).create_time()
    except psutil.Error:  # already gone (it failed at once): its exit code tells
        pass
    job.save()
    return job


def _inherited_env() -> dict[str, str]:
    """The launcher's environment minus the UI's own secret: a training run has no use for the login token."""
    return {k: v for k, v in os.environ.items() if k != "POPULORA_UI_TOKEN"}


def _link_env(job: Job) -> dict[str, str]:
    """What the trainer needs to link its run to the job (tag and ``run_id`` file)."""
    return {runlayout.ENV_JOB_ID: job.id, runlayout.ENV_JOB_DIR: job.dir}


def launch_training(config_yaml: str, name: str = "", env: dict[str, str] | None = None,
                    root: str | Path | None = None, ray_address: str | None = None) -> Job:
    """Write the (already validated) config to the job dir and start ``populora train --config`` on it: here,
    waiting in the machine's queue for a slot, or as a Ray Job on the cluster at ``ray_address`` (Ray schedules
    those). Every local job waits in the one queue (a sweep's ``--parallel`` only caps how many of its own runs
    are in it at once)."""
    return _launch("train", config_yaml, name, env, root, ray_address)


def launch_eval(config_yaml: str, name: str = "", env: dict[str, str] | None = None,
                root: str | Path | None = None, ray_address: str | None = None) -> Job:
    """``populora eval --config`` on the (already validated) ``EvalConfig`` YAML, as ``launch_training`` runs a
    training: same supervisor, log, stop and queue. A stopped evaluation resumes where it stopped when launched
    again with the same config (its finished pairs are kept in its out dir)."""
    return _launch("eval", config_yaml, name, env, root, ray_address)


def launch_resume(run_id: str, name: str = "", env: dict[str, str] | None = None, root: str | Path | None = None,
                  config_yaml: str = "") -> Job:
    """``populora train --resume RUN_ID`` as a job (the Runs page's Resume): same supervisor, log, stop and queue
    as a launched training. The job knows its run from the start (``run_id`` is written before it runs), so the
    run's page shows this job's log and state at once, also while it waits in the queue. ``config_yaml`` (the
    run's config) only sizes its slots, as for a launch."""
    root = Path(root or jobs_dir())
    job_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    argv = [sys.executable, "-m", "populora.cli", "train", "--resume", run_id, "--quiet"]
    return start(argv, name=name or f"resume {run_id[:8]}", env=env, root=root, job_id=job_id, slots=max_parallel(),
                 files={runlayout.RUN_ID_FILE: run_id}, kind="train",
                 need=slots_needed("train", config_yaml) if config_yaml else 1)


def latest_for_run(run_id: str, root: str | Path | None = None) -> Job | None:
    """The newest job of ``run_id`` (its launch, or the latest resume of it), or None if none ran it from here.
    The newest, not the first: after a resume the run's state and log are the resume's."""
    return next((j for j in list_jobs(root) if j.run_id == run_id), None)


def _launch(kind: str, config_yaml: str, name: str, env: dict[str, str] | None, root: str | Path | None,
            ray_address: str | None) -> Job:
    root = Path(root or jobs_dir())
    job_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    if ray_address:
        return _submit_ray(kind, config_yaml, name, dict(env or {}), root, ray_address, f"populora-{job_id}")
    # the config is in place before the supervisor reads the argv that names it
    argv = [sys.executable, "-m", "populora.cli", kind, "--config", str(root / job_id / "config.yaml")]
    argv += ["--quiet"] if kind == "train" else []
    return start(argv, name=name, env=env, root=root, job_id=job_id, slots=max_parallel(),
                 files={"config.yaml": config_yaml}, kind=kind, need=slots_needed(kind, config_yaml))


def slots_needed(kind: str, config_yaml: str) -> int:
    """How many of the queue's slots (one per GPU) a job holds while it runs: a training on a local Ray with N
    GPU model workers (``ray.address: local``, ``ray.model_workers`` x ``ray.gpus_per_worker``, e.g. data-parallel
    on every GPU) takes that many; anything else one. A Ray cluster's own scheduler places a cluster run, and the
    config was validated by the caller.

    >>> slots_needed("train", "ray: {address: local, model_workers: 4, gpus_per_worker: 1}")
    4
    >>> slots_needed("train", "ray: {address: auto, model_workers: 4, gpus_per_worker: 1}"), slots_needed("eval", "run: x")
    (1, 1)
    """
    import math

    import yaml

    if kind != "train":
        return 1
    ray = (yaml.safe_load(config_yaml) or {}).get("ray") or {}
    if ray.get("address") != "local" or not ray.get("gpus_per_worker"):
        return 1
    return max(1, int(ray.get("model_workers") or 1) * math.ceil(float(ray["gpus_per_worker"])))


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


def stop(job: Job, timeout_s: float = 20.0) -> str:
    """SIGINT the job's process group (the trainer marks its run stopped); SIGKILL if it ignores us.
    A Ray Job is stopped through Ray (SIGTERM, which the trainer treats like SIGINT, then SIGKILL)."""
    if job.ray_address:
        if job.status in ("running", "starting"):
            ray_jobs.stop(job.ray_address, job.id)
            return _wait_stopped(job, timeout_s + 30)
        return job.status
    deadline = time.time() + 10
    while job.status == "starting" and time.time() < deadline:  # a SIGINT now would kill the supervisor itself
        time.sleep(0.1)
    if job.status not in ("running", "starting", "queued"):
        return job.status  # lost or ended: nothing of ours to signal
    Path(job.dir, STOP_FILE).touch()  # before the signal: however the process ends now, it was our stop
    if not _signal_group(job, signal.SIGINT):
        return job.status
    if _wait_stopped(job, timeout_s) in ("running", "starting", "queued"):
        _signal_group(job, signal.SIGKILL)
    return job.status


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


# ====================================================================== the supervisor process
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
    # a stop while queued ends the supervisor without running anything; once the child runs, SIGINT goes to the
    # whole group and the supervisor ignores it, to outlive the child and write its exit code
    # (blocked, not ignored: an ignored signal is inherited, so a stop arriving between fork and the child's reset
    # would be lost; a blocked one stays pending and reaches the child the moment it unblocks, see _default_signals)
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
        child = subprocess.Popen(job.argv, stdin=subprocess.DEVNULL, preexec_fn=_default_signals)
        code = child.wait()
    except Stopped as err:
        code = stop_code(err)  # stopped while queued, before anything ran: "stopped", like a trainer that caught it
    except OSError as err:
        print(f"error: could not start {job.argv[0]!r}: {err}", flush=True)
        code = 127
    finally:
        Path(job_dir, "exit_code").write_text(str(code))
        if slot is not None:
            slot.release()
        if job.slots:
            queue.leave(job)
    return code


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "supervise":
        sys.exit(supervise(sys.argv[2]))
    print("usage: python -m populora.platform.jobs supervise JOB_DIR", file=sys.stderr)
    sys.exit(2)
