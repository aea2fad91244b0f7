"""Every rating the UI shows is the one the trainer recorded (issue 26, item 1): a member replaced at evolution
keeps, on its member run and on the Lineage, Compare and Arms race pages, the rating it had at the step it was
replaced in, not the one of the step before.

The truth is ``population.json``: the trainer's own state, where a replaced member's rating is frozen when it dies.
One store is synthetic (written by the trainer's RunLog and step_record from made-up steps, fast), one is a real
2-step tiny run with evolution every step (the issue's own reproduction)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import app_page, trained_runs

pytest.importorskip("streamlit")

from populora.platform.store import runlayout as rl

ROOT = Path(__file__).resolve().parents[2]


def _truth(uri: str, run_id: str) -> dict[str, dict]:
    """population.json of the run, straight from the store: {member: {mu, sigma, alive}}."""
    return {m["id"]: m for m in rl.population_of(rl.read_json(uri, run_id, rl.POPULATION_FILE))}


def assert_recorded_ratings(uri: str, run_id: str, logged: bool = True) -> None:
    """Member runs (``logged``), Lineage, Compare and Arms race: each member's rating at its last step is
    population.json's. The pages read the store the test set (``MLFLOW_TRACKING_URI``: ``uri``)."""
    import streamlit as st
    from mlflow import MlflowClient

    from populora.ui import store
    from populora.ui.lineage_graph import graph_data

    truth = _truth(uri, run_id)
    dead = [m for m, t in truth.items() if not t["alive"]]
    assert dead, "the run must have replaced members"
    # 1. the trainer logged the rating of the replacement step on the dead member's own run
    client = MlflowClient(uri)
    children = rl.members_by_id(rl.member_runs(client, run_id))
    lineage = rl.lineage_of(rl.read_json(uri, run_id, rl.LINEAGE))
    died_at = {e["replaced"]: e["step"] for e in lineage["events"] if e.get("replaced")}
    for m, t in truth.items():
        for key in ("mu", "sigma") if logged else ():
            points = client.get_metric_history(children[m].info.run_id, f"rating/{key}")
            last = max(points, key=lambda p: p.step)
            assert last.value == pytest.approx(t[key]), (m, key, last.step, last.value, t[key])
            if m in died_at:
                assert last.step == died_at[m], f"{m}: last rating at step {last.step}, replaced at {died_at[m]}"
        if m in died_at:
            tags = children[m].data.tags
            assert tags[rl.REPLACED_AT] == str(died_at[m]) and tags[rl.ALIVE] == "false"
            assert children[m].info.run_name.startswith(f"{m} (") and f"replaced by {tags[rl.REPLACED_BY]}" in children[m].info.run_name
        else:
            assert children[m].info.run_name.endswith("alive"), children[m].info.run_name

    # 2. the data behind the pages
    st.cache_data.clear()
    members = store.members(uri, run_id)
    nodes = {n["id"]: n for n in graph_data(uri, run_id, members)}
    for m, t in truth.items():
        assert nodes[m]["mu"] == pytest.approx(t["mu"]) and nodes[m]["sigma"] == pytest.approx(t["sigma"]), m
        row = members.set_index("member").loc[m]
        assert row["rating/mu"] == pytest.approx(t["mu"]) and bool(row["alive"]) == t["alive"], m
        mu = store.member_histories(uri, run_id, "rating/mu", [m])
        assert mu.sort_values("step")["value"].iloc[-1] == pytest.approx(t["mu"]), m
    for m in died_at:
        assert nodes[m]["replaced_at"] == died_at[m] and nodes[m]["replaced_by"], m

    # 3. the pages themselves
    victim = dead[0]
    at = app_page("lineage", run=run_id, member=victim)
    shown = {m.label: m.value for m in at.metric}
    assert shown["rating μ ± σ (at replacement)"] == f"{truth[victim]['mu']:.2f} ± {truth[victim]['sigma']:.2f}"
    assert shown["status"] == "replaced"
    text = "\n".join(str(e.value) for e in at.markdown)
    assert f"**replaced** at step {died_at[victim]} by" in text
    assert f'"{victim}" [label="{victim}\\nμ {truth[victim]["mu"]:.1f}' in at.get("graphviz_chart")[0].proto.spec

    at = app_page("compare", run=run_id)
    at.multiselect(key="cmp_members").set_value(list(truth)).run()
    table = at.dataframe[-1].value
    for m, t in truth.items():
        assert table.loc[m, "rating/mu"] == f"{t['mu']:.2f}", m  # the table's cells are the text the page shows

    at = app_page("arms_race", run=run_id)
    at.toggle(key="ar_alive").set_value(False).run()
    assert set(at.multiselect(key="ar_members").value) == set(truth)


def test_recorded_ratings_on_a_synthetic_run_with_evolution(tmp_path, monkeypatch):
    import synthetic_store

    from populora.platform.store.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    run_id = synthetic_store.make_run(Tracker(uri), "evolving", members=4, steps=8, tasks_per_step=6)
    assert_recorded_ratings(uri, run_id)


def test_a_store_from_before_the_fix_reads_right_from_population_json(tmp_path, monkeypatch):
    """A store whose replaced members' runs stop at the step before their replacement (the trainer before issue 26):
    the pages still show the recorded ratings, read from population.json."""
    import synthetic_store

    from populora.platform.store.tracking import Tracker
    from populora.training.run import run_log

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    member_metrics = run_log.member_metrics
    monkeypatch.setattr(run_log, "member_metrics", lambda *a, dead=(), **k: member_metrics(*a, **k))  # the old trainer
    run_id = synthetic_store.make_run(Tracker(uri), "old", members=4, steps=8, tasks_per_step=6)
    with pytest.raises(AssertionError):
        assert_recorded_ratings(uri, run_id)  # the member runs lack the replacement step's rating...
    assert_recorded_ratings(uri, run_id, logged=False)  # ...and the pages show it all the same


def test_recorded_ratings_on_a_real_tiny_run(tmp_path, monkeypatch):
    """The issue's reproduction: 2 steps of the smoke preset on a tiny random model, evolution every step."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    (run_id,) = trained_runs(tmp_path, uri, "--config", str(ROOT / "configs/smoke.yaml"), "--set", "steps=2",
                                 "--set", "evolution.every=1", "--set", "model.tiny_random=true",
                                 "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
                                 "--set", "tasks.tasks_per_teacher=2", "--quiet")
    assert_recorded_ratings(uri, run_id)
