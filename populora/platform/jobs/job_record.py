"""The record of a background job (``jobs.py`` starts and stops jobs, ``supervisor.py`` runs one, ``queue.py``
holds them in line): its ``job.json`` in its own dir under the jobs dir, and its status read from that dir and its
supervisor process (see jobs.py for the layout of a job dir and why a pid is checked with its start time)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from populora.platform.jobs import ray_jobs
from populora.platform.store import runlayout
from populora.platform.jobs.stopping import is_stop_code
from populora.platform.store.tracking import tracking_uri


START_GRACE_S = 120.0  # a job with no supervisor pid this long after its launch never got one: it reads "lost"


def jobs_dir() -> Path:
    """``POPULORA_JOBS_DIR`` or ``.populora/jobs`` next to the default MLflow store (the working dir)."""
    return Path(os.environ.get("POPULORA_JOBS_DIR") or Path.cwd() / ".populora" / "jobs")


@dataclass
class Job:
    id: str
    argv: list[str]
    dir: str
    created: float
    pid: int | None = None
    name: str = ""
    env: dict[str, str] = field(default_factory=dict)
    ray_address: str | None = None  # set: a Ray Job, ``id`` is its submission id
    pid_started: float | None = None  # the supervisor's start time (psutil): with ``pid``, what makes it ours
    slots: int | None = None  # set: wait in the queue for one of this many slots before running
    kind: str = "train"  # train | eval | sweep: what the job runs (the UI shows and links it accordingly)
    queue: str | None = None  # the queue dir it waits in (platform/jobs/queue.py), set with ``slots``
    need: int = 1  # slots it holds at once: a training on N local GPUs (Ray model workers) takes N of them
    max_restarts: int = 0  # a training: restarts from its last checkpoint after a transient failure (restart.py)
    host: str = ""  # the machine its supervisor runs on: "lost" says the supervisor is gone only when read there

    # ------------------------------------------------------------------ on-disk state
    @property
    def log_path(self) -> Path:
        return Path(self.dir) / "log.txt"

    @property
    def exit_code(self) -> int | None:
        path = Path(self.dir) / EXIT_FILE
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return None

    @property
    def status(self) -> str:
        """queued | running | finished | failed | stopped | lost (the supervisor vanished without an exit code,
        or its pid now belongs to another process; read on another machine than ``host``, a live job reads lost too;
        or it never got one: no pid ``START_GRACE_S`` after the launch, its launcher died before starting it, and
        a job "starting" for ever would hold the queue's first place and every job behind it)."""
        if self.ray_address:
            return ray_jobs.status(self.ray_address, self.id)
        code = self.exit_code
        if code is None:
            if not self.pid:
                return "lost" if time.time() - self.created > START_GRACE_S else "starting"
            if self.process() is None:  # gone without an exit code: our stop's SIGKILL after its grace, or lost
                return "stopped" if Path(self.dir, STOP_FILE).exists() else "lost"
            if not Path(self.dir, READY_FILE).exists():  # the supervisor is still starting: it cannot take a stop yet
                return "starting"
            return "queued" if self.slots and not Path(self.dir, SLOT_FILE).exists() else "running"
        if code == 0:
            return "finished"
        # 130 / 143 / -SIGINT: the trainer ended on KeyboardInterrupt (our stop, or SIGTERM); a SIGKILL (OOM killer) is a crash.
        # A stop we sent counts whatever the exit code: a SIGINT during Python's own start-up exits 1.
        if is_stop_code(code) or Path(self.dir, STOP_FILE).exists():
            return "stopped"
        return "failed"

    def _sync_ray_log(self) -> None:
        text = ray_jobs.logs(self.ray_address, self.id) if self.ray_address else None
        if text is not None:
            tmp = self.log_path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(self.log_path)

    def log_tail(self, lines: int = 40) -> str:
        self._sync_ray_log()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def run_id(self) -> str | None:
        """The MLflow run the job's trainer started: ``<job dir>/run_id``; for a Ray Job, the run tagged with the
        job's id in the job's store (then remembered in that file)."""
        found = runlayout.read_run_id(Path(self.dir))
        if found is None and self.ray_address:
            found = self._run_by_tag()
            if found:
                runlayout.write_run_id(Path(self.dir), found)
        return found

    def _run_by_tag(self) -> str | None:
        from mlflow import MlflowClient

        try:
            client = MlflowClient(tracking_uri=self.env.get("MLFLOW_TRACKING_URI") or tracking_uri())
            return runlayout.run_of_job(client, self.id)
        except Exception:  # noqa: BLE001 - store unreachable: no run yet, as far as a UI page can tell
            return None

    def process(self) -> psutil.Process | None:
        """The job's supervisor if it still runs: same pid AND same start time; else None (never signal then)."""
        if not self.pid or self.pid_started is None:  # a job.json without a start time cannot be told apart
            return None
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.pid_started) > START_TIME_TOLERANCE_S or not _alive(self.pid):
                return None
            return proc
        except psutil.Error:  # NoSuchProcess, AccessDenied, ZombieProcess
            return None

    def save(self) -> None:
        Path(self.dir, "job.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, job_dir: str | Path) -> "Job":
        data = json.loads(Path(job_dir, "job.json").read_text())
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


EXIT_FILE = "exit_code"  # the job's exit code, written once it ended (by its supervisor, or by a launch that failed)
READY_FILE = "supervising"  # written by the supervisor once its signal handling is set: a stop is safe from then
SLOT_FILE = "slot"  # written by the supervisor once it holds a slot: the job leaves the queue
STOP_FILE = "stop_requested"  # written by stop() before it signals: the job ended because we stopped it
START_TIME_TOLERANCE_S = 0.05  # psutil's create_time is exact to the clock tick (10 ms)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by us) still answers kill(0): reap it if it is our child
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:  # not our child, or our reaper thread (jobs.reap) reaped it just now
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False
