"""What the job supervisor does when its trainer ends badly: say why, end the run if the trainer could not, and
restart it from its last checkpoint when the cause was transient (``populora train --max-restarts N``, the Launch
and sweep forms' "restarts" field; ``Job.max_restarts``).

A week-long run meets faults that a resume cures: a lost Ray worker, a killed process, the MLflow store
unreachable past the client's retries. Ray Train's ``FailureConfig(max_failures)`` and TorchElastic restart from
the last checkpoint by themselves; so does the supervisor, with backoff, up to N times. Each restart is logged on
the run (tags ``populora.restarts`` and ``populora.restart.<n>``) and in the job's log. Never restarted:

- a stop (the user's Stop, Ctrl-C, SIGTERM: ``stop_requested`` or a stop's exit code),
- a failure that is not transient (a bug, bad input, a full disk, a CUDA out-of-memory: the same again),
- a run that failed the same way at the same step before (it would again), or one that used its N restarts.

How the supervisor knows the cause: a trainer that failed for a transient cause exits ``TEMPFAIL`` (75, BSD's
EX_TEMPFAIL, "try again later") after writing ``<job dir>/failure.json`` (cause, step, message; ``write_failure``);
a trainer killed by a signal no stop sent (SIGKILL: the OOM killer, kill -9) wrote nothing, so the supervisor
reads its step from the heartbeat file (``heartbeat.py``), ends its run FAILED (``lost_runs.end_dead``: it knows
the process is dead) and prints the memory advice the trainer left in the job dir at start (training/run/oom.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from populora.platform.jobs import heartbeat, lost_runs
from populora.platform.store import runlayout
from populora.platform.files import write_atomic
from populora.platform.jobs.stopping import STOP_SIGNALS, is_stop_code
from populora.platform.store.tracking import Tracker, is_locked_error

TEMPFAIL = 75                     # os.EX_TEMPFAIL: ended FAILED for a transient cause; failure.json says which
FAILURE_FILE = "failure.json"     # <job dir>: the trainer's own account of a failure (cause, step, message)
RESTARTS_FILE = "restarts.json"   # <job dir>: the restarts so far, [{cause, step, backoff_s, at}]
ADVICE_FILE = "memory_advice.txt"  # <job dir>: written by the trainer at start (training/run/oom.py), printed after a SIGKILL
BACKOFF_ENV = "POPULORA_RESTART_BACKOFF_S"
BACKOFF_S, BACKOFF_MAX_S = 30.0, 600.0
WORKER_LOST, STORE_UNREACHABLE, KILLED = "worker lost", "store unreachable", "killed"  # transient causes


@dataclass(frozen=True)
class Failure:
    cause: str           # "killed (SIGKILL)", "worker lost", "store unreachable", "exit 1", ...
    step: int | None     # the step the trainer was on (None: before its first step, or unknown)
    message: str         # the one line the job's log and the run get
    transient: bool      # a resume may cure it


def backoff_s(n: int, base: float | None = None) -> float:
    """Seconds to wait before the ``n``-th restart (1, 2, ...): ``base`` doubling, at most 10 minutes.

    >>> [backoff_s(n, 30) for n in (1, 2, 3, 6)]
    [30.0, 60.0, 120.0, 600.0]
    """
    if base is None:
        text = os.environ.get(BACKOFF_ENV, "").strip()
        base = float(text) if text else BACKOFF_S
    return float(min(BACKOFF_MAX_S, base * 2 ** (n - 1)))


# ====================================================================== the trainer's side
# what a transient failure looks like in an exception's chain, by class name (the classes live in ray, requests and
# urllib3, which the supervisor never imports): a lost Ray worker, the store unreachable past the client's retries
_WORKER_LOST = {"WorkerLost", "RayActorError", "ActorDiedError", "ActorUnavailableError", "OwnerDiedError",
                "NodeDiedError", "WorkerCrashedError"}
_UNREACHABLE = {"ConnectionError", "MaxRetryError", "NewConnectionError", "ConnectTimeout", "ConnectTimeoutError",
                "ReadTimeout", "ConnectionRefusedError", "ConnectionResetError"}


def transient_cause(err: BaseException | None) -> str | None:
    """The transient cause in ``err``'s chain (``WORKER_LOST``, ``STORE_UNREACHABLE``), None for anything else.

    >>> transient_cause(RuntimeError("x")), transient_cause(ConnectionRefusedError(111, "refused"))
    (None, 'store unreachable')
    >>> try:
    ...     raise RuntimeError("step failed") from ConnectionResetError()
    ... except RuntimeError as e:
    ...     transient_cause(e)
    'store unreachable'
    """
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        name = type(err).__name__
        if name in _WORKER_LOST:
            return WORKER_LOST
        if name in _UNREACHABLE or "Max retries exceeded" in str(err) or is_locked_error(err):
            return STORE_UNREACHABLE
        err = err.__cause__ or err.__context__
    return None


def write_failure(cause: str, step: int | None, message: str) -> None:
    """Inside a local job: the trainer's account of a transient failure, read by its supervisor."""
    job_dir = runlayout.job_dir_from_env()
    if job_dir is not None:
        try:
            write_atomic(job_dir / FAILURE_FILE, json.dumps({"cause": cause, "step": step, "message": message}))
        except OSError:  # a full disk: the supervisor then sees a bare exit 75, still transient
            pass


# ====================================================================== the supervisor's side
def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def classify(code: int, stopped: bool, job_dir: Path) -> Failure | None:
    """How the trainer's process ended (``code``: ``Popen.returncode``), None for a success or a stop."""
    if code == 0 or stopped or is_stop_code(code):
        return None
    beat = heartbeat.read_file(job_dir) or {}
    record = _read_json(job_dir / FAILURE_FILE) or {}
    (job_dir / FAILURE_FILE).unlink(missing_ok=True)  # one account per attempt
    step = record.get("step", beat.get("step"))
    at = f" at step {step}" if step else " before its first step"
    if code < 0:  # killed by a signal no stop sent: it ran no code, its run is still RUNNING
        name = _signal_name(code)
        if -code == signal.SIGKILL:
            advice = _read_text(job_dir / ADVICE_FILE) or ("lower optim.micro_batch or tasks.max_new_tokens_propose / "
                                                           "_solve (no plan figures: the trainer left none)")
            message = (f"the trainer was killed by SIGKILL{at} with no stop asked for: most likely the kernel's "
                       f"OOM killer{_oom_evidence()} (this machine ran out of memory); {advice}")
        else:
            message = f"the trainer was killed by {name}{at} with no stop asked for"
        return Failure(f"{KILLED} ({name})", step, message, True)
    if code == TEMPFAIL:
        return Failure(record.get("cause", "transient"), step, record.get("message", f"exit {code}{at} (transient)"), True)
    return Failure(f"exit {code}", step, f"the trainer failed{at} (exit {code}; its log above says why)", False)


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _oom_evidence() -> str:
    """What this cgroup's memory.events says (cgroup v2: ``oom_kill``, kills by any OOM killer), if readable."""
    try:
        for line in Path("/sys/fs/cgroup/memory.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip() != "0":
                return f" (this cgroup's memory.events counts {value.strip()} OOM kill(s))"
    except OSError:
        pass
    return ""


def decide(failure: Failure | None, history: list[dict], max_restarts: int) -> tuple[bool, str]:
    """(restart?, why not). ``history``: the restarts so far (``restarts.json``).

    >>> f = Failure("killed (SIGKILL)", 3, "m", True)
    >>> decide(f, [], 1), decide(f, [{"cause": "killed (SIGKILL)", "step": 3}], 5)[0], decide(f, [{"cause": "x", "step": 3}], 1)[0]
    ((True, ''), False, False)
    """
    if failure is None:
        return False, ""
    if not failure.transient:
        return False, f"not restarted: {failure.cause} is not a transient failure"
    if any(h.get("cause") == failure.cause and h.get("step") == failure.step for h in history):
        return False, f"not restarted: it failed the same way ({failure.cause}) at the same step ({failure.step}) before"
    if len(history) >= max_restarts:
        return False, f"not restarted: --max-restarts {max_restarts} used" if max_restarts else ""
    return True, ""


def end_run(job_dir: Path, failure: Failure) -> str | None:
    """The run of a trainer that died without ending it, ended FAILED with the failure's message (the supervisor
    knows the process is dead). Returns the run id (None: the trainer never created its run)."""
    run_id = runlayout.read_run_id(job_dir)
    if run_id is None:
        return None
    try:
        lost_runs.end_dead(Tracker(), run_id, failure.message[:1000])
    except Exception as err:  # noqa: BLE001 - the store unreachable: readers still see it crashed from its heartbeat
        say(f"could not end run {run_id} FAILED in MLflow: {type(err).__name__}: {str(err)[:200]}")
    return run_id


def log_restart(run_id: str, n: int, failure: Failure, wait: float) -> None:
    """The restart on the run: ``populora.restarts`` = n, ``populora.restart.<n>`` = what and why."""
    text = f"after {failure.cause} at step {failure.step or 0}: resumed from its last checkpoint after {wait:.0f} s"
    try:
        Tracker().set_tags(run_id, {runlayout.RESTARTS: str(n), f"{runlayout.RESTART_PREFIX}{n}": text})
    except Exception as err:  # noqa: BLE001 - the resume itself will say whether the store is back
        say(f"could not log restart {n} on run {run_id}: {type(err).__name__}: {str(err)[:200]}")


def wait_unless_stopped(seconds: float) -> int | None:
    """Sleep ``seconds`` (the stop signals are blocked in the supervisor); a stop meanwhile ends the wait at once
    and is returned (its signal number)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        got = signal.sigtimedwait(STOP_SIGNALS, left)
        if got is not None:
            return got.si_signo
    return None


def resume_argv(run_id: str) -> list[str]:
    return [sys.executable, "-m", "populora.cli", "train", "--resume", run_id, "--quiet"]


def history(job_dir: Path) -> list[dict]:
    return _read_json(job_dir / RESTARTS_FILE) or []


def record(job_dir: Path, failure: Failure, wait: float) -> list[dict]:
    done = history(job_dir) + [dict(asdict(failure), backoff_s=wait, at=time.time())]
    write_atomic(job_dir / RESTARTS_FILE, json.dumps(done))
    return done


def say(line: str) -> None:
    print(f"[populora supervisor] {line}", flush=True)
