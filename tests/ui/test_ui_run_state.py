"""A run's life on the Runs page (issue 54, items 2 and 3), in AppTest: Stop at the top of a running run with the
phase its trainer reports, Resume that shows "resume queued (#k)" and cannot queue a second resume, and a
resumed run's training time beside its wall time. The browser walk of the same is tests/ui/test_ui_run_life.py.
Every wait is for an event (a status, a file), never for a clock."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
from conftest import HOLD, app_page, wait_for

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from populora.platform.jobs import jobs, state
from populora.platform import progress
from populora.platform.store import runlayout as rl

def _run(one_slot_queue, name: str, status: str, steps: int = 300) -> str:
    """A run as a trainer leaves it (its run dir tagged), ended ``status`` unless running."""
    from populora.training.config import TrainConfig
    from populora.training.run.run_log import RunLog

    cfg = TrainConfig(name=name, steps=steps)
    log = RunLog.start(cfg)
    log.describe(cfg, one_slot_queue["dir"] / "runs" / log.run_id)
    if status != rl.RUNNING:
        log.end(status)
    return log.run_id


def _status(at: AppTest) -> str:
    return next(m.value for m in at.metric if m.label == "status")


def test_a_running_run_has_stop_at_the_top_and_shows_its_phase_with_an_eta(one_slot_queue):
    """The walk's findings: Stop was inside the collapsed "job log" section; a step was "0/3, ETA –" for minutes."""
    run_id = _run(one_slot_queue, "training", rl.RUNNING, steps=3)
    job = jobs.start([sys.executable, "-c", HOLD], name="training", files={rl.RUN_ID_FILE: run_id})
    wait_for(lambda: job.status == "running", 60, "the job to run")
    clock = type("Clock", (), {"t": time.time() - 41, "__call__": lambda self: self.t})()
    reporter = progress.StepProgress([Path(job.dir)], steps=3, step=1, clock=clock)
    reporter.last = {"match": 1.0, "propose": 60.0, "validate": 5.0, "solve": 50.0, "update": 30.0}
    reporter.start_step(2)
    reporter.phase("solve")
    reporter.count(12, 32)
    reporter.write()
    at = app_page("runs", run=run_id)
    now = next(i.value for i in at.info if i.value.startswith("**Now**"))
    assert "step 2/3 · solving 12/32 answers · 4" in now and " in this phase · ETA " in now, now
    stop = [b for b in at.button if b.label.endswith("Stop this run")]
    assert stop, [b.label for b in at.button]
    log = next(e for e in at.expander if e.label.startswith("job log"))
    assert not [b for b in log.button if "Stop" in b.label], "Stop is at the top, not in the job log"
    stop[0].click().run()
    assert job.status == "stopped"


def test_resume_shows_its_place_in_the_queue_keeps_the_run_and_never_queues_twice(one_slot_queue):
    """The walk's findings: after Resume the run still showed "stopped" with an active Resume button, and a second
    click queued a second resume. Two pages (two tabs) drawn before the first click: the second click, on a page
    not yet redrawn, starts nothing."""
    stopped = _run(one_slot_queue, "stopped", rl.STOPPED)
    _run(one_slot_queue, "newer", rl.FINISHED)  # the newest run: the page must keep the one picked
    holder = jobs.start([sys.executable, "-c", HOLD], name="holder", slots=1)
    wait_for(lambda: holder.status == "running", 60, "the holder to take the one slot")
    first, second = app_page("runs", run=stopped), app_page("runs", run=stopped)
    assert _status(first).endswith("stopped")
    next(b for b in first.button if b.label == "Resume").click().run()
    assert not first.exception, [e.value for e in first.exception]
    resume = jobs.latest_for_run(stopped)
    assert resume is not None and resume.status in ("queued", "starting")
    wait_for(lambda: resume.status == "queued", 60, "the resume to wait in the queue")
    first.run()
    assert _status(first).endswith("resume queued (#1)"), _status(first)
    assert [b.disabled for b in first.button if b.label == "Resume"] == [True]
    assert first.selectbox(key="pick_run").value == stopped
    next(b for b in second.button if b.label == "Resume").click().run()  # the stale tab
    assert [j.id for j in jobs.list_jobs() if j.run_id == stopped] == [resume.id]


def test_a_resumed_runs_training_time_leaves_out_the_hours_it_sat_stopped(one_slot_queue):
    """The walk's finding: a resumed run's duration counted the hours it sat stopped. Training time is its steps'
    time (``time/training_s``, carried over resumes); wall time, start to end, is beside it."""
    from mlflow import MlflowClient

    run_id = _run(one_slot_queue, "resumed", rl.STOPPED)
    client = MlflowClient(one_slot_queue["uri"])
    run = client.get_run(run_id)
    client.log_metric(run_id, rl.TRAINING_SECONDS, 125.0, step=2)
    # its wall time: 3 hours, most of them stopped
    client.set_terminated(run_id, "KILLED", end_time=run.info.start_time + 3 * 3600 * 1000)
    at = app_page("runs", run=run_id)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["training time"] == "2m 05s", metrics
    assert any(c.value.startswith("wall time 3h 00m") for c in at.caption), [c.value for c in at.caption]
    table = at.dataframe[0].value.set_index("run_id")
    assert (table.loc[run_id, "training"], table.loc[run_id, "duration"]) == ("2m 05s", "3h 00m")


# a job that takes no SIGINT (a trainer deep in a step that does not look at it): Stop's wait is its whole grace
DEAF = ("import signal, sys, time\nfrom pathlib import Path\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "Path(sys.argv[1]).write_text('deaf')\ntime.sleep(3600)\n")


def test_launchs_stop_returns_at_once_and_shows_stopping_as_runs_does(one_slot_queue):
    """The walk's finding: Launch's Stop held the page until the job ended (up to the grace, then SIGKILL) and showed
    "running" meanwhile; now, as on Runs, the click returns with the job still running and the row says stopping
    (platform/jobs/state.py), its Stop button gone."""
    marker = one_slot_queue["dir"] / "deaf"
    job = jobs.start([sys.executable, "-c", DEAF, str(marker)], name="training")
    try:
        wait_for(lambda: marker.exists(), 60, "the job to ignore SIGINT")
        at = app_page("launch")
        next(b for b in at.button if b.key == f"stop_{job.id}").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert job.status == "running"  # it ignores SIGINT: the page did not wait for its end
        assert any(m.value == f"{state.icon(state.STOPPING)} stopping" for m in at.markdown), [m.value for m in at.markdown]
        assert not [b for b in at.button if b.key == f"stop_{job.id}"]
    finally:
        jobs._signal_group(job, signal.SIGKILL)
