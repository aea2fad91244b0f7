"""Comparisons only between related runs (issue 67, item 4), on a synthetic store: an embedded population without a
baseline beside a tiny random model's baseline. Arms race drew that baseline by itself and Compare pre-ticked it
in its evaluation form; now neither picks it, and picked by hand it says why it is not this run's. The compute
figure of two base models is "not comparable", its FLOPs from each model's parameters or not given, and the
ledger's FLOPs row shows each arm's figure (it read "1 / 1 / ratio 0.67")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("streamlit")
from conftest import store_page  # noqa: E402

from populora.evaluation import compute
from populora.evaluation.statistics.verdict import compute_side_by_side


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    import synthetic_store

    from populora.platform.store.tracking import Tracker

    uri = f"sqlite:///{tmp_path_factory.mktemp('related') / 'mlflow.db'}"
    tracker = Tracker(uri)
    make_config = synthetic_store._config

    def tiny(*args, **kw):
        cfg = make_config(*args, **kw)
        cfg.model.tiny_random = True
        return cfg

    synthetic_store._config = tiny
    try:
        other = synthetic_store.make_run(tracker, "smoke", members=1, steps=2, tasks_per_step=4, baseline=True)
    finally:
        synthetic_store._config = make_config
    run = synthetic_store.make_run(tracker, "smoke", members=2, steps=2, tasks_per_step=4)
    return {"uri": uri, "run": run, "other": other}


def test_arms_race_draws_no_baseline_of_another_family_or_model(store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, store["uri"], "arms_race", tmp_path / "jobs", run=store["run"])
    box = at.selectbox(key="ar_baseline")
    assert box.value is None
    assert any("No baseline of this run or its family" in c.value for c in at.caption)
    box.set_value(store["other"]).run()
    assert any("another base model (tiny random model shaped like" in w.value for w in at.warning), [w.value for w in at.warning]


def test_compare_does_not_pick_it_so_its_evaluation_form_does_not_tick_it(store, monkeypatch, tmp_path):
    at = store_page(monkeypatch, store["uri"], "compare", tmp_path / "jobs", run=store["run"])
    assert at.selectbox(key="cmp_baseline").value is None
    labels = at.selectbox(key="cmp_baseline").options
    assert any("other base model: tiny random model shaped like" in o for o in labels), labels
    at.selectbox(key="cmp_baseline").set_value(store["other"]).run()
    assert any("not this run's baseline: another base model" in c.value for c in at.caption)
    box = at.checkbox(key="cmp_eval_baseline")  # offered in the evaluation form, not ticked
    assert box.label.startswith("the baseline picked above") and box.value is False


def _metrics(gen: float, trained: float) -> dict:
    return {"compute/per_adapter/generated_tokens": gen, "compute/per_adapter/trained_tokens": trained}


tokens = st.floats(1.0, 1e9)


@given(tokens, tokens, tokens, tokens)
def test_the_ledgers_flops_row_is_each_arms_figure_and_their_ratio(pg, pt, bg, bt):
    rows, _ = compute_side_by_side(_metrics(pg, pt), _metrics(bg, bt))
    row = next(r for r in rows if "FLOPs" in r["quantity"])
    assert row["population"] == pytest.approx(2 * pg + 4 * pt) and row["baseline"] == pytest.approx(2 * bg + 4 * bt)
    assert row["ratio"] == pytest.approx(row["baseline"] / row["population"])


@given(tokens, tokens)
def test_two_base_models_are_never_compute_matched(gen, trained):
    """Identical ledgers, different models: not "compute-matched", and no FLOPs ratio without both models' N."""
    models = ({"model.base": "embedded"}, {"model.base": "embedded", "model.tiny_random": "True"})
    f = compute.figure(_metrics(gen, trained), _metrics(gen, trained), models=models)
    assert not f["matched"] and f["flops_ratio"] is None and f["words"].startswith("not comparable: different base models")
    rows, warning = compute_side_by_side(_metrics(gen, trained), _metrics(gen, trained), models=models)
    assert warning == f["words"] and not any("FLOPs" in r["quantity"] for r in rows)


def test_flops_across_two_known_models_use_each_models_parameters():
    from populora.platform import plan

    small, large = "embedded", "Qwen/Qwen2.5-7B-Instruct"
    n_small, n_large = (plan.find_architecture(b)[0].params() for b in (small, large))
    f = compute.figure(_metrics(100, 100), _metrics(100, 100), models=({"model.base": small}, {"model.base": large}))
    assert f["flops_ratio"] == pytest.approx(n_large / n_small) and "each model's parameters" in f["words"]
