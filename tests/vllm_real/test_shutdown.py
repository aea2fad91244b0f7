"""A stopped, failed or killed run leaves no vLLM engine process and no Ray worker behind, on the real vLLM CPU
engine (tiny Qwen2): checked by process listing (psutil), every process the trainer started, however deep.

* local path, SIGTERM (``kill``, ``docker stop``; the UI's Stop and Ctrl-C reach the trainer as the same
  KeyboardInterrupt) mid-run: the trainer closes its engine on the way out (``Trainer.close``);
* local path, a failed step: the same ``finally``;
* local path, kill -9: no code runs in the trainer; the reaper started with the engine ends it (reaper.py);
* data-parallel path (2 Ray workers, a vLLM engine each), a worker lost mid-run (kill -9 of its process): the run
  ends FAILED (WorkerLost) and every engine and Ray process is gone.

Each run pauses (or fails) after step 1 (``PAUSED`` below), so a signal lands mid-run, never in a race. Each starts
an engine (two on the data-parallel path), 1-2 min on a 2-core machine: `make test-vllm` runs SIGTERM (the trainer's
``finally``, which every stop, Ctrl-C and failure goes through); the failed step (the same ``finally``), kill -9 (the
reaper: its logic is tested with plain processes in tests/platform/test_reaper.py, and the paper path checks that
nothing outlives its trainer: its end in `make test`, a kill -9 in `make test-paper`) and the lost worker are marked ``paper`` and run with
`make test-paper`."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

pytestmark = pytest.mark.slow
TINY = ["steps=3", "model.base=tiny-qwen2", "model.generation=vllm", "model.lora_rank=8", "model.device=cpu",
        "tasks.max_new_tokens_propose=16", "tasks.max_new_tokens_solve=8", "tasks.tasks_per_teacher=1",
        "population.teachers=1", "population.students=1", "matchmaking.teachers_per_student=1", "evolution.every=0",
        "optim.max_seq_len=512", "tasks.seed_rounds=0",  # the hand-written seed tasks: no step-0 proposals
        # the engine in processes of its own, as on GPUs: what the reaper and Trainer.close must end (inline, the
        # default on vLLM's CPU build, the engine ends with the process that holds it)
        "model.vllm_engine=process"]
DATA_PARALLEL = ["ray.address=local", "ray.placement=data_parallel", "ray.model_workers=2", "ray.sandbox_workers=1",
                 "ray.cpus_per_model_worker=0.5", "ray.cpus_per_sandbox_worker=0.5",
                 "tasks.tasks_per_teacher=2"]  # 2 proposals: rows for both workers in every step

# `populora train`, paused (or failing) once Trainer.step has returned at step 1 (tests/conftest.py's idea)
PAUSED = """
import sys, time
from pathlib import Path
import populora.cli
from populora.training.loop import Trainer
mode, marker = sys.argv[1], Path(sys.argv[2])
original = Trainer.step
def paused(self, *args, **kwargs):  # Trainer.step(shape=None): a budget's smaller last steps
    out = original(self, *args, **kwargs)
    if self.step_index == 1:
        if mode == "fail":
            raise RuntimeError("a failed step (test)")
        import psutil
        started, lines = psutil.Process().children(recursive=True), []
        for p in started:
            try:
                lines.append(f"{p.pid} {p.create_time()!r} {p.name()}")
            except psutil.Error:  # ended while listed
                pass
        marker.write_text(chr(10).join(lines))
        if mode == "lose":  # a data-parallel worker's process dies; step 2 finds it gone
            engine = next(p for p in started if p.name() == "VLLM::EngineCore")
            psutil.Process(engine.ppid()).kill()  # the Ray worker that holds this engine
            return out
        time.sleep(3600)
    return out
Trainer.step = paused
if __name__ == "__main__":
    sys.exit(populora.cli.main(sys.argv[3:]))
"""


def _start(tmp_path, mode: str, extra=()):
    script = tmp_path / "paused_train.py"
    script.write_text(PAUSED)
    marker = tmp_path / "paused"
    args = [a for o in [*TINY, f"output_dir={tmp_path / 'runs'}", *extra] for a in ("--set", o)]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "POPULORA_JOBS_DIR": str(tmp_path / "jobs")}
    proc = subprocess.Popen([sys.executable, str(script), mode, str(marker), "train", "--quiet", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    return proc, marker


def _wait_paused(proc, marker, timeout=1500):
    deadline = time.time() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the trainer ended (exit {proc.returncode}) before pausing:\n{proc.stdout.read()[-4000:]}")
        assert time.time() < deadline, "the trainer did not reach step 1"
        time.sleep(0.5)


def _descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _all_gone(procs: list[psutil.Process], timeout: float = 120) -> list[str]:
    """The processes of ``procs`` still alive after ``timeout`` s (named), waiting for each to end."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [f"{p.pid} {p.name()}" for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _names(procs) -> set[str]:
    out = set()
    for p in procs:
        try:
            out.add(p.name())
        except psutil.Error:
            pass
    return out


def test_sigterm_mid_run_on_the_local_path_leaves_no_engine(tmp_path):
    proc, marker = _start(tmp_path, "pause")
    _wait_paused(proc, marker)
    started = _descendants(proc.pid)
    assert "VLLM::EngineCore" in _names(started), _names(started)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert _all_gone(started) == [], out[-3000:]


@pytest.mark.paper
def test_a_failed_step_on_the_local_path_leaves_no_engine(tmp_path):
    proc, marker = _start(tmp_path, "fail")
    engine = []
    while proc.poll() is None:  # the engine's processes, seen while the run lives (it fails after step 1)
        try:
            engine = [p for p in _descendants(proc.pid) if p.name().startswith("VLLM::")] or engine
        except psutil.Error:
            pass
        time.sleep(0.5)
    out = proc.stdout.read()
    assert proc.returncode == 1 and "a failed step (test)" in out, out[-3000:]
    assert engine, "the engine was never seen"
    assert _all_gone(engine) == [], out[-3000:]


@pytest.mark.paper
def test_kill_9_on_the_local_path_leaves_no_engine(tmp_path):
    proc, marker = _start(tmp_path, "pause")
    _wait_paused(proc, marker)
    started = _descendants(proc.pid)
    assert "VLLM::EngineCore" in _names(started)
    proc.kill()
    proc.wait()
    assert _all_gone(started) == []  # orphans without the reaper (measured: still up a minute later)


@pytest.mark.paper
def test_a_lost_data_parallel_worker_leaves_no_engine_and_no_ray_worker(tmp_path):
    proc, marker = _start(tmp_path, "lose", DATA_PARALLEL)
    _wait_paused(proc, marker)
    # what the trainer had started at step 1 (pid, start time, name), written by it: the run goes on at once
    started = [line.split(" ", 2) for line in marker.read_text().splitlines()]
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 75 and "of 2 failed during" in out, out[-3000:]  # WorkerLost: the run FAILED, exit 75 (transient: restart.TEMPFAIL)
    assert sum(name == "VLLM::EngineCore" for _, _, name in started) == 2, started  # one engine per worker

    def alive(pid, created):
        try:
            p = psutil.Process(int(pid))
            return repr(p.create_time()) == created and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.time() + 120
    while any(alive(pid, created) for pid, created, _ in started) and time.time() < deadline:
        time.sleep(0.5)
    assert [f"{pid} {name}" for pid, created, name in started if alive(pid, created)] == [], out[-3000:]
