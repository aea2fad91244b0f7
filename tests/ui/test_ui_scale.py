"""The UI stays responsive on a big store: 50 runs x 16 members, one run with 100 steps and 10k tasks.

The store is synthetic (``tests/synthetic_store.py``: written by the trainer's own RunLog, so it has the layout of a
real run). Limits are generous because CI machines are shared; what they catch is a page that loads
everything (every step's task table, every member's every metric), which takes minutes here, not seconds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

VIEWS = Path(__file__).resolve().parents[2] / "populora" / "ui" / "views"
COLD_S, WARM_S = 15.0, 5.0


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    import synthetic_store

    tmp = tmp_path_factory.mktemp("big_store")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    t0 = time.perf_counter()
    ids = synthetic_store.build(uri, runs=49, members=16, tasks=10_000, steps=100, small_steps=2)
    print(f"built 50 runs in {time.perf_counter() - t0:.1f}s")
    return {"uri": uri, "big": ids[1], "ids": ids}


@pytest.mark.parametrize("page", ["runs", "arms_race", "lineage", "tasks", "compare"])
def test_page_time_on_a_big_store(page, big_store, monkeypatch, tmp_path):
    import streamlit as st

    monkeypatch.setenv("MLFLOW_TRACKING_URI", big_store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / f"{page}.py"), default_timeout=120)
    at.query_params["run"] = big_store["big"]
    t0 = time.perf_counter()
    at.run()
    cold = time.perf_counter() - t0
    assert not at.exception, [e.value for e in at.exception]
    t0 = time.perf_counter()
    at.run()  # a rerun (widget change, live refresh) is served from the cache
    warm = time.perf_counter() - t0
    print(f"{page}: cold {cold:.2f}s, warm {warm:.2f}s")
    assert cold < COLD_S and warm < WARM_S, f"{page}: cold {cold:.1f}s, warm {warm:.1f}s"


def test_runs_page_lists_all_fifty(big_store, monkeypatch, tmp_path):
    import streamlit as st

    monkeypatch.setenv("MLFLOW_TRACKING_URI", big_store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "runs.py"), default_timeout=60).run()
    assert len(at.dataframe[0].value) == 50  # parents only: the 800 member runs are not listed


def test_tasks_page_paginates_ten_thousand_tasks(big_store, monkeypatch, tmp_path):
    import streamlit as st

    monkeypatch.setenv("MLFLOW_TRACKING_URI", big_store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "tasks.py"), default_timeout=120)
    at.query_params["run"] = big_store["big"]
    at.run()
    at.select_slider(key="tk_steps").set_range(1, 100)
    t0 = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - t0
    assert not at.exception, [e.value for e in at.exception]
    assert "10000 tasks match" in " ".join(c.value for c in at.caption)
    assert len(at.expander) == 10  # one page, not ten thousand expanders
    assert elapsed < 30, f"loading all 100 step tables took {elapsed:.1f}s"
