"""The numbers a run's page shows, from one source each (issue 67, item 3), in AppTest: a stopped run says the
step its trainer finished and the checkpoint Resume goes on from (it said "Stopped at step 4/6" while the job log
said 5/6); training time never goes back when a run stops (1m 22s live, then 1m 05s); a budget-stopped baseline is
done, not "5/56" at 8.93%; a tiny random run's header says so; right after a launch on an empty store, Runs points
at its job, not at "the table above". Runs as a trainer leaves them, no model."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from conftest import HOLD, app_page, wait_for

pytest.importorskip("streamlit")

from populora.platform import progress
from populora.platform.jobs import jobs
from populora.platform.store import runlayout as rl


def _run(one_slot_queue, status: str, steps: int, kept: int, tiny: bool = False) -> tuple[str, Path]:
    """A run as a trainer leaves it: its run dir, the progress tag at its last checkpoint ``kept``, ended ``status``."""
    from populora.training.config import TrainConfig
    from populora.training.run.run_log import RunLog

    cfg = TrainConfig(name="smoke", steps=steps, model={"tiny_random": tiny, "base": "embedded"})
    log = RunLog.start(cfg)
    run_dir = one_slot_queue["dir"] / "runs" / log.run_id
    run_dir.mkdir(parents=True)
    log.describe(cfg, run_dir)
    log.tracker.set_tags(log.run_id, {rl.PROGRESS: rl.progress(kept, steps)})
    log.end(status)
    return log.run_id, run_dir


def _record(run_dir: Path, **fields) -> None:
    (run_dir / progress.FILE).write_text(json.dumps({"steps": 6, "last": {}, **fields}))


def test_a_stopped_run_says_the_step_it_finished_and_keeps_its_training_time(one_slot_queue):
    """Known truth: the trainer finished step 5 (its progress record) and stopped 17 s into step 6; its last
    checkpoint is step 4 (checkpoint.every 2: the tag). Steps before step 6 took 65 s (the record's training_s)."""
    from mlflow import MlflowClient

    run_id, run_dir = _run(one_slot_queue, rl.STOPPED, steps=6, kept=4)
    t0 = time.time() - 600
    _record(run_dir, step=6, phase="solve", training_s=65.0, step_started=t0, phase_started=t0, updated=t0 + 17)
    MlflowClient(one_slot_queue["uri"]).log_metric(run_id, rl.TRAINING_SECONDS, 50.0, step=4)  # the steps' metric
    live = progress.training_seconds(json.loads((run_dir / progress.FILE).read_text()), now=t0 + 17)  # as shown live
    assert live == 82.0
    at = app_page("runs", run=run_id)
    note = next(i.value for i in at.info if i.value.startswith("Stopped"))
    assert note.startswith("Stopped after step 5/6; its last checkpoint is step 4, so Resume goes on from there"), note
    shown = {m.label: m.value for m in at.metric}["training time"]
    assert shown == "1m 22s", shown  # 65 s of steps and the 17 s of step 6 it ran: not the metric's 50 s
    table = at.dataframe[0].value.set_index("run_id")
    assert table.loc[run_id, "training"] == shown


def test_a_budget_stopped_baseline_is_done_with_a_full_bar(one_slot_queue):
    run_id, run_dir = _run(one_slot_queue, rl.FINISHED, steps=56, kept=5)
    from mlflow import MlflowClient

    MlflowClient(one_slot_queue["uri"]).set_tag(run_id, rl.BUDGET, "spent 1.0e6 of a 1.0e6 token target")
    at = app_page("runs", run=run_id)
    row = at.dataframe[0].value.set_index("run_id").loc[run_id]
    assert row["done"] == 1.0 and row["progress"] == "5 (compute budget reached; at most 56)", row
    assert {m.label: m.value for m in at.metric}["progress"] == row["progress"]


def test_a_tiny_random_runs_header_names_its_model(one_slot_queue):
    run_id, _ = _run(one_slot_queue, rl.FINISHED, steps=2, kept=2, tiny=True)
    at = app_page("runs", run=run_id)
    header = next(c.value for c in at.caption if c.value.startswith("run id"))
    assert "base model `tiny random model shaped like embedded`" in header, header


def test_runs_right_after_a_launch_points_at_its_job_not_at_a_table(one_slot_queue):
    holder = jobs.start([sys.executable, "-c", HOLD], name="a launch loading its model", slots=1)
    wait_for(lambda: holder.status == "running", 60, "the job to hold its slot")
    at = app_page("runs")
    said = "\n".join(e.value for kind in ("info", "markdown") for e in getattr(at, kind))
    assert "the table above" not in said and "No run in the store yet" in said, said
    assert "without a run in the store yet" in said
