"""Compare and League know their jobs on the way (issue 54): an evaluation of the run queued behind another job is
shown with its place in line on Compare, not "No benchmark scores ... Launch an evaluation"; a league queued, then
one playing with its (student, task) pairs answered, shown on League, not "No league yet". Stand-in processes
hold the slots (released by a file, not a sleep); the pages are AppTest's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from conftest import wait_for_status
from streamlit.testing.v1 import AppTest

from populora.platform.jobs import jobs, queue

VIEWS = Path(__file__).resolve().parents[2] / "populora" / "ui" / "views"


def _hold(go: Path) -> list[str]:
    """A stand-in job's argv: it holds its slot until ``go`` exists."""
    return [sys.executable, "-c", f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.1)"]


@pytest.fixture
def queue_env(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    go, started = tmp_path / "go", []
    yield go, started
    go.write_text("x")
    for job in started:
        wait_for_status(job, ("finished", "failed", "stopped", "lost"))


def _page(name: str, run: str | None = None) -> AppTest:
    import streamlit as st

    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / name), default_timeout=90)
    if run:
        at.query_params["run"] = run
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_compare_shows_a_queued_evaluation_instead_of_launch_one(queue_env, tmp_path):
    import synthetic_store

    go, started = queue_env
    _, population = synthetic_store.build(f"sqlite:///{tmp_path / 'mlflow.db'}", runs=1, members=4, tasks=12, steps=2)
    before = _page("compare.py", population)
    assert any("No benchmark scores" in i.value for i in before.info)  # nothing on its way: say how to start one
    started.append(jobs.start(_hold(go), name="train", slots=1))
    assert wait_for_status(started[0], ("running",)) == "running"
    ev = jobs.start(_hold(go), name="eval of the run", kind="eval", slots=1,
                    files={"config.yaml": yaml.safe_dump({"run": population, "benchmarks": "gsm8k"})})
    started.append(ev)
    assert wait_for_status(ev, ("queued",)) == "queued" and queue.position(ev) == 1
    at = _page("compare.py", population)
    said = [i.value for i in at.info]
    assert not any("No benchmark scores" in s for s in said), said
    assert any("An evaluation of this run is on its way" in s and "queued · #1 in line" in s for s in said), said


def test_league_shows_a_queued_and_a_playing_league_instead_of_no_league_yet(queue_env, tmp_path):
    go, started = queue_env
    assert any("No league yet" in i.value for i in _page("league.py").info)
    out = tmp_path / "league_out"
    out.mkdir()
    started.append(jobs.start(_hold(go) + ["--out", str(out)], name="league lg-1234", kind="league", slots=1))
    assert wait_for_status(started[0], ("running",)) == "running"
    waiting = jobs.start(_hold(go) + ["--out", str(tmp_path / "other")], name="league lg-5678", kind="league", slots=1)
    started.append(waiting)
    assert wait_for_status(waiting, ("queued",)) == "queued"
    (out / "entrants.json").write_text("[]")  # the panel is being written: no answers yet
    said = [i.value for i in _page("league.py").info]
    assert not any("No league yet" in s for s in said), said
    assert any("league lg-5678" in s and "queued · #1 in line" in s for s in said), said
    assert any("league lg-1234" in s and "running · writing the task panel" in s for s in said), said
    (out / "progress.json").write_text(json.dumps({"pairs_done": 6, "pairs": 12}))
    at = _page("league.py")
    assert any("league lg-1234" in i.value and "answered 6/12 (student, task) pairs" in i.value for i in at.info)
    assert at.get("progress")[0].value == 50
