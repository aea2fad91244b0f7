"""Issue 26 on synthetic stores (fast, no model): the Arms race page charts every task kind logged (a kind whose
tasks were never valid included), offers every logged member metric and says why a chart is empty; the Tasks page
explains invalid tasks; Compare keeps ratings and rates on separate axes and handles ties and members that never
played; Launch warns when an override shadows a form field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from conftest import VIEWS, store_page  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    """One finished population run whose code_f tasks are never valid (the demo's failing kind)."""
    import synthetic_store

    from populora.platform.store.tracking import Tracker

    tmp = tmp_path_factory.mktemp("cockpit")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    make_tasks = synthetic_store._tasks

    def no_valid_code_f(step, n, teachers, rng, structures=0):
        tasks = make_tasks(step, n, teachers, rng, structures)
        for t in tasks:
            if t.kind == "code_f":
                t.valid, t.output = False, ""
                t.reason = "error: SyntaxError: invalid syntax" if t.id.endswith(("0", "2", "4", "6", "8")) else "no program parsed"
        return tasks

    synthetic_store._tasks = no_valid_code_f
    try:
        run_id = synthetic_store.make_run(Tracker(uri), "cockpit", members=4, steps=4, tasks_per_step=9)
    finally:
        synthetic_store._tasks = make_tasks
    return {"uri": uri, "run": run_id}


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _chart_titles(at: AppTest, data: bool = False) -> dict[str, dict]:
    """{title: Vega-Lite spec} of the page's charts; ``data``: each spec's rows under "rows" (a DataFrame)."""
    import pyarrow as pa

    out = {}
    for chart in at.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        if data:
            frames = [pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in chart.proto.datasets]
            spec["rows"] = frames[0] if frames else None
        title = spec.get("title")
        out[title if isinstance(title, str) else (title or {}).get("text", "")] = spec
    return out


# ====================================================================== arms race
def test_arms_race_charts_every_kind_with_percent_axes(store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, store["uri"], "arms_race", tmp_path / "jobs", run=store["run"])
    charts = _chart_titles(at)
    for kind in ("code_o", "code_i", "code_f"):
        assert f"validity rate {kind}" in charts, sorted(charts)
    # a rate is drawn in % on [0, 1] whatever its title says; steps are integers
    for title in ("validity rate code_f", "validity rate code_o", "student solve rate", "task validity rate"):
        spec = charts[title]
        y, x = spec["encoding"]["y"], spec["encoding"]["x"]
        assert y["axis"]["format"] == ".0%" and y["scale"]["domain"][0] == 0 and y["scale"]["domain"][1] >= 1, (title, y)
        assert x["axis"]["format"] == "d"
    captions = [c.value for c in at.caption]
    assert any(c.startswith("solve rate code_f: no valid task of this kind") for c in captions), captions
    assert not any("no data yet" in c for c in captions), "a finished run never says 'no data yet'"


def test_arms_race_says_from_when_equal_volume_diversity_is_logged(monkeypatch, tmp_path):
    """A finished run whose teachers wrote fewer valid programs than the equal volume (20): its diversity charts say
    they start at 20 programs and how many it wrote, not that nothing was logged."""
    import synthetic_store

    from populora.platform.store import runlayout as rl
    from populora.platform.store.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    run_id = synthetic_store.make_run(tracker, "few", members=2, steps=2, tasks_per_step=3)
    tracker.log_metric_steps(run_id, {1: {rl.PROGRAMS: 2}, 2: {rl.PROGRAMS: 7}})
    at = store_page(monkeypatch, uri, "arms_race", tmp_path / "jobs", run=run_id)
    captions = [c.value for c in at.caption]
    for title in ("distinct structures among 20 programs (all so far)", "distinct structures among 20 of the last 60 programs"):
        assert f"{title}: logged from the step a run has written 20 valid programs (so far: 7)" in captions, captions
    assert not any("never logged" in c and "distinct structures" in c for c in captions), captions


def test_arms_race_offers_every_logged_member_metric(store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, store["uri"], "arms_race", tmp_path / "jobs", run=store["run"])
    options = at.selectbox(key="ar_metric").options
    for metric in ("student/solve_rate", "rating/mu", "rating/sigma", "train/loss", "train/kl", "train/tokens",
                   "train/rollouts", "curriculum/ast_depth"):  # the synthetic store has no compute/* (the trainer's ledger)
        assert metric in options, options
    at.selectbox(key="ar_metric").set_value("train/tokens").run()
    assert "train/tokens per member" in _chart_titles(_ok(at))


def test_arms_race_without_a_baseline_says_how_to_link_one(store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, store["uri"], "arms_race", tmp_path / "jobs", run=store["run"])
    assert at.selectbox(key="ar_baseline").value is None
    assert any("No baseline run in this store" in c.value and "baseline_run=" in c.value for c in at.caption)


# ====================================================================== tasks
def test_tasks_explain_invalid_tasks(store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, store["uri"], "tasks", tmp_path / "jobs", run=store["run"])
    assert at.select_slider(key="tk_steps").value == (1, 4), "every step shown by default on a short run"
    counts = at.dataframe[0].value  # the count per reason, grouped by kind of failure
    assert {"reason", "kind", "tasks", "share"} <= set(counts.columns)
    assert "error: SyntaxError" in set(counts["reason"]) and "no program parsed" in set(counts["reason"])
    table = at.dataframe[1].value
    assert "reason" in table.columns
    at.multiselect(key="tk_reason").set_value(["error: SyntaxError"]).run()
    _ok(at)
    assert at.expander and all("invalid: error: SyntaxError" in e.label for e in at.expander)
    # the first task is open: its verifier reason and the teacher's raw completion (shown for an invalid task)
    codes = [c.value for c in at.code]
    assert any(c.startswith("error: SyntaxError") for c in codes), codes
    # the teacher's raw completion, after the prompt's prefill (the model continued from there)
    assert any(c.endswith("<task>...</task>") and c != "<task>...</task>" for c in codes), codes


# ====================================================================== compare
def test_compare_separates_rating_and_rate_axes_and_skips_unplayed_members(store, monkeypatch, tmp_path):
    from populora.ui import store as ui_store

    at = store_page(monkeypatch, store["uri"], "compare", tmp_path / "jobs", run=store["run"])
    titles = set(_chart_titles(at))
    assert {"Training scores: ratings (TrueSkill)", "Training scores: rates"} <= titles, titles
    members = ui_store.members(store["uri"], store["run"])
    newborn = set(members.loc[members["born_step"] == 4, "member"])  # evolution at step 4 of 4
    assert newborn, "the synthetic run evolves at its last step"
    table = at.dataframe[-1].value
    ends = [r for r in table.index if r.startswith(("weakest member", "best member"))]
    assert len(ends) == 2 and not any(m in e for e in ends for m in newborn), ends
    assert any("never played a game" in c.value and sorted(newborn)[0] in c.value for c in at.caption)


def test_compare_names_tied_members():
    import pandas as pd

    from populora.ui.compare_table import summarize

    s = pd.DataFrame({"rating/conservative": [23.0691, 23.0694, 20.0]}, index=["T1", "T3", "S0"])
    table = summarize(s, ["T1", "T3", "S0"], None, None, s["rating/conservative"])
    assert "best member (T3; tied: T1)" in table.index and "weakest member (S0)" in table.index


# ====================================================================== launch
@pytest.fixture()
def launch_page(monkeypatch, tmp_path):
    """The Launch page on an empty store, with job starts recorded instead of run."""
    import streamlit as st

    from populora.platform.jobs import jobs

    started = []
    monkeypatch.setattr(jobs, "launch_training", lambda text, name="", env=None, ray_address=None, need=1, max_restarts=0: started.append(
        (text, name)) or jobs.Job(id=f"fake{len(started)}", argv=[], dir=str(tmp_path), created=0.0, name=name))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    return AppTest.from_file(str(VIEWS / "launch.py"), default_timeout=90).run(), started


def test_launch_warns_when_an_override_shadows_a_field_and_names_the_run_after_it(launch_page):
    import yaml

    at, started = launch_page
    at.text_area(key="f_smoke_overrides").set_value("steps=2\nmodel.tiny_random=true")
    at.button[0].click().run()
    _ok(at)
    assert any("`steps`" in w.value and "steps=2" in w.value and "the run uses 2" in w.value for w in at.warning), \
        [w.value for w in at.warning]
    (text, name), = started
    assert yaml.safe_load(text)["steps"] == 2
    assert name == "smoke steps=2 model.tiny_random=true"


def test_launch_shows_field_errors_with_override_errors(launch_page):
    at, started = launch_page
    at.number_input(key="f_smoke_population.teachers").set_value(0)
    at.text_area(key="f_smoke_overrides").set_value("population.teacher=3")
    at.button[0].click().run()
    errors = [e.value for e in _ok(at).error]
    assert any("population.teachers" in e and "greater than or equal to 1" in e for e in errors), errors
    assert any("unknown config key 'population.teacher'" in e for e in errors), errors
    assert started == []


def test_plan_of_a_tiny_random_run_says_it_is_not_for_this_run(launch_page):
    at, _ = launch_page
    at.text_area(key="f_smoke_overrides").set_value("model.tiny_random=true")
    at.button[1].click().run()
    assert any("tiny_random" in i.value and "not for this run" in i.value for i in _ok(at).info)


# ====================================================================== runs
def test_runs_page_shows_duration_typed_config_and_respects_filters(store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, store["uri"], "runs", tmp_path / "jobs", run=store["run"])
    table = at.dataframe[0].value
    assert {"duration", "eta"} <= set(table.columns) and table["duration"].iloc[0] != "–"
    assert "None" not in set(table["solve_rate"].astype(str)), "a missing rate reads '–' as in the header"
    assert any(m.label == "training time" for m in at.metric)
    config = json.loads(at.json[0].proto.body)
    assert config["seed"] == 0 and config["steps"] == 4 and config["population"]["single_agent"] is False
    at.text_input[0].set_value("no run has this name").run()
    _ok(at)
    assert any("No run matches these filters" in i.value for i in at.info)
    assert not any(m.label == "progress" for m in at.metric), "no hidden run's details"


def test_ui_hides_the_developer_toolbar():
    from populora.ui.cli import build_argv

    argv = build_argv()
    assert dict(zip(argv[5::2], argv[6::2]))["--client.toolbarMode"] == "viewer"


def test_launch_again_with_a_runs_config(store, monkeypatch, tmp_path):
    """The run's config is copied into this user's cache (POPULORA_CACHE_DIR), never the temp dir all users share."""
    import tempfile

    shared_tmp = tmp_path / "shared-tmp"
    shared_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    monkeypatch.setenv("POPULORA_CACHE_DIR", str(tmp_path / "cache"))
    at = store_page(monkeypatch, store["uri"], "launch", tmp_path / "jobs", from_run=store["run"])
    preset = at.selectbox(key="preset").value
    assert preset == f"config of run {store['run'][:8]}"
    assert at.number_input(key=f"f_{preset}_steps").value == 4 and at.text_input(key=f"f_{preset}_name").value == "cockpit"
    assert (tmp_path / "cache" / "relaunch" / f"{store['run']}.yaml").is_file()
    assert not list(shared_tmp.iterdir())


def test_arms_race_overlays_other_runs(store, monkeypatch, tmp_path):
    import synthetic_store

    from populora.platform.store.tracking import Tracker

    other = synthetic_store.make_run(Tracker(store["uri"]), "other", members=2, steps=2, tasks_per_step=3, seed=5)
    at = store_page(monkeypatch, store["uri"], "arms_race", tmp_path / "jobs", run=store["run"])
    label = next(o for o in at.multiselect(key="ar_overlay").options if o.startswith("other"))
    at.multiselect(key="ar_overlay").set_value([other]).run()
    rows = _chart_titles(_ok(at), data=True)["student solve rate"]["rows"]
    assert set(rows["series"]) == {"run", label}, rows


# ====================================================================== benchmarks during training (eval.every)
@pytest.fixture(scope="module")
def eval_store(tmp_path_factory) -> dict:
    """A baseline and a population that both evaluate every step (evolution at steps 4 and 8 replaces members)."""
    import synthetic_store

    from populora.platform.store.tracking import Tracker

    uri = f"sqlite:///{tmp_path_factory.mktemp('eval_curves') / 'mlflow.db'}"
    tracker = Tracker(uri)
    baseline = synthetic_store.make_run(tracker, "baseline", 1, 8, 6, baseline=True, seed=5, eval_every=1, skill=0.25)
    population = synthetic_store.make_run(tracker, "population", 4, 8, 6, baseline_run=baseline, seed=6,
                                          eval_every=1, skill=0.3)
    plain = synthetic_store.make_run(tracker, "no-eval", 4, 2, 6, seed=7)
    return {"uri": uri, "baseline": baseline, "population": population, "plain": plain}


def _member_scores(uri: str, run_id: str, key: str) -> dict[str, dict[int, float]]:
    """The reference: {member: {step: value}} read straight from each member run's history in MLflow."""
    from mlflow import MlflowClient

    from populora.platform.store import runlayout as rl

    client = MlflowClient(tracking_uri=uri)
    return {c.data.tags[rl.MEMBER_ID]: {m.step: m.value for m in client.get_metric_history(c.info.run_id, key)}
            for c in rl.member_runs(client, run_id)}


def test_arms_race_plots_population_mean_and_weakest_against_the_baseline(eval_store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, eval_store["uri"], "arms_race", tmp_path / "jobs", run=eval_store["population"])
    assert at.selectbox(key="ar_baseline").value == eval_store["baseline"], "the linked baseline is picked"
    charts = _chart_titles(at, data=True)
    for name, label in (("humaneval_plus", "HumanEval+"), ("gsm8k", "GSM8K")):
        spec = charts[f"{label}: score"]
        assert spec["encoding"]["y"]["axis"]["format"] == ".0%"
        rows = spec["rows"]
        assert set(rows["series"]) == {"population mean", "population weakest", "baseline"}
        members = _member_scores(eval_store["uri"], eval_store["population"], f"eval/{name}/score")
        replaced = {m for m, h in members.items() if max(h) < 8}
        born = {m for m, h in members.items() if min(h) > 1}
        assert replaced and born, "evolution replaced members mid-run: their histories stop, the children's start"
        for step in range(1, 9):
            alive = [h[step] for h in members.values() if step in h]
            assert len(alive) == 4, (step, alive)  # exactly the members alive at the step
            got = rows[rows["step"] == step].set_index("series")["value"]
            assert got["population mean"] == pytest.approx(sum(alive) / len(alive))
            assert got["population weakest"] == pytest.approx(min(alive))
        (baseline,) = _member_scores(eval_store["uri"], eval_store["baseline"], f"eval/{name}/score").values()
        line = rows[rows["series"] == "baseline"].set_index("step")["value"]
        assert line.to_dict() == pytest.approx(baseline)
    captions = " ".join(c.value for c in at.caption)
    assert "fixed subset: humaneval_plus, gsm8k, 20 items each (subset seed 0), every step (population), every step (baseline)" in captions


def test_arms_race_eval_metric_can_be_switched(eval_store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, eval_store["uri"], "arms_race", tmp_path / "jobs", run=eval_store["population"])
    assert at.selectbox(key="ar_eval_metric").options[0] == "score"
    at.selectbox(key="ar_eval_metric").set_value("truncated_rate").run()
    assert "GSM8K: truncated_rate" in _chart_titles(_ok(at))


def test_arms_race_without_in_training_evaluation_says_how_to_turn_it_on(eval_store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, eval_store["uri"], "arms_race", tmp_path / "jobs", run=eval_store["plain"])
    assert any("does not evaluate during training" in c.value and "eval.every" in c.value for c in at.caption)
    assert not any(t.endswith(": score") for t in _chart_titles(at))


def _final_evaluation(uri: str, run_id: str, tmp_path: Path) -> dict:
    """What ``populora eval --run`` leaves after training: results.json (the source of truth) and its metrics,
    with scores far from the in-training subset's so a mix-up shows."""
    from populora.evaluation import results
    from populora.evaluation.targets import MEMBER, Target
    from populora.platform.store.tracking import Tracker
    from populora.ui import store as ui_store

    tracker = Tracker(uri)
    members = ui_store.members(uri, run_id)
    alive = members[members["alive"]]
    targets = [Target(r.member, MEMBER, None, r.member_run_id, {"role": r.role, "alive": "true"}) for r in alive.itertuples()]
    scores = {t.label: {"gsm8k": {"alias": "GSM8K", "metrics": {"accuracy": 0.9 + 0.01 * i}, "primary": "accuracy",
                                  "score": 0.9 + 0.01 * i, "n": 100}} for i, t in enumerate(targets)}
    data = results.build(targets, scores, {"run": run_id, "limit": None, "protocol": {"name": "quick"}})
    paths = results.write_local(tmp_path / "eval", data)
    results.log_mlflow(tracker, run_id, targets, data, paths)
    return data


# `populora eval` logs the final scores at MLflow step 0, so the last point of an in-training curve (step N > 0) is
# what MLflow calls a member's "latest" eval/* metric: the Compare page reads results.json (the contract's source of
# truth), never those latest metrics.
def test_in_training_histories_do_not_change_a_finished_evaluation(eval_store, monkeypatch, tmp_path):
    """The report reads results.json; the Compare page shows the final evaluation's scores, never the last point
    of a subset curve logged under the same eval/<benchmark>/<metric> names during training."""
    import streamlit as st

    from populora.evaluation import report, results
    from populora.platform.store.tracking import Tracker

    data = _final_evaluation(eval_store["uri"], eval_store["population"], tmp_path)
    loaded = results.load(Tracker(eval_store["uri"]), eval_store["population"])
    assert loaded["results"] == data["results"]
    assert report.text(report.build(loaded)) == report.text(report.build(data))
    st.cache_data.clear()
    at = store_page(monkeypatch, eval_store["uri"], "compare", tmp_path / "jobs", run=eval_store["population"])
    bench = at.dataframe[0].value
    members = [r for r in bench.index if r[:1] in "TS" and r[1:].isdigit()]
    final = {t: 100 * per["gsm8k"]["accuracy"] for t, per in data["results"].items()}
    assert {m: bench.loc[m, "GSM8K"] for m in members} == pytest.approx(final)


def test_arms_race_warns_when_the_baseline_scored_another_subset(eval_store, monkeypatch, tmp_path):
    from mlflow import MlflowClient

    from populora.platform.store import runlayout as rl

    client = MlflowClient(tracking_uri=eval_store["uri"])
    client.set_tag(eval_store["baseline"], rl.EVAL_SUBSET_SEED, "7")
    try:
        at = store_page(monkeypatch, eval_store["uri"], "arms_race", tmp_path / "jobs", run=eval_store["population"])
        assert any("evaluated different subsets" in w.value for w in at.warning), [w.value for w in at.warning]
        assert any("population: humaneval_plus, gsm8k, 20 items each (subset seed 0)" in c.value
                   and "(subset seed 7)" in c.value for c in at.caption)
    finally:
        client.set_tag(eval_store["baseline"], rl.EVAL_SUBSET_SEED, "0")
