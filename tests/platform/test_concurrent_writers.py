"""Several writers on one sqlite MLflow store: the store is created once under a lock, writes are retried while
sqlite is locked, an experiment is created once whoever races for it, and four trainings started at once on a
fresh store all finish with every step logged exactly once."""

from __future__ import annotations

import logging
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy
import tenacity
from mlflow.exceptions import MlflowException
from mlflow.store.db import utils as db_utils
from sqlalchemy.orm import sessionmaker
from conftest import populora_cmd

from populora.platform.store import runlayout as rl
from populora.platform.store import tracking

TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
        "--set", "tasks.max_new_tokens_propose=16", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=1", "--set", "tasks.rollouts=2",
        "--set", "tasks.seed_rounds=0"]  # the seed programs: step-0 seeding (~5 s of CPU a run) is not what's tested


def test_locked_writes_are_retried_other_errors_are_not(monkeypatch):
    import sqlite3

    from mlflow.exceptions import MlflowException

    monkeypatch.setattr(tracking, "RETRY_WAIT", tenacity.wait_none())
    calls = []

    class Inner:
        def log_batch(self, run_id):
            calls.append(run_id)
            if len(calls) < 3:  # wrapped as MLflow wraps SQLAlchemy's error
                try:
                    raise sqlite3.OperationalError("database is locked")
                except sqlite3.OperationalError as err:
                    raise MlflowException("(sqlite3.OperationalError) ...") from err
            return "done"

        def get_run(self, run_id):
            calls.append(run_id)
            raise MlflowException("Run 'x' not found")

    client = tracking.RetryingClient(Inner())
    assert client.log_batch("r") == "done" and calls == ["r"] * 3
    calls.clear()
    with pytest.raises(MlflowException, match="not found"):
        client.get_run("x")
    assert calls == ["x"]  # not a lock: raised at once
    calls.clear()
    monkeypatch.setattr(Inner, "log_batch", lambda self, run_id: calls.append(run_id) or (_ for _ in ()).throw(
        MlflowException("database is locked")))
    with pytest.raises(MlflowException, match="locked"):  # still locked after every retry: the error surfaces
        client.log_batch("r")
    assert len(calls) == tracking.RETRY_ATTEMPTS


def test_experiment_creation_loses_a_race_gracefully(tmp_path, monkeypatch):
    """Another process creates the experiment between our lookup and our create: we get its id."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker, rival = tracking.Tracker(uri), tracking.Tracker(uri)
    real_get = tracker.client.get_experiment_by_name
    looked = []

    def get_then_rival_creates(name):
        if not looked:
            looked.append(name)
            rival.client.create_experiment(name)  # lands after our lookup said "none"
            return None
        return real_get(name)

    monkeypatch.setattr(tracker, "client", type("C", (), {
        "get_experiment_by_name": staticmethod(get_then_rival_creates),
        "create_experiment": staticmethod(tracker.client.create_experiment)})())
    exp_id = tracker.experiment_id("raced")
    assert exp_id == rival.client.get_experiment_by_name("raced").experiment_id


def test_ensure_store_creates_the_store_once_under_its_lock(tmp_path):
    uri = f"sqlite:///{tmp_path / 'sub' / 'mlflow.db'}"
    tracking.ensure_store(uri)
    assert (tmp_path / "sub" / "mlflow.db").is_file() and (tmp_path / "sub" / "mlflow.db.lock").exists()
    assert tracking.sqlite_path("http://mlflow:5000") is None
    tracking.ensure_store("http://127.0.0.1:1")  # not sqlite: nothing to create, no connection attempted


@pytest.mark.slow
def test_four_trainings_at_once_on_a_fresh_store_all_finish_with_every_step_logged_once(mlflow_store):
    """What the Launch page's "also launch baseline" does twice over on a new machine: four runs, one new store."""
    assert not Path("mlflow.db").exists()
    procs = [subprocess.Popen(populora_cmd("train", "--set", "steps=2", "--set", f"name=run{i}",
                                           "--set", "evolution.every=0", *TINY, "--quiet"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(4)]
    outs = [p.communicate(timeout=1500)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_store)
    assert len(client.search_experiments(filter_string="name = 'populora'")) == 1
    parents = rl.search_runs(client)[0]
    assert sorted(r.info.run_name for r in parents) == ["run0", "run1", "run2", "run3"]
    for run in parents:
        assert run.info.status == "FINISHED" and run.data.tags[rl.STATUS] == rl.FINISHED
        steps = Counter(m.step for m in client.get_metric_history(run.info.run_id, rl.STEP_SENTINEL))
        assert steps == {1: 1, 2: 1}, (run.info.run_name, steps)
        assert Counter(m.step for m in client.get_metric_history(run.info.run_id, "tasks/proposed")) == {1: 1, 2: 1}
        members = rl.member_runs(client, run.info.run_id)
        assert len(members) == 4
        for member in members:
            history = Counter(m.step for m in client.get_metric_history(member.info.run_id, "rating/mu"))
            assert history == {1: 1, 2: 1}, (run.info.run_name, member.info.run_name, history)


def test_only_mlflows_operational_error_traceback_is_dropped(tmp_path, caplog):
    """MLflow's session wrapper (mlflow/store/db/utils.py, make_managed_session) logs a whole traceback for every
    sqlite OperationalError before raising it; RetryingClient reports those in one line, so that record is dropped,
    and only it: the module's other records still reach the handlers."""
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    managed = db_utils._get_managed_session_maker(sessionmaker(bind=engine), "sqlite")
    with caplog.at_level(logging.DEBUG, logger="mlflow.store.db.utils"):
        with pytest.raises(MlflowException), managed() as session:
            session.execute(sqlalchemy.text("SELECT * FROM no_such_table"))  # sqlite: OperationalError
        logging.getLogger("mlflow.store.db.utils").warning("another warning of that module")
    messages = [r.getMessage() for r in caplog.records if r.name == "mlflow.store.db.utils"]
    assert messages == ["another warning of that module"], messages
    assert tracking  # the filter is installed by importing the store module (as every reader does)
