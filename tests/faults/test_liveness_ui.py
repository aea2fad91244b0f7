"""A run whose trainer died outside any job (no job's exit code to go by), known only by its stopped heartbeat: the
Runs page shows it crashed with Resume, the sweep table counts it crashed, Compare warns over its scores."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("streamlit")
from conftest import app_page, wait_for  # noqa: E402

from populora.platform.jobs import heartbeat, lost_runs
from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker  # noqa: E402


@pytest.fixture
def lost_store(tmp_path, monkeypatch):
    """A synthetic store with one population run left running by a trainer whose last beat is an hour old."""
    import synthetic_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_SWEEPS_DIR", str(tmp_path / "sweeps"))
    monkeypatch.setenv(heartbeat.EVERY_ENV, "3600")  # the synthetic run's heartbeat beats once, then waits an hour
    tracker = Tracker(uri)
    run_id = synthetic_store.make_run(tracker, "lost", members=2, steps=4, tasks_per_step=3, status=rl.RUNNING)
    wait_for(lambda: tracker.get_run(run_id).data.tags.get(rl.HEARTBEAT), 30, "its one beat")  # then no more
    pid, started, host = heartbeat.this_process()
    old = heartbeat.Beat(time.time() - 3600, 20.0, pid + 10**6, started, host)  # a dead trainer's last beat
    tracker.set_tags(run_id, {rl.HEARTBEAT: old.text(), **rl.sweep_tags("sw-live", "k0", "population", 0)})
    return {"uri": uri, "run": run_id}


def test_runs_page_shows_a_silent_run_crashed_with_resume(lost_store):
    run_id = lost_store["run"]
    at = app_page("runs", run=run_id)
    sweeps, runs = at.dataframe[0].value.set_index("sweep"), at.dataframe[1].value.set_index("run_id")
    assert runs.loc[run_id, "state"] == "💥 crashed"
    assert (sweeps.loc["sw-live", "crashed"], sweeps.loc["sw-live", "running"]) == (1, 0)
    error = " ".join(e.value for e in at.error)
    assert "The trainer process died without ending this run after step 2/4 (no heartbeat for 60 min)" in error
    assert f"`populora train --resume {run_id}`" in error and "populora runs --reap" in error
    assert any(b.label == "Resume" for b in at.button)
    assert Tracker(lost_store["uri"]).get_run(run_id).info.status == "RUNNING"  # shown, never written
    # reaped: failed, with why, and still Resume
    assert [r.run_id for r in lost_runs.reap(Tracker(lost_store["uri"]), limit=120) if r.done] == [run_id]
    at = app_page("runs", run=run_id)
    assert at.dataframe[1].value.set_index("run_id").loc[run_id, "state"] == "❌ failed"
    error = " ".join(e.value for e in at.error)
    assert "This run failed after step 2/4: lost: the trainer (pid " in error and "populora runs --reap" in error
    assert any(b.label == "Resume" for b in at.button)


def test_compare_warns_that_the_picked_run_crashed(lost_store):
    at = app_page("compare", run=lost_store["run"])
    assert any(f"run {lost_store['run'][:8]} crashed at step 2/4" in w.value and
               f"populora train --resume {lost_store['run']}" in w.value for w in at.warning), [w.value for w in at.warning]
