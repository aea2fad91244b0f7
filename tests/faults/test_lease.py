"""One writer per run (platform/jobs/lease.py): a resume refuses while the run's trainer lives (SIGSTOPped: silent,
not crashed) and goes on at once when it is gone; the pure verdict over every input; a woken trainer whose lease
was taken writes nothing more."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import cli_in_process, train_in_process, wait_for, wait_for_marker
from hypothesis import given
from hypothesis import strategies as st
from mlflow import MlflowClient

from populora.platform.jobs import heartbeat, lease
from populora.platform.store import manifest as mf
from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker
from populora.training.loop import Trainer
from populora.training.run import checkpoint
from populora.training.run.run_log import RunLog

TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
        "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=2", "--set", "tasks.rollouts=2", "--set", "tasks.seed_rounds=0"]

# a trainer that, after step 1, writes marker 1 and waits for the go file; after step 2 writes marker 2 and sleeps
_TWO_PAUSES = """
import sys, time
from pathlib import Path
import populora.cli
from populora.training.loop import Trainer
folder = Path(sys.argv[1])
original = Trainer.step
def paused(self, *args, **kwargs):
    out = original(self, *args, **kwargs)
    if self.step_index == 1:
        (folder / "after_1").write_text("1")
        while not (folder / "go").exists():
            time.sleep(0.1)
    if self.step_index == 2:
        (folder / "after_2").write_text("2")
        time.sleep(3600)
    return out
Trainer.step = paused
sys.exit(populora.cli.main(sys.argv[2:]))
"""


def _row(capsys, run_id: str) -> list[str]:
    capsys.readouterr()
    assert cli_in_process("runs") == 0
    out = capsys.readouterr().out
    return next(line.split() for line in out.splitlines() if line.startswith(run_id))


@pytest.mark.slow
def test_a_sigstopped_trainer_reads_silent_and_refuses_a_resume_until_it_is_gone(mlflow_store, tmp_path, capsys, monkeypatch):
    env = {**os.environ, heartbeat.EVERY_ENV: "0.5"}
    proc = subprocess.Popen([sys.executable, "-c", _TWO_PAUSES, str(tmp_path), "train", "--set", "steps=4",
                             "--set", "checkpoint.every=1", *TINY, "--quiet"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_marker(tmp_path / "after_1", proc)
        client = MlflowClient(mlflow_store)
        run_id = client.search_runs([client.get_experiment_by_name("populora").experiment_id],
                                    filter_string=rl.PARENT_RUNS)[0].info.run_id
        os.kill(proc.pid, signal.SIGSTOP)  # a hung filesystem, a suspended VM: alive, not beating
        (tmp_path / "go").write_text("go")  # read once it runs again
        beat = heartbeat.Beat.parse(client.get_run(run_id).data.tags[rl.HEARTBEAT])
        monkeypatch.setenv(heartbeat.LIMIT_ENV, "1")
        wait_for(lambda: time.time() > beat.t + max(1.0, heartbeat.BEATS * beat.every) + 0.01, 30, "the limit to pass",
                 interval=0.1)
        assert heartbeat.Beat.parse(client.get_run(run_id).data.tags[rl.HEARTBEAT]) == beat  # no beat while stopped
        assert _row(capsys, run_id)[3] == "silent"  # alive here: never "crashed"
        assert cli_in_process("runs") == 0
        assert f"silent: run {run_id}: its trainer (pid {proc.pid} on " in capsys.readouterr().out

        capsys.readouterr()
        assert train_in_process("--resume", run_id, "--quiet") == 2  # refused before anything is loaded or written
        err = capsys.readouterr().err
        assert f"run {run_id} is not resumed: its trainer (pid {proc.pid} on " in err and "silent for" in err, err
        assert f"kill -CONT {proc.pid}" in err, err
        assert client.get_run(run_id).data.tags.get(rl.RESUMED_FROM) is None

        # a fork of the live step: the trainer has not written it (it is stopped inside step 2); the newest is named
        assert train_in_process("--fork", run_id, "--step", "2", "--set", "steps=3", "--quiet") == 2
        err = capsys.readouterr().err
        assert f"its trainer (pid {proc.pid} on " in err and "has not written it yet; its newest complete checkpoint " \
            "is step 1 (--step 1)" in err, err
        fork = Trainer.fork(run_id, 1, ["steps=2"])  # the complete step: read from a pinned copy, then let go
        try:
            assert rl.checkpoint_steps(fork.run_dir) == [1]
            assert {p.name for p in (rl.run_dir(client.get_run(run_id)) / rl.CHECKPOINTS).iterdir()} == \
                {rl.step_folder(1), "latest"}  # the pin is gone; nothing else was written into the parent's run
        finally:
            fork.log.ended_by(KeyboardInterrupt())
            fork.close()

        os.kill(proc.pid, signal.SIGCONT)  # it wakes, takes the go and trains on: its run was never touched
        wait_for_marker(tmp_path / "after_2", proc)
        wait_for(lambda: _row(capsys, run_id)[3] == "running", 30, "the woken trainer to beat again", interval=0.2)
        proc.kill()  # now it is gone: the resume goes on at once, its last beat however fresh
        proc.wait()
    finally:
        proc.kill()
        proc.communicate()
    monkeypatch.delenv(heartbeat.LIMIT_ENV)
    assert train_in_process("--resume", run_id, "--quiet") == 0
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and rl.status(run) == rl.FINISHED
    assert [m.step for m in client.get_metric_history(run_id, rl.STEP_SENTINEL)] == [1, 2, 3, 4]  # one writer: each once
    assert lease.Holder.parse(run.data.tags[lease.TAG]).pid == os.getpid()  # the resumer took the lease


@given(running=st.booleans(), has_beat=st.booleans(), stale=st.booleans(), alive=st.sampled_from([True, False, None]),
       is_self=st.booleans())
def test_the_verdict_over_its_whole_input_space(running, has_beat, stale, alive, is_self):
    """Free exactly when nothing can still write (not running, no beat, its process gone); a live process here is
    never free nor crashed-unknown; another machine's holder is never called alive or dead."""
    v = lease.decide(running, has_beat, stale, alive, is_self)
    assert v in lease.VERDICTS
    assert (v == lease.FREE) == (not running or not has_beat or alive is False)
    if v != lease.FREE and is_self:
        assert v == lease.SELF
    elif v != lease.FREE:
        expected = {(True, False): lease.LIVE, (True, True): lease.SILENT, (None, False): lease.REMOTE,
                    (None, True): lease.UNKNOWN}
        assert v == expected[(alive, stale)]


def test_force_overrides_another_machines_holder_only(mlflow_store):
    """--force takes a run from a holder on another machine (nothing here can check it); one alive on this machine
    is refused however the resume is asked for; the refusal names the holder and how to go on."""
    pid, started, host = heartbeat.this_process()
    old = time.time() - 3 * 3600
    remote = {rl.HEARTBEAT: heartbeat.Beat(old, 20.0, 4242, 1.0, "far-away").text()}
    why = lease.refusal("running", remote)
    assert "has been silent for 3.0 h on far-away, which this machine cannot check" in why and "--force" in why
    assert lease.refusal("running", remote, force=True) is None
    assert lease.held_by("running", remote) == "its trainer (pid 4242 on far-away) is silent on another machine (perhaps alive)"
    fresh = {rl.HEARTBEAT: heartbeat.Beat(time.time(), 20.0, 4242, 1.0, "far-away").text()}
    assert "beat 0 s ago on far-away" in lease.refusal("running", fresh)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        import psutil

        here = {rl.HEARTBEAT: heartbeat.Beat(old, 20.0, sleeper.pid, psutil.Process(sleeper.pid).create_time(), host).text()}
        assert "alive on this machine but silent for 3.0 h" in lease.refusal("running", here, force=True)
        assert lease.held_by("running", here) == f"its trainer (pid {sleeper.pid} on {host}) is alive but silent (suspended or hung)"
        assert lease.refusal("stopped", here) is None  # the run says it ended: nothing to refuse
    finally:
        sleeper.kill()
        sleeper.wait()
    assert lease.refusal("running", here) is None  # gone: free at once
    assert lease.held_by("running", here) is None


def test_a_trainer_whose_lease_was_taken_writes_nothing_more(mlflow_store, tmp_path):
    """A forced resume beside a trainer that wakes later: the woken one's next write stops (LeaseLost) and its end
    leaves the run as the new holder set it."""
    tracker = Tracker(mlflow_store)
    rid = tracker.start_run("populora", "taken", tags={rl.KIND: rl.POPULATION, rl.STATUS: rl.RUNNING})
    first = RunLog(rid, "populora", tracker=tracker)
    first.lease.take()
    first.check_lease()  # its own: fine
    tracker.set_tags(rid, {lease.TAG: lease.Holder(4242, 1.0, "far-away").text()})  # what a forced resume writes
    with pytest.raises(lease.LeaseLost, match="was taken by another trainer \\(pid 4242 on far-away"):
        first.check_lease()
    first.ended_by(lease.LeaseLost("x"))
    first.end(rl.STOPPED)
    run = tracker.get_run(rid)
    assert run.info.status == "RUNNING" and run.data.tags[rl.STATUS] == rl.RUNNING  # left to its new holder


def test_a_second_resume_on_this_machine_loses_the_run_dirs_lock(tmp_path):
    """The run dir's flock: a second process cannot hold it while the first does (released when the first ends)."""
    holder = subprocess.Popen([sys.executable, "-c",
                               "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'pid-of-the-first'); "
                               "print('held', flush=True); time.sleep(600)", str(tmp_path / lease.LOCK_FILE)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        mine = lease.Lease(lambda tags: None, dict, "r1")
        with pytest.raises(lease.LeaseLost, match="held by another trainer on this machine \\(pid-of-the-first\\)"):
            mine.lock(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    mine.lock(tmp_path)  # the OS freed it with the process
    assert mine.lock_path == tmp_path / lease.LOCK_FILE
    mine.release()


# ====================================================================== forks of a held run read a pinned checkpoint
WRITER = "its trainer (pid 4242 on here) is alive"


def _checkpoint(run_dir, step: int) -> None:
    """A complete checkpoint of ``step`` as ``checkpoint.save`` leaves it (files, then the manifest last)."""
    path = rl.checkpoint_dir(run_dir, step)
    (path / "adapters" / "S0").mkdir(parents=True)
    (path / "adapters" / "S0" / "adapter_model.safetensors").write_bytes(os.urandom(4096))
    (path / rl.CHECKPOINT_STATE).write_text('{"step": %d}' % step)
    (path / rl.CONFIG_FILE).write_text("steps: 6\n")
    mf.write(path, fsync=False)


def test_a_fork_of_a_held_run_reads_a_pinned_copy_its_prune_cannot_take(tmp_path):
    """The live trainer prunes the step while the fork reads it: the pinned copy still verifies and reads as the
    step did; the pin is gone once the fork has read it; a run nobody writes is read in place."""
    _checkpoint(tmp_path, 2)
    want = (rl.checkpoint_dir(tmp_path, 2) / "adapters/S0/adapter_model.safetensors").read_bytes()
    with checkpoint.pinned(tmp_path, 2, WRITER) as path:
        assert path != rl.checkpoint_dir(tmp_path, 2)
        shutil.rmtree(rl.checkpoint_dir(tmp_path, 2))  # the parent's prune (checkpoint.keep) mid-read
        assert checkpoint.verify(path) is None
        assert (path / "adapters/S0/adapter_model.safetensors").read_bytes() == want
    assert not list((tmp_path / rl.CHECKPOINTS).iterdir())  # no pin left behind
    _checkpoint(tmp_path, 3)
    with checkpoint.pinned(tmp_path, 3, None) as path:
        assert path == rl.checkpoint_dir(tmp_path, 3)


def test_a_fork_whose_step_is_pruned_while_it_is_pinned_says_so_and_names_the_kept_steps(tmp_path, monkeypatch):
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 3)
    linked = checkpoint._link

    def prune_after_first(src, dst):  # the writer's prune takes the step between two links
        linked(src, dst)
        shutil.rmtree(rl.checkpoint_dir(tmp_path, 2), ignore_errors=True)

    monkeypatch.setattr(checkpoint, "_link", prune_after_first)
    with pytest.raises(checkpoint.CheckpointError) as err:
        with checkpoint.pinned(tmp_path, 2, WRITER):
            pass
    assert f"was pruned while this fork copied it: {WRITER} and keeps only its newest" in str(err.value)
    assert "it keeps steps 3 " in str(err.value)
    assert [p.name for p in (tmp_path / rl.CHECKPOINTS).iterdir()] == [rl.step_folder(3)]  # no pin left behind


def test_a_fork_of_a_step_the_live_trainer_has_not_written_names_the_newest_complete_one(tmp_path):
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 3)
    with pytest.raises(checkpoint.CheckpointError, match=f"{re.escape(WRITER)} and has not written it yet; its newest complete "
                                                         "checkpoint is step 3 \\(--step 3\\)"):
        with checkpoint.pinned(tmp_path, 4, WRITER):
            pass
    (tmp_path / rl.CHECKPOINTS / f".tmp-{rl.step_folder(4)}").mkdir()  # checkpoint.save's half-written dir
    with pytest.raises(checkpoint.CheckpointError, match=f"{re.escape(WRITER)} and is writing it now"):
        with checkpoint.pinned(tmp_path, 4, WRITER):
            pass
    with pytest.raises(checkpoint.CheckpointError, match=f"no checkpoint of step 1 .*: {re.escape(WRITER)} and pruned it; it "
                                                         "keeps steps 2, 3"):
        with checkpoint.pinned(tmp_path, 1, WRITER):
            pass
