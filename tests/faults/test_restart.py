"""Automatic restart by the job supervisor (platform/jobs/restart.py): a trainer killed once (kill -9, as the OOM killer
does) under ``max_restarts=1`` is resumed from its last checkpoint and finishes by itself, every step logged once,
the restart logged on the run and the memory advice in the log; the same failure at the same step twice is not
restarted again; a Stop is never restarted, even one that ends like a crash, nor during a backoff; a lost worker
or an unreachable store ends ``populora train`` with exit 75 and its account for the supervisor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import paused_train_cmd, wait_for, wait_for_marker
from mlflow import MlflowClient

from populora.cli import restarts as cli_restarts
from populora.platform.jobs import jobs, restart, supervisor
from populora.platform.store import runlayout as rl
from populora.platform.backends.data_parallel import WorkerLost
from populora.platform.jobs.job_record import Job
from populora.platform.store.tracking import Tracker

TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
        "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=2", "--set", "tasks.rollouts=2", "--set", "tasks.seed_rounds=0"]
# a trainer that dies as the OOM killer ends one: SIGKILL, having said (as the heartbeat file does) it was on step 5
SIGKILLED_AT_5 = ("import json, os, signal, sys; open(sys.argv[1], 'w').write(json.dumps({'step': 5})); "
                  "os.kill(os.getpid(), signal.SIGKILL)")


def _trainer_of(job: Job) -> psutil.Process:
    return wait_for(lambda: (job.process().children() or [None])[0], 60, "the supervisor to start the trainer")


def test_a_trainer_killed_once_is_resumed_and_finishes_under_max_restarts_1(mlflow_store, tmp_path):
    marker = tmp_path / "after_step_1"
    argv = paused_train_cmd(marker, 1, "--set", "steps=3", "--set", "checkpoint.every=1", "--set", "evolution.every=0",
                            *TINY, "--quiet")  # no evolution: every member lives through steps 1-3
    job = jobs.start(argv, name="restarts", root=tmp_path / "jobs", max_restarts=1,
                     env={"MLFLOW_TRACKING_URI": mlflow_store, restart.BACKOFF_ENV: "0.1"})
    trainer = _trainer_of(job)
    try:
        wait_for(lambda: marker.exists() or job.status not in ("running", "starting"), 600, "the trainer to pause",
                 interval=0.2, detail=lambda: job.log_tail(30))
        assert marker.exists(), job.log_tail(40)
        trainer.kill()  # kill -9 with no stop asked for: what the OOM killer does
        wait_for(lambda: job.status not in ("running", "starting"), 600, "the restarted run to end", interval=0.5,
                 detail=lambda: job.log_tail(30))
    finally:
        if job.status == "running":
            jobs.stop(job)
    log = job.log_path.read_text()
    assert job.status == "finished", log[-3000:]
    assert ("[populora supervisor] the trainer was killed by SIGKILL at step 1 with no stop asked for: most likely "
            "the kernel's OOM killer") in log
    assert "lower optim.micro_batch (now 4): `populora plan` puts the update's activations at " in log  # its advice
    assert "[populora supervisor] restart 1 of 1: resuming run " in log
    client = MlflowClient(mlflow_store)
    run_id = job.run_id
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags[rl.STATUS] == rl.FINISHED
    assert run.data.tags[rl.RESTARTS] == "1"
    assert run.data.tags[rl.RESTART_PREFIX + "1"].startswith("after killed (SIGKILL) at step 1: resumed from its last checkpoint")
    assert [m.step for m in client.get_metric_history(run_id, rl.STEP_SENTINEL)] == [1, 2, 3]  # none lost, none twice
    members = {m.data.tags[rl.MEMBER_ID]: [h.step for h in client.get_metric_history(m.info.run_id, "rating/mu")]
               for m in rl.member_runs(client, run_id)}
    assert sorted(members) == ["S0", "S1", "T0", "T1"] and all(s == [1, 2, 3] for s in members.values()), members
    assert json.loads((Path(job.dir) / restart.RESTARTS_FILE).read_text())[0]["cause"] == "killed (SIGKILL)"


def _job_with_run(tmp_path: Path, uri: str, argv: list[str], max_restarts: int) -> tuple[Job, str]:
    rid = Tracker(uri).start_run("populora", "r", tags={rl.KIND: rl.POPULATION, rl.STATUS: rl.RUNNING})
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    rl.write_run_id(job_dir, rid)
    job = Job(id="j", argv=argv, dir=str(job_dir), created=time.time(), max_restarts=max_restarts)
    job.save()
    return job, rid


def test_the_same_failure_at_the_same_step_twice_is_not_restarted_again(mlflow_store, tmp_path, monkeypatch, capsys):
    heartbeat_file = str(tmp_path / "job" / "heartbeat.json")
    argv = [sys.executable, "-c", SIGKILLED_AT_5, heartbeat_file]
    job, rid = _job_with_run(tmp_path, mlflow_store, argv, max_restarts=3)
    monkeypatch.setenv(restart.BACKOFF_ENV, "0.01")
    monkeypatch.setattr(restart, "resume_argv", lambda run_id: argv)  # the "resume" dies the same way again
    assert supervisor.run_with_restarts(job) == -signal.SIGKILL
    out = capsys.readouterr().out
    assert out.count("killed by SIGKILL at step 5 with no stop asked for") == 2
    assert "not restarted: it failed the same way (killed (SIGKILL)) at the same step (5) before" in out
    assert len(restart.history(Path(job.dir))) == 1
    run = Tracker(mlflow_store).get_run(rid)
    assert run.info.status == "FAILED" and run.data.tags[rl.STATUS] == rl.FAILED and run.data.tags[rl.RESTARTS] == "1"
    assert run.data.tags[rl.ERROR].startswith("the trainer was killed by SIGKILL at step 5")
    assert "no plan figures: the trainer left none" in run.data.tags[rl.ERROR]  # no advice file: the settings still


# a trainer whose stop ends it like a crash (SIGKILL from its own SIGINT handler): a stop all the same
KILLED_BY_ITS_STOP = ("import os, signal, sys, time; "
                      "signal.signal(signal.SIGINT, lambda *a: os.kill(os.getpid(), signal.SIGKILL)); "
                      "open(sys.argv[1], 'w').close(); time.sleep(600)")


def test_a_stop_is_never_restarted_even_one_that_ends_like_a_crash(mlflow_store, tmp_path):
    marker = tmp_path / "handler_set"
    job = jobs.start([sys.executable, "-c", KILLED_BY_ITS_STOP, str(marker)], root=tmp_path / "jobs", max_restarts=3,
                     env={"MLFLOW_TRACKING_URI": mlflow_store, restart.BACKOFF_ENV: "0.01"})
    wait_for(marker.exists, 60, "the child to set its handler", interval=0.1)
    assert jobs.stop(job) == "stopped"
    assert job.exit_code == -signal.SIGKILL  # it ended as a crash would ...
    assert "restart" not in job.log_path.read_text() and not (Path(job.dir) / restart.RESTARTS_FILE).exists()


def test_a_stop_during_the_backoff_ends_the_job_stopped_without_a_restart(mlflow_store, tmp_path):
    rid = Tracker(mlflow_store).start_run("populora", "r", tags={rl.KIND: rl.POPULATION, rl.STATUS: rl.RUNNING})
    root = tmp_path / "jobs"
    heartbeat_file = root / "j1" / "heartbeat.json"
    job = jobs.start([sys.executable, "-c", SIGKILLED_AT_5, str(heartbeat_file)], root=root, job_id="j1", max_restarts=1,
                     files={rl.RUN_ID_FILE: rid}, env={"MLFLOW_TRACKING_URI": mlflow_store, restart.BACKOFF_ENV: "600"})
    wait_for(lambda: "restart 1 of 1: resuming run" in job.log_path.read_text(), 60, "the backoff to begin", interval=0.1)
    assert jobs.stop(job) == "stopped"
    log = job.log_path.read_text()
    assert "stopped during the backoff: not restarted" in log and job.exit_code == 128 + signal.SIGINT
    assert not (Path(job.dir) / restart.RESTARTS_FILE).exists()
    assert Tracker(mlflow_store).get_run(rid).info.status == "FAILED"  # its trainer is dead: ended by the supervisor


@pytest.mark.parametrize("make", [lambda: WorkerLost("worker 1 of 2 failed during the update"),
                                  lambda: RuntimeError("API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/"
                                                       "log-batch failed: Max retries exceeded with url")])
def test_a_transient_failure_exits_75_with_its_account_for_the_supervisor(make, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(rl.ENV_JOB_DIR, str(tmp_path))
    err = make()
    assert cli_restarts.failure_code(err, None) == restart.TEMPFAIL
    record = json.loads((tmp_path / restart.FAILURE_FILE).read_text())
    cause = restart.WORKER_LOST if isinstance(err, WorkerLost) else restart.STORE_UNREACHABLE
    assert record["cause"] == cause and record["step"] is None
    assert capsys.readouterr().err.startswith(f"\nerror: {cause}: ")
    failure = restart.classify(restart.TEMPFAIL, False, tmp_path)
    assert failure == restart.Failure(cause, None, record["message"], True)
    assert not (tmp_path / restart.FAILURE_FILE).exists()  # read once: the next attempt writes its own
    assert cli_restarts.failure_code(ValueError("a bug"), None) is None  # anything else: its traceback


def test_how_the_supervisor_reads_an_exit(tmp_path):
    (tmp_path / "heartbeat.json").write_text(json.dumps({"step": 4}))
    assert restart.classify(0, False, tmp_path) is None
    assert restart.classify(130, False, tmp_path) is None and restart.classify(-signal.SIGTERM, False, tmp_path) is None
    assert restart.classify(-signal.SIGKILL, True, tmp_path) is None  # our stop escalated to SIGKILL
    (tmp_path / restart.ADVICE_FILE).write_text("lower optim.micro_batch (now 4): ...")
    killed = restart.classify(-signal.SIGKILL, False, tmp_path)
    assert killed.transient and killed.step == 4 and killed.message.endswith("lower optim.micro_batch (now 4): ...")
    bug = restart.classify(1, False, tmp_path)
    assert not bug.transient and restart.decide(bug, [], 5) == (False, "not restarted: exit 1 is not a transient failure")
    assert restart.decide(killed, [{"cause": "x", "step": 1}], 1) == (False, "not restarted: --max-restarts 1 used")
    assert restart.decide(killed, [], 0) == (False, "")


def test_terminal_max_restarts_refuses_what_it_cannot_restart(monkeypatch, capsys):
    from populora.cli import build_parser

    args = build_parser().parse_args(["train", "--max-restarts", "2", "--baseline"])
    assert cli_restarts.train_supervised(args) == 2 and "--baseline as two commands" in capsys.readouterr().err
    monkeypatch.setenv(rl.ENV_JOB_DIR, os.getcwd())
    args = build_parser().parse_args(["train", "--max-restarts", "2"])
    assert cli_restarts.train_supervised(args) == 2 and "inside a job" in capsys.readouterr().err
    args = build_parser().parse_args(["train", "--config", "c.yaml", "--set", "steps=3", "--max-restarts", "1", "--quiet"])
    assert cli_restarts.own_argv(args) == ["--config", "c.yaml", "--set", "steps=3", "--quiet"]
