"""The UI's sweep pieces (AppTest): the Runs page groups a sweep's runs with its progress, the Compare page says
what to run before a sweep has statistics, the Launch page starts a sweep as one background driver job."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from populora.platform import runlayout as rl  # noqa: E402
from populora.platform import sweep as S  # noqa: E402

VIEWS = Path(__file__).resolve().parents[2] / "populora" / "ui" / "views"


@pytest.fixture
def sweep_store(tmp_path, monkeypatch):
    """A synthetic store whose baseline and first population run form sweep "sw-test" (seed 0), 3 runs planned."""
    import json

    from mlflow import MlflowClient

    import synthetic_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_SWEEPS_DIR", str(tmp_path / "sweeps"))
    baseline, population, other = synthetic_store.build(uri, runs=2, members=2, tasks=6, steps=2)
    client = MlflowClient(uri)
    for rid, label in ((baseline, S.BASELINE_LABEL), (population, "population.teachers=2")):
        for k, v in rl.sweep_tags("sw-test", S.run_key(label, 0), label, 0).items():
            client.set_tag(rid, k, v)
        client.set_terminated(rid, "FINISHED")
    (tmp_path / "sweeps" / "sw-test").mkdir(parents=True)
    (tmp_path / "sweeps" / "sw-test" / "plan.json").write_text(json.dumps([{}, {}, {}]))
    return {"baseline": baseline, "population": population, "other": other}


def _page(name: str) -> AppTest:
    import streamlit as st

    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / f"{name}.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_runs_page_groups_a_sweep_with_its_progress(sweep_store):
    at = _page("runs")
    sweeps = at.dataframe[0].value
    row = sweeps.set_index("sweep").loc["sw-test"]
    assert (row["finished"], row["planned"], row["configs"], row["seeds"]) == (2, 3, 2, 1)
    assert set(at.dataframe[1].value["run_id"]) >= {sweep_store["other"], sweep_store["population"]}
    at.selectbox(key="runs_sweep").select("sw-test").run()
    assert not at.exception
    assert set(at.dataframe[1].value["run_id"]) == {sweep_store["baseline"], sweep_store["population"]}


def test_compare_page_says_how_to_evaluate_a_sweep(sweep_store):
    at = _page("compare")
    assert any("Sweeps" in s.value for s in at.subheader)
    assert any("populora eval --sweep sw-test" in i.value for i in at.info)


def test_launch_page_starts_a_sweep_driver(sweep_store, monkeypatch):
    from populora.platform import jobs

    started = []
    monkeypatch.setattr(jobs, "start", lambda argv, name="", env=None, **kw: started.append((argv, name, env)) or
                        jobs.Job(id="fake", argv=argv, dir=os.environ["POPULORA_JOBS_DIR"], created=0.0, name=name))
    at = _page("launch")
    at.checkbox(key="f_smoke_sweep").check()
    at.text_area(key="f_smoke_grid").input("population.teachers,population.students=2:2,2:4")
    at.checkbox(key="f_smoke_baseline").check()
    # before launching: the smallest difference the form's seeds per arm (2, its default) detect, from power.py
    from populora.evaluation import planned_mde

    expected = f"Power before launch: {planned_mde(2)['words']}"  # the dry run's and plan's line (power.mde)
    assert any(c.value.startswith(expected) for c in at.caption), [c.value for c in at.caption]
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    ((argv, name, env),) = started
    assert argv[argv.index("sweep") + 1:argv.index("sweep") + 2] == ["--config"] and "--wait" in argv and "--baseline" in argv
    assert argv[argv.index("--grid") + 1] == "population.teachers,population.students=2:2,2:4"
    assert "6 runs" in name and env["MLFLOW_TRACKING_URI"] == os.environ["MLFLOW_TRACKING_URI"]
