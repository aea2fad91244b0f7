"""The Runs page's Resume offers what ``populora train --resume RUN [--step N]`` does: the newest intact checkpoint
by default, or a step the run keeps; the job it starts carries that choice."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from populora.platform import config as config_io  # noqa: E402
from populora.platform.jobs import jobs
from populora.platform.store import runlayout as rl
from populora.training.config import TrainConfig  # noqa: E402
from populora.training.run.run_log import RunLog  # noqa: E402
from populora.ui.resume_choice import NEWEST  # noqa: E402

VIEWS = Path(__file__).resolve().parents[2] / "populora" / "ui" / "views"


@pytest.fixture()
def stopped_run(tmp_path, monkeypatch):
    """A stopped run in a fresh store whose run dir keeps checkpoints 1 and 2; the UI's jobs in tmp_path."""
    import streamlit as st

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_QUEUE_DIR", str(tmp_path / "queue"))
    monkeypatch.chdir(tmp_path)
    st.cache_data.clear()
    cfg = TrainConfig(name="stopped", steps=4)
    log = RunLog.start(cfg)
    run_dir = tmp_path / "runs" / log.run_id
    for step in (1, 2):
        path = rl.checkpoint_dir(run_dir, step)
        path.mkdir(parents=True)
        (path / rl.CHECKPOINT_STATE).write_text("{}")
        (path / "config.yaml").write_text(config_io.dump(cfg))  # the page's fork form reads it
    log.describe(cfg, run_dir)
    log.end(rl.STOPPED)
    yield log.run_id
    for job in jobs.list_jobs(tmp_path / "jobs"):  # never leave a process behind
        jobs.stop(job, timeout_s=10)


def _runs_page(run_id: str) -> AppTest:
    at = AppTest.from_file(str(VIEWS / "runs.py"), default_timeout=90)
    at.query_params["run"] = run_id
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("choice, argv", [(None, []), (1, ["--step", "1"])])
def test_resume_from_a_chosen_checkpoint_starts_the_job_with_its_step(stopped_run, choice, argv):
    at = _runs_page(stopped_run)
    picker = next(s for s in at.selectbox if s.label == "Resume from")
    assert picker.options == [NEWEST, "step 2", "step 1"] and picker.value is None  # the newest intact by default
    if choice is not None:
        picker.select(choice)
    next(b for b in at.button if b.label == "Resume").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    job = jobs.latest_for_run(stopped_run)
    assert job is not None and job.argv[3:] == ["train", "--resume", stopped_run, "--quiet", *argv]
