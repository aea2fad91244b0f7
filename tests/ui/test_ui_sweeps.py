"""The UI's sweep pieces (AppTest): the Runs page groups a sweep's runs with its progress, the Compare page says
what to run before a sweep has statistics, the Launch page starts a sweep as one background driver job."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from populora.platform.store import runlayout as rl
from populora.platform.store import sweep as S

VIEWS = Path(__file__).resolve().parents[2] / "populora" / "ui" / "views"


@pytest.fixture
def sweep_store(tmp_path, monkeypatch):
    """A synthetic store whose baseline and first population run form sweep "sw-test": seed 0 of its 4 planned runs
    (one configuration and the baseline, 2 seeds: the walk's sweep at 2 of 4 runs done)."""
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
    plan = [{"key": S.run_key(label, seed), "config": label, "seed": seed, "baseline": label == S.BASELINE_LABEL}
            for seed in (0, 1) for label in ("population.teachers=2", S.BASELINE_LABEL)]
    (tmp_path / "sweeps" / "sw-test" / "plan.json").write_text(json.dumps(plan))
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
    # counted from the plan, not from the runs started so far (which said "configs 2, seeds 1" here)
    assert (row["finished"], row["planned"], row["configs"], row["seeds"], row["baseline"]) == (2, 4, 1, 2, "yes")
    assert set(at.dataframe[1].value["run_id"]) >= {sweep_store["other"], sweep_store["population"]}
    at.selectbox(key="runs_sweep").select("sw-test").run()
    assert not at.exception
    assert set(at.dataframe[1].value["run_id"]) == {sweep_store["baseline"], sweep_store["population"]}


def test_compare_page_says_how_to_evaluate_a_sweep(sweep_store):
    at = _page("compare")
    assert any("Sweeps" in s.value for s in at.subheader)
    assert any("populora eval --sweep sw-test" in i.value for i in at.info)


def test_launch_page_starts_a_sweep_driver(sweep_store, monkeypatch):
    from populora.platform.jobs import jobs

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


def test_a_sweep_run_links_to_its_job_log(sweep_store):
    """The walk's finding: each run of a sweep launched from Launch said "not launched from this UI", though its
    sweep's driver ran it as a job (under the sweep's dir, not the UI's jobs dir) with a log."""
    from populora.platform.jobs import jobs
    from populora.platform.store import runlayout

    job_dir = S.sweeps_dir() / "sw-test" / "jobs" / "20260101-000000-abcdef"
    job_dir.mkdir(parents=True)
    jobs.Job(id=job_dir.name, argv=["x"], dir=str(job_dir), created=1.0, name="sweep run").save()
    runlayout.write_run_id(job_dir, sweep_store["population"])
    (job_dir / "log.txt").write_text("step 1/2 | the sweep run's own log\n")
    (job_dir / "exit_code").write_text("0")
    import streamlit as st

    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "runs.py"), default_timeout=60)
    at.query_params["run"] = sweep_store["population"]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("not launched from this UI" in c.value for c in at.caption)
    assert any(e.label.startswith("job log (finished") for e in at.expander), [e.label for e in at.expander]
    assert any("the sweep run's own log" in c.value for c in at.code)


def test_a_sweep_of_zero_seeds_is_refused_with_words(sweep_store, monkeypatch):
    """The walk's finding: Seeds = 0 reddened the field, started nothing and said nothing, while the power line
    still spoke of 2 seeds."""
    from populora.platform.jobs import jobs

    started = []
    monkeypatch.setattr(jobs, "start", lambda *a, **kw: started.append(a))
    at = _page("launch")
    at.checkbox(key="f_smoke_sweep").check()
    at.number_input(key="f_smoke_seeds").set_value(0)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert started == []
    errors = [e.value for e in at.error]
    assert any("Seeds is 0" in e and "set Seeds to 1 or more" in e for e in errors), errors
    assert any(c.value.startswith("Power before launch: Seeds is 0") for c in at.caption), [c.value for c in at.caption]
