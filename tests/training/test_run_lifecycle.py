"""A run ends in MLflow whatever stops it: an error before the model loads, a full disk mid-run, SIGTERM while
the model is still loading, Ctrl-C mid-run. Each test runs the real CLI against a fresh sqlite store: in a
subprocess where the process is the subject (its signals), the error before the model loads and the full disk in
this process."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import cli_in_process, paused_train_cmd, populora_cmd, train_in_process, wait_for, wait_for_marker

from populora.platform.store import runlayout as rl
from populora.training.run import checkpoint

TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
        "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=2", "--set", "tasks.rollouts=2"]


def _parent_runs(uri):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("populora")
    runs = client.search_runs([exp.experiment_id], max_results=100) if exp else []
    return client, [r for r in runs if rl.PARENT not in r.data.tags]


def _error_file(client, run_id, tmp_path) -> str:
    return Path(client.download_artifacts(run_id, rl.ERROR_FILE, str(tmp_path))).read_text()


def test_a_run_that_fails_before_the_model_loads_ends_failed_with_its_error(mlflow_store, tmp_path, capsys):
    code = cli_in_process("train", "--set", "model.base=/no/such/model.gguf", "--quiet")
    assert code == 2 and "/no/such/model.gguf" in capsys.readouterr().err
    client, parents = _parent_runs(mlflow_store)
    assert len(parents) == 1
    run = parents[0]
    assert run.info.status == "FAILED" and run.data.tags[rl.STATUS] == rl.FAILED
    assert run.data.tags[rl.ERROR].startswith("ModelError: ") and "/no/such/model.gguf" in run.data.tags[rl.ERROR]
    assert "Traceback" in _error_file(client, run.info.run_id, tmp_path)


def test_a_run_that_hits_a_full_disk_ends_failed_with_the_one_line(mlflow_store, tmp_path, monkeypatch, capsys):
    """A full disk before the first checkpoint: one line, exit 1, FAILED with that line; the traceback (with the
    original error) in error.txt. The fault suite (tests/faults) has the full disk met at each write."""
    def save(*args, **kwargs):  # the checkpoint write fails as on a full disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "save", save)
    code = train_in_process("--set", "steps=1", "--set", "tasks.seed_rounds=0", *TINY, "--quiet")  # seed programs: no seeding
    last = capsys.readouterr().err.rstrip().splitlines()[-1]
    client, parents = _parent_runs(mlflow_store)
    run = parents[0]
    assert code == 1 and last.startswith(f"error: disk full writing the files of run {run.info.run_id} to "), last
    assert last.endswith("free space, then start the run again (it failed before its first checkpoint)"), last
    assert run.info.status == "FAILED" and run.data.tags[rl.STATUS] == rl.FAILED
    assert run.data.tags[rl.ERROR] == f"DiskFull: {last.removeprefix('error: ')}"
    text = _error_file(client, run.info.run_id, tmp_path)
    assert "checkpoint" in text and "No space left on device" in text  # the traceback shows where it happened


def test_sigterm_during_the_setup_stops_the_run(mlflow_store, tmp_path):
    """The run exists (and its job knows its id) before the backend loads the model; a SIGTERM during the set-up
    (here: the model loaded and the members' adapters added, the trainer paused there, so the signal is an event,
    not a race with the first step), as `docker stop` or the UI's Stop may send, ends the run stopped instead of
    leaving it RUNNING. A stop a finalizer swallows there ends the same (tests/platform/test_stopping.py)."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = {**os.environ, rl.ENV_JOB_DIR: str(job_dir), rl.ENV_JOB_ID: "j1"}
    marker = tmp_path / "set_up"
    proc = subprocess.Popen(paused_train_cmd(marker, 0, "--set", "steps=50", *TINY, "--quiet", after="_init_population"),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_marker(marker, proc)
        run_id = rl.read_run_id(job_dir)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:]
    assert "Traceback" not in out and out.rstrip().endswith("stopped before the first step"), out[-2000:]
    client, parents = _parent_runs(mlflow_store)
    run = client.get_run(run_id)
    assert run.info.status == "KILLED" and run.data.tags[rl.STATUS] == rl.STOPPED, out[-2000:]
    assert rl.ERROR not in run.data.tags  # a stop is not a failure


def test_ctrl_c_mid_run_says_how_to_resume_and_exits_130(mlflow_store, tmp_path):
    """Ctrl-C (the UI's Stop sends SIGINT) after a step: one last line naming the step and the resume command, no
    traceback, exit code 130 (the shell's code for SIGINT), the run KILLED in MLflow with that line as its note."""
    from mlflow import MlflowClient

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = {**os.environ, rl.ENV_JOB_DIR: str(job_dir), rl.ENV_JOB_ID: "j1"}
    marker = tmp_path / "after_step_1"  # the trainer waits after step 1 until the SIGINT (no race with the run's end)
    proc = subprocess.Popen(paused_train_cmd(marker, 1, "--set", "steps=30", "--set", "checkpoint.every=1",
                                             "--set", "tasks.seed_rounds=0", *TINY, "--quiet"),  # seed programs: no seeding
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_marker(marker, proc)
        run_id = rl.read_run_id(job_dir)
        client = MlflowClient(mlflow_store)
        assert client.get_run(run_id).data.tags.get(rl.PROGRESS) == "1/30"  # a first logged step
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    last = out.rstrip().splitlines()[-1]
    assert proc.returncode == 130 and "Traceback" not in out, out[-2000:]
    assert last.startswith("stopped at step ") and last.split()[3].endswith("/30;"), last
    assert f"resume with `populora train --resume {run_id}`" in last
    run = client.get_run(run_id)
    assert run.info.status == "KILLED" and run.data.tags[rl.STATUS] == rl.STOPPED
    assert run.data.tags[rl.NOTE].startswith("stopped at step ")
