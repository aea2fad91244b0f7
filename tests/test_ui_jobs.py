"""Background jobs (``populora.platform.jobs``), the ``populora ui`` entry point and the Launch form's validation."""

from __future__ import annotations

import sys
import time

import pytest

from populora.platform import jobs, runlayout

# links itself to its job as the trainer does (runlayout.record_job_run), and prints a decoy run line: the job
# must not take its run id from the output
SLEEPER = ("import time\nfrom populora.platform import runlayout\n"
           "print('run ffffffffffffffffffffffffffffffff: decoy', flush=True)\n"
           "runlayout.record_job_run('0123456789abcdef0123456789abcdef')\n"
           "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('interrupted', flush=True)\n    raise\n")


def _wait(job, statuses, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline and job.status not in statuses:
        time.sleep(0.1)
    return job.status


def test_job_runs_survives_on_disk_and_reports_exit(tmp_path):
    job = jobs.start([sys.executable, "-c", "print('hello')"], name="t", root=tmp_path)
    assert _wait(job, ("finished", "failed")) == "finished"
    again = jobs.get_job(job.id, tmp_path)  # a fresh UI process finds it from disk alone
    assert again.status == "finished" and again.exit_code == 0 and "hello" in again.log_tail()
    failing = jobs.start([sys.executable, "-c", "raise SystemExit(3)"], root=tmp_path)
    assert _wait(failing, ("finished", "failed")) == "failed"
    assert [j.id for j in jobs.list_jobs(tmp_path)] == [failing.id, job.id]


def test_stop_interrupts_the_process_group_and_reads_the_run_id_the_job_wrote(tmp_path):
    job = jobs.start([sys.executable, "-c", SLEEPER], root=tmp_path)
    deadline = time.time() + 15
    while job.run_id is None and time.time() < deadline:
        time.sleep(0.1)
    assert job.run_id == "0123456789abcdef0123456789abcdef" and job.status == "running"
    assert jobs.stop(job) == "stopped"
    assert "interrupted" in job.log_tail()  # the child saw KeyboardInterrupt: the trainer's clean-stop path


def test_a_ray_job_finds_its_run_by_the_job_id_tag(tmp_path, monkeypatch):
    """A Ray Job's trainer runs on the cluster, away from the job dir: the run carries the job's id as a tag
    (from POPULORA_JOB_ID, which the launcher sets), and the job finds it in its store, then remembers it."""
    from populora.training.config import TrainConfig
    from populora.training.run_log import RunLog

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    job_dir = tmp_path / "jobs" / "populora-x"
    job_dir.mkdir(parents=True)
    job = jobs.Job(id="populora-x", argv=["x"], dir=str(job_dir), created=1.0, env={"MLFLOW_TRACKING_URI": uri},
                   ray_address="http://127.0.0.1:1")
    assert job.run_id is None
    RunLog.start(TrainConfig(name="other"))  # a run of no job, in the same store
    monkeypatch.setenv(runlayout.ENV_JOB_ID, "populora-x")
    log = RunLog.start(TrainConfig(name="mine"))
    assert job.run_id == log.run_id
    assert runlayout.read_run_id(job_dir) == log.run_id  # remembered: no store query next time


def test_argv_is_never_a_shell_string(tmp_path):
    with pytest.raises(TypeError):
        jobs.start("echo hi; rm -rf /", root=tmp_path)
    bad = jobs.start(["/no/such/program"], root=tmp_path)
    assert _wait(bad, ("finished", "failed")) == "failed" and "could not start" in bad.log_tail()


def test_launch_training_runs_populora_train_on_the_written_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = jobs.launch_training("name: x\nsteps: 0\n", name="x", root=tmp_path / "jobs")
    assert job.argv[1:5] == ["-m", "populora.cli", "train", "--config"]
    assert job.argv[5] == str(tmp_path / "jobs" / job.id / "config.yaml") and "steps: 0" in open(job.argv[5]).read()
    assert _wait(job, ("finished", "failed"), timeout=120) == "failed"
    assert "steps" in job.log_tail() and "greater than or equal to 1" in job.log_tail()  # the trainer's own check


# ====================================================================== populora ui
def test_ui_defaults_to_localhost_headless():
    from populora.ui.cli import build_argv

    argv = build_argv()
    assert argv[1:4] == ["-m", "streamlit", "run"] and argv[4].endswith("app.py")
    opts = dict(zip(argv[5::2], argv[6::2]))
    assert opts["--server.address"] == "127.0.0.1" and opts["--server.port"] == "8501" and opts["--server.headless"] == "true"


def test_ui_main_flags(capsys):
    from populora.ui.cli import ui_main

    assert ui_main(["--dry-run", "--host", "0.0.0.0", "--port", "9000"]) == 0
    out = capsys.readouterr().out
    assert "--server.address 0.0.0.0" in out and "--server.port 9000" in out
    assert ui_main(["--port", "70000"]) == 2


# ====================================================================== form validation
def test_form_errors_name_the_field():
    from populora.ui import form

    values = form.preset_values(form.presets().get("smoke"))
    flat = {path: form.get_path(values, path) for path, _ in form.schema_fields()}
    cfg, errors = form.validate(flat)
    assert errors == {} and cfg.name == "smoke"
    bad = dict(flat, **{"model.lora_rank": 0, "matchmaking.pfsp": "nope"})
    _, errors = form.validate(bad)
    assert set(errors) == {"model.lora_rank", "matchmaking.pfsp"}
    cross = dict(flat, **{"population.teachers": 1, "matchmaking.teachers_per_student": 2})
    _, errors = form.validate(cross)
    assert "matchmaking.teachers_per_student" in errors and "population.teachers" in errors
    _, errors = form.validate(flat, "model.no_such_key=1")
    assert "overrides" in errors and "no_such_key" in errors["overrides"]
