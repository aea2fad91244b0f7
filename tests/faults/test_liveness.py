"""A trainer killed outright (kill -9: no code of its own runs) leaves its run RUNNING in MLflow. Its stopped
heartbeat makes every reader show it crashed once the limit has passed, without writing to the store; ``populora
runs --reap`` ends it FAILED (a run whose trainer still lives here is left alone); a resume clears it and logs every
step once. The limit is an environment setting, so the test waits for the clock to pass the last beat + limit
(an event: the writer is dead, its last beat read back), never for a race."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
from conftest import cli_in_process, paused_train_cmd, train_in_process, wait_for, wait_for_marker
from mlflow import MlflowClient

from populora.platform.jobs import heartbeat, lost_runs
from populora.platform.config import ConfigError
from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker
from populora.training.run.run_log import RunLog

TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
        "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=2", "--set", "tasks.rollouts=2", "--set", "tasks.seed_rounds=0"]


def _runs_table(capsys) -> str:
    capsys.readouterr()
    assert cli_in_process("runs") == 0
    return capsys.readouterr().out


def _row(out: str, run_id: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith(run_id))


def test_a_kill_9_train_shows_crashed_is_reaped_failed_and_a_resume_clears_it(mlflow_store, tmp_path, capsys, monkeypatch):
    marker = tmp_path / "after_step_1"
    env = {**os.environ, heartbeat.EVERY_ENV: "0.5"}  # beats every 0.5 s: a short limit is still 3 beats or more
    proc = subprocess.Popen(paused_train_cmd(marker, 1, "--set", "steps=3", "--set", "checkpoint.every=1", *TINY,
                                             "--quiet"), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_marker(marker, proc)
        client = MlflowClient(mlflow_store)
        run_id = client.search_runs([client.get_experiment_by_name("populora").experiment_id],
                                    filter_string=rl.PARENT_RUNS)[0].info.run_id
        assert _row(_runs_table(capsys), run_id)[3] == "running"  # alive: beating (default limit 120 s)
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
        proc.communicate()
    beat = heartbeat.Beat.parse(client.get_run(run_id).data.tags[rl.HEARTBEAT])  # its last beat: the writer is dead
    assert beat.pid == proc.pid and heartbeat.process_alive(beat) is False
    monkeypatch.setenv(heartbeat.LIMIT_ENV, "1")
    wait_for(lambda: time.time() > beat.t + max(1.0, heartbeat.BEATS * beat.every) + 0.01, 30, "the limit to pass",
             interval=0.1)

    out = _runs_table(capsys)
    assert _row(out, run_id)[3] == "crashed", out
    assert (f"crashed: run {run_id} says running but its trainer sent no heartbeat for " in out
            and f"resume with `populora train --resume {run_id}`, or mark it failed with `populora runs --reap`" in out), out
    assert client.get_run(run_id).info.status == "RUNNING"  # a reader only shows it
    monkeypatch.setenv(heartbeat.LIMIT_ENV, "3600")
    assert _row(_runs_table(capsys), run_id)[3] == "running"  # the limit decides, nothing else
    monkeypatch.setenv(heartbeat.LIMIT_ENV, "1")

    capsys.readouterr()
    assert cli_in_process("runs", "--reap") == 0
    out = capsys.readouterr().out
    assert f"{run_id} populora: silent " in out and f"ended FAILED; resume with `populora train --resume {run_id}`" in out
    run = client.get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags[rl.STATUS] == rl.FAILED
    assert run.data.tags[rl.ERROR].startswith(f"lost: the trainer (pid {proc.pid}) sent no heartbeat for ")
    assert all(c.info.status == "FAILED" for c in rl.member_runs(client, run_id))
    assert _row(_runs_table(capsys), run_id)[3] == "failed"

    monkeypatch.delenv(heartbeat.LIMIT_ENV)
    assert train_in_process("--resume", run_id, "--quiet") == 0
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and rl.status(run) == rl.FINISHED
    assert [m.step for m in client.get_metric_history(run_id, rl.STEP_SENTINEL)] == [1, 2, 3]  # none lost, none twice


def test_reap_leaves_a_silent_run_whose_trainer_is_alive_here(mlflow_store):
    """A trainer alive on this machine but silent past the limit is hung, not dead: --reap says how to stop it and
    leaves its run RUNNING; a run of another machine (or a dead process) is ended."""
    tracker = Tracker(mlflow_store)
    pid, started, host = heartbeat.this_process()
    old = time.time() - 3600
    alive = heartbeat.Beat(old, 20.0, pid, started, host)
    elsewhere = heartbeat.Beat(old, 20.0, pid, started, "another-host")
    ids = {}
    for name, beat in (("hung", alive), ("remote", elsewhere)):
        ids[name] = tracker.start_run("populora", name, tags={rl.KIND: rl.POPULATION, rl.STATUS: rl.RUNNING,
                                                              rl.HEARTBEAT: beat.text()})
    found = {r.name: r for r in lost_runs.reap(tracker, limit=120)}
    assert not found["hung"].done and f"its trainer (pid {pid}) is alive on this machine" in found["hung"].why
    assert found["remote"].done and tracker.get_run(ids["remote"]).info.status == "FAILED"
    assert "(last seen on another-host)" in tracker.get_run(ids["remote"]).data.tags[rl.ERROR]
    assert tracker.get_run(ids["hung"]).info.status == "RUNNING"
    assert rl.status(tracker.get_run(ids["hung"])) == rl.SILENT  # alive here: silent, never crashed (lease.py)
    assert rl.status(tracker.get_run(ids["remote"])) == rl.FAILED
    assert lost_runs.reap(tracker, limit=120)[0].name == "hung"  # the ended one is not reaped twice


def test_the_heartbeat_thread_beats_and_stops(tmp_path):
    """The beat reaches the tag and the files at once, then every ``every`` seconds; ``at`` rewrites the files with
    the step; after ``stop`` nothing is written (waited on as an event: the thread is joined)."""
    tags: list[str] = []
    hb = heartbeat.Heartbeat(tags.append, [tmp_path / "a" / heartbeat.FILE], every=0.05, run_id="r1").start()
    wait_for(lambda: len(tags) >= 3, 30, "three beats", interval=0.05)
    hb.at(7)
    assert heartbeat.read_file(tmp_path / "a") | {"t": 0} == {"t": 0, "every": 0.05, "pid": hb.pid, "started": hb.started,
                                                              "host": hb.host, "step": 7, "run_id": "r1"}
    thread = hb._thread
    hb.stop()
    assert not thread.is_alive()  # joined: no beat in flight, none to come
    assert heartbeat.Beat.parse(tags[-1]).pid == os.getpid()


def test_a_resume_is_refused_while_another_live_trainer_beats(mlflow_store):
    """Two trainers on one run would log every step twice: a resume waits until the run's trainer is known dead
    (its process gone here) or its beat is stale; this very process's own beat never blocks it."""
    tracker = Tracker(mlflow_store)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        host = heartbeat.this_process()[2]
        live = heartbeat.Beat(time.time(), 20.0, other.pid, psutil.Process(other.pid).create_time(), host)
        rid = tracker.start_run("populora", "busy", tags={rl.KIND: rl.POPULATION, rl.STATUS: rl.RUNNING,
                                                          rl.HEARTBEAT: live.text()})
        with pytest.raises(ConfigError, match=rf"run {rid} is not resumed: its trainer \(pid {other.pid} on {host}, "
                                              r"started [-0-9: ]+\) is alive and beat \d+ s ago: stop it first"):
            RunLog(rid, "populora", tracker=tracker).resumed("step_000001")
        assert tracker.get_run(rid).data.tags.get(rl.RESUMED_FROM) is None  # refused before any write
        other.kill()
        other.wait()
        log = RunLog(rid, "populora", tracker=tracker)
        log.resumed("step_000001")  # its trainer is gone: at once, however fresh its last beat
        assert tracker.get_run(rid).data.tags[rl.RESUMED_FROM] == "step_000001"
        log.end(rl.STOPPED)
    finally:
        other.kill()
        other.wait()
