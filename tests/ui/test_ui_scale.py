"""The UI stays responsive on a big store: 50 runs, 234 member runs, one run of 16 members with 100 steps and 10k
tasks.

The store is synthetic (``tests/synthetic_store.py``: written by the trainer's own RunLog, so it has the layout of a
real run). What makes a page slow on a big store is reading too much of it (every run, every step's task table,
every member's every metric), so the tests count the page's reads of the store instead of timing it (a timed
limit fails on a loaded machine and passes a page that reads everything from a fast disk): a first load reads a
bounded number of runs, artifacts and metric histories, none growing with the store's 50 runs, 234 member runs
or 100 step tables, and a rerun (a widget change, a live refresh) reads nothing, all of it from the cache. The 48
small runs have 4 members each: a page that read every member run would read 234, far over the bounds (16 members
each made the store take 42 s of CPU to build, against 24, for nothing more that a bound could tell)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import mlflow.artifacts
import pytest
from mlflow import MlflowClient

pytest.importorskip("streamlit")
from streamlit.runtime.caching import cache_utils  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

VIEWS = Path(__file__).resolve().parents[2] / "populora" / "ui" / "views"
MEMBERS = 16
# a first load's reads, at most: a few run lookups (not one per run or member run), a few artifacts (not one per
# step table), a handful of metric histories per member of the one run shown (not every metric of every member)
COLD_READS = {"search_experiments": 3, "search_runs": 6, "get_run": MEMBERS, "list_artifacts": 3, "download": 10,
              "get_metric_history": 5 * MEMBERS}


@pytest.fixture
def store_reads(monkeypatch) -> Counter:
    """Every read of the MLflow store from here on, by kind (the client's read calls; artifact downloads).

    Streamlit's cache clock stands still meanwhile (``cache_utils.TTLCACHE_TIMER``, which Streamlit exposes for
    tests): an entry lives ``store.TTL`` seconds, and on a loaded machine a rerun can come later than that, when
    re-reading is right (a live refresh) but is not what these tests look at."""
    monkeypatch.setattr(cache_utils, "TTLCACHE_TIMER", lambda: 0.0)
    reads = Counter()

    def counted(name, fn):
        def call(*args, **kwargs):
            reads[name] += 1
            return fn(*args, **kwargs)
        return call

    for name in ("search_experiments", "search_runs", "get_run", "list_artifacts", "get_metric_history"):
        monkeypatch.setattr(MlflowClient, name, counted(name, getattr(MlflowClient, name)))
    monkeypatch.setattr(mlflow.artifacts, "download_artifacts", counted("download", mlflow.artifacts.download_artifacts))
    return reads


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    import synthetic_store

    tmp = tmp_path_factory.mktemp("big_store")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    t0 = time.perf_counter()
    ids = synthetic_store.build(uri, runs=49, members=16, tasks=10_000, steps=100, small_steps=2, small_members=4)
    print(f"built 50 runs in {time.perf_counter() - t0:.1f}s")
    return {"uri": uri, "big": ids[1], "ids": ids}


@pytest.mark.parametrize("page", ["runs", "arms_race", "lineage", "tasks", "compare"])
def test_page_reads_on_a_big_store(page, big_store, store_reads, monkeypatch, tmp_path):
    import streamlit as st

    monkeypatch.setenv("MLFLOW_TRACKING_URI", big_store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / f"{page}.py"), default_timeout=120)
    at.query_params["run"] = big_store["big"]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    cold = dict(store_reads)
    print(f"{page}: first load {cold}")
    assert {k: n for k, n in cold.items() if n > COLD_READS[k]} == {}, f"{page} read more than {COLD_READS}: {cold}"
    store_reads.clear()
    at.run()  # a rerun (widget change, live refresh) is served from the cache
    assert not at.exception and dict(store_reads) == {}, f"{page}'s rerun read the store: {dict(store_reads)}"


def test_runs_page_lists_all_fifty(big_store, monkeypatch, tmp_path):
    import streamlit as st

    monkeypatch.setenv("MLFLOW_TRACKING_URI", big_store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "runs.py"), default_timeout=60).run()
    assert len(at.dataframe[0].value) == 50  # parents only: the 234 member runs are not listed


def test_tasks_page_paginates_ten_thousand_tasks(big_store, store_reads, monkeypatch, tmp_path):
    import streamlit as st

    monkeypatch.setenv("MLFLOW_TRACKING_URI", big_store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "tasks.py"), default_timeout=120)
    at.query_params["run"] = big_store["big"]
    at.run()
    at.select_slider(key="tk_steps").set_range(1, 100)
    store_reads.clear()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "10000 tasks match" in " ".join(c.value for c in at.caption)
    assert len(at.expander) == 10  # one page, not ten thousand expanders
    assert store_reads["download"] <= 2 * 100  # each step's tasks and answers tables read once (no more)
    store_reads.clear()
    at.run()
    assert dict(store_reads) == {}, f"the rerun read the store again: {dict(store_reads)}"
