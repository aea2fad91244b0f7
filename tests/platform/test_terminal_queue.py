"""A ``populora train`` typed in a terminal waits in the machine's one job queue (platform/jobs/terminal.py): while
a UI job holds the only slot it waits, says so and is listed by ``populora jobs`` as waiting #1; once the slot is
free it holds it (``populora jobs``: 1 running, the terminal's job) and trains; its record ends with its exit."""

import os
import signal
import subprocess
import sys

import pytest
from conftest import HOLD, cli_in_process, wait_for, wait_for_status

from populora.platform.jobs import jobs, queue, terminal

TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4", "--set", "steps=1",
        "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=2", "--set", "tasks.rollouts=2", "--set", "tasks.seed_rounds=0"]


def _terminal_entry():
    return next((e for e in queue.snapshot() if e.job.name.startswith("terminal: ")), None)


def _queued_behind_a_ui_job(tmp_path, monkeypatch, capsys, holder_name: str, command: list[str], kind: str, **popen):
    """A UI job (``holder_name``) holds the only slot; ``populora <command>`` typed in a terminal waits #1 behind it
    and ``populora jobs`` lists it with its kind: (the holder, the terminal's process, its queue entry)."""
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "1")
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    holder = jobs.start([sys.executable, "-c", HOLD], name=holder_name, root=tmp_path / "jobs", slots=1)
    assert wait_for_status(holder, ("running",)) == "running"
    proc = subprocess.Popen([sys.executable, "-m", "populora.cli", *command], env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
    try:
        entry = wait_for(_terminal_entry, 120, f"the terminal's {kind} in the queue", interval=0.2)
        assert entry.position == 1 and entry.job.pid == proc.pid and entry.job.kind == kind
        capsys.readouterr()
        assert cli_in_process("jobs") == 0
        out = capsys.readouterr().out
        assert "1 slot(s), 1 running, 1 waiting" in out and f"#1       {kind:<5} queued    {entry.job.id}" in out, out
    except BaseException:
        proc.kill()
        jobs.stop(holder, timeout_s=10)
        raise
    return holder, proc, entry


@pytest.mark.slow
def test_a_terminal_train_waits_for_the_ui_jobs_slot_and_is_listed_by_populora_jobs(mlflow_store, tmp_path, own_queue,
                                                                                   monkeypatch, capsys):
    holder, proc, entry = _queued_behind_a_ui_job(tmp_path, monkeypatch, capsys, "league stand-in",
                                                  ["train", *TINY, "--quiet"], "train")
    try:
        assert jobs.stop(holder) == "stopped"
        wait_for(lambda: (e := _terminal_entry()) is not None and e.position is None, 120, "the terminal's train to hold the slot",
                 interval=0.2)
        capsys.readouterr()
        assert cli_in_process("jobs") == 0
        out = capsys.readouterr().out
        assert "1 slot(s), 1 running, 0 waiting" in out and f"slot     train running   {entry.job.id}" in out, out
        text, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, text[-3000:]
    assert "waiting in the machine's job queue" in text and "#1 in line for 1 of 1 slot(s)" in text, text[-3000:]
    done = jobs.Job.load(entry.job.dir)
    assert done.status == "finished" and queue.snapshot() == []
    assert terminal.FOLDER in entry.job.dir and done.id not in {j.id for j in jobs.list_jobs()}  # not a listed job dir


def _ctrl_c_as_in_a_terminal() -> None:
    """A command typed in a terminal takes Ctrl-C (SIGINT, what ``populora jobs --stop`` sends); a test run from a
    background shell (``nohup make test &``) starts its children with SIGINT ignored, which they would keep."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_terminal_eval_waits_in_the_one_queue_and_is_listed_by_populora_jobs(mlflow_store, tmp_path, own_queue,
                                                                               monkeypatch, capsys):
    """The issue's finding was a terminal's train beside a league; an evaluation loads the model and generates too:
    it waits while a UI job holds the only slot, listed (kind eval) with its place, and a stop while it waits ends
    its record (exit 130) without it ever taking the slot."""
    holder, proc, entry = _queued_behind_a_ui_job(
        tmp_path, monkeypatch, capsys, "training stand-in",
        ["eval", "--base-only", "--tiny-random", "--benchmarks", "humaneval_plus", "--limit", "1"], "eval",
        start_new_session=True, preexec_fn=_ctrl_c_as_in_a_terminal)
    try:
        assert jobs.stop(entry.job, timeout_s=60) == "stopped"  # populora jobs --stop ID, as for any job
        text, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        jobs.stop(holder, timeout_s=10)
    assert "waiting in the machine's job queue" in text and "#1 in line for 1 of 1 slot(s)" in text, text[-3000:]
    assert jobs.Job.load(entry.job.dir).exit_code == 130 and queue.snapshot() == []
