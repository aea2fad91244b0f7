"""``populora figures``: the paper's figure set of a sweep (mean over seeds with a band per arm) and of a run,
and scripts/arms_race_figures.py over it, on one synthetic store written by the trainer's own writers
(tests/synthetic_store.py)."""

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from populora.cli import main
from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker
from populora.training.measures import paper_figures as P

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic_store  # noqa: E402

POPULATION = "population.students=2 population.teachers=2"
STEPS = 6


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory):
    """A 2-seed sweep: per seed a population (teachers drawing from 30 program structures) and its baseline
    (from 3), tagged as `populora sweep` tags them."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('figures') / 'mlflow.db'}"
    tracker = Tracker(uri)
    ids = {}
    for seed in (0, 1):
        baseline = synthetic_store.make_run(tracker, f"baseline-{seed}", 1, STEPS, 4, baseline=True, seed=100 + seed, structures=3)
        population = synthetic_store.make_run(tracker, f"population-{seed}", 4, STEPS, 12, baseline_run=baseline, seed=seed,
                                              structures=30)
        for run_id, config in ((baseline, rl.SWEEP_BASELINE), (population, POPULATION)):
            tracker.set_tags(run_id, rl.sweep_tags("sw-test", f"{config}|seed={seed}", config, seed))
            ids[(config, seed)] = run_id
    return uri, ids


def test_figures_of_a_two_seed_sweep_with_baselines(sweep_store, tmp_path):
    uri, ids = sweep_store
    out = tmp_path / "figs"
    assert main(["figures", "--sweep", "sw-test", "--out", str(out), "--uri", uri]) == 0
    data = json.loads((out / "figures.json").read_text())
    slugs = [f["slug"] for f in data["figures"]]
    assert {"validity", "solve_rate", "ast_depth", "cyclomatic", "teacher_rating", "student_rating",
            "coverage_equal_volume", "rarefaction", "diversity_equal_volume"} <= set(slugs)
    for slug in slugs:
        assert (out / f"{slug}.png").stat().st_size > 1000
        assert (out / f"{slug}.svg").read_text()[:200].count("<svg") == 1
        assert (out / f"{slug}.pdf").read_bytes()[:4] == b"%PDF"
        assert (out / f"{slug}.csv").read_text().startswith("arm,")
    assert (out / "figure-set.png").stat().st_size > 10_000
    figures = {f["slug"]: f for f in data["figures"]}
    assert set(data["arms"]) == {POPULATION, "baseline"}

    # the line is the mean over the two seeds, the band one standard error
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    per_seed = [dict(P.metric_history(client, ids[(POPULATION, s)], rl.SOLVE_RATE)) for s in (0, 1)]
    for point in figures["solve_rate"]["series"][POPULATION]:
        values = [t[point["x"]] for t in per_seed]
        assert point["seeds"] == 2 and point["mean"] == pytest.approx(np.mean(values))
        assert point["high"] - point["mean"] == pytest.approx(np.std(values, ddof=1) / np.sqrt(2))
    assert len(figures["solve_rate"]["series"][POPULATION]) == STEPS
    assert "teacher_rating" in figures and "baseline" not in figures["teacher_rating"]["series"]

    # equal volume: the baseline (3 structures) below the population (30) at the same m, where per-100 is unfair
    ev = data["equal_volume"]
    m = ev["m"]
    assert m == min(s["n"] for a in ev["arms"].values() for s in a["seeds"].values())
    for seed in ("0", "1"):
        pop, base = ev["arms"][POPULATION]["seeds"][seed], ev["arms"]["baseline"]["seeds"][seed]
        assert base["observed"] <= 3 and base["rarefied"]["high"] < pop["rarefied"]["low"]
    coverage = {arm: [p["x"] for p in pts] for arm, pts in figures["coverage_equal_volume"]["series"].items()}
    assert coverage["baseline"][0] == 1 and max(coverage[POPULATION]) > max(coverage["baseline"])  # x = programs
    assert f"m = {m} valid programs" in (out / "captions.md").read_text()
    assert "band: one standard error over seeds" in figures["solve_rate"]["caption"]
    with open(out / "rarefaction.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["arm"] for r in rows} == {POPULATION, "baseline"}


def test_bad_input_is_one_line_and_exit_2(sweep_store, tmp_path, capsys):
    uri, ids = sweep_store
    assert main(["figures", "--sweep", "sw-none", "--out", str(tmp_path), "--uri", uri]) == 2
    assert "no run of sweep 'sw-none'" in capsys.readouterr().err
    assert main(["figures", "--run", ids[(POPULATION, 0)], "--out", str(tmp_path), "--uri", uri, "--formats", "gif"]) == 2
    assert "formats must be among png, svg, pdf" in capsys.readouterr().err
    assert main(["figures", "--run", "0" * 32, "--out", str(tmp_path), "--uri", uri]) == 2
    assert "no run '000" in capsys.readouterr().err


def test_the_script_draws_the_newest_population_and_its_baseline(sweep_store, tmp_path):
    """scripts/arms_race_figures.py, the wrapper over `figures --run` that picks the newest finished population
    run and its linked baseline; the headline rows say what the curves say."""
    uri, ids = sweep_store
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import arms_race_figures

    out = tmp_path / "script"
    assert arms_race_figures.main(["--uri", uri, "--out", str(out), "--formats", "png"]) == 0
    data = json.loads((out / "figures.json").read_text())
    assert data["arms"] == {"population": {"0": ids[(POPULATION, 1)]}, "baseline": {"0": ids[(rl.SWEEP_BASELINE, 1)]}}
    assert not list(out.glob("*.pdf")) and (out / "rarefaction.png").stat().st_size > 1000
    rare = next(f for f in data["figures"] if f["slug"] == "rarefaction")["series"]["population"]
    assert all(p["low"] <= p["mean"] <= p["high"] for p in rare) and rare[-1]["high"] > rare[-1]["low"]  # bootstrap band
    for row in data["headline"]:  # first / last third and slope of every curve over steps with 3+ points
        values = [p["mean"] for p in next(f for f in data["figures"] if f["title"] == row["curve"])["series"][row["arm"]]]
        third = len(values) // 3
        assert row["first"] == pytest.approx(np.mean(values[:third])) and row["last"] == pytest.approx(np.mean(values[-third:]))
        assert row["points"] == len(values)
        if row["slope_low"] is not None:  # else on a line exactly: no interval (headline's property test)
            assert row["slope_low"] < row["slope"] < row["slope_high"]
    assert {r["arm"] for r in data["headline"]} == {"population", "baseline"}


def test_curves_against_per_adapter_compute_read_each_runs_ledger(sweep_store, tmp_path):
    """``populora figures --x compute``: every point of a per-step curve sits at its run's per-adapter ledger after
    that step (planted here: the population spends 100 tokens a step per adapter, the baseline 70), its y that
    step's value; steps stay the default x."""
    from mlflow import MlflowClient

    uri, ids = sweep_store
    client = MlflowClient(uri)
    population, baseline = ids[(POPULATION, 0)], ids[(rl.SWEEP_BASELINE, 0)]
    for run, per_step in ((population, 100.0), (baseline, 70.0)):
        for step in range(1, STEPS + 1):
            client.log_metric(run, rl.COMPUTE_PER_ADAPTER["generated_tokens"], per_step * step / 2, step=step)
            client.log_metric(run, rl.COMPUTE_PER_ADAPTER["trained_tokens"], per_step * step / 2, step=step)
    out = tmp_path / "by_compute"
    assert main(["figures", "--run", population, "--baseline", baseline, "--x", "compute", "--formats", "png",
                 "--out", str(out), "--uri", uri]) == 0
    figures = {f["slug"]: f for f in json.loads((out / "figures.json").read_text())["figures"]}
    curve = figures["validity_by_compute"]
    assert curve["xlabel"] == P.COMPUTE_LABEL and "equal spend" in curve["caption"]
    for arm, run, per_step in (("population", population, 100.0), ("baseline", baseline, 70.0)):
        truth = P.metric_history(client, run, rl.VALIDITY_RATE)
        assert [(p["x"], p["mean"]) for p in curve["series"][arm]] == [(per_step * s, v) for s, v in truth]
    assert (out / "validity_by_compute.png").stat().st_size > 1000 and "validity" not in figures
    # the headline reads these curves too (it read step figures only: "the runs logged fewer than 2 steps")
    headline = json.loads((out / "figures.json").read_text())["headline"]
    assert {(r["curve"], r["arm"]) for r in headline} >= {(curve["title"], "population"), (curve["title"], "baseline")}
    assert all(r["points"] == STEPS for r in headline if r["curve"] == curve["title"])
    captions = (out / "captions.md").read_text()
    assert "Headline (curves over compute)" in captions and "slope per million tokens" in captions
    assert "fewer than 2" not in captions
    with pytest.raises(P.FiguresError, match="step, compute"):
        P.figure_set(client, out, run_id=population, x="flops")


# ====================================================================== paper-ready axes (issue 54)
def _drawn(fig: dict):
    plt = P._plt()
    f, ax = plt.subplots()
    P._panel(ax, fig)
    f.canvas.draw()
    return plt, f, ax


def _series(values: list[float], steps=(1, 2)) -> dict:
    return {"population": [{"x": s, "mean": v, "low": v, "high": v, "seeds": 1} for s, v in zip(steps, values)],
            "baseline": [{"x": s, "mean": v, "low": v, "high": v, "seeds": 1} for s, v in zip(steps, values)]}


def test_a_constant_rate_over_two_steps_is_drawn_in_percent_with_whole_step_ticks():
    """The walk's `figures --sweep`: a validity of 0 at steps 1 and 2 was drawn on -0.04..0.04 with ticks 1.2, 1.4."""
    fig = next(f for f in P.build([_arm("population", {"validity": {0: [(1, 0.0), (2, 0.0)]}})]) if f["slug"] == "validity")
    assert fig["percent"]
    plt, f, ax = _drawn(fig)
    try:
        assert ax.get_ylim() == (0.0, 0.05)
        assert all(t.get_text().endswith("%") for t in ax.get_yticklabels() if t.get_text())
        assert [float(t) for t in ax.get_xticks() if 1 <= t <= 2] == [1.0, 2.0]
        assert any("constant at 0%" in t.get_text() for t in ax.texts)
    finally:
        plt.close(f)


def test_a_constant_count_gets_an_axis_from_zero_and_a_varying_rate_stays_in_range():
    plt, f, ax = _drawn({"title": "loc", "xlabel": "step", "series": _series([6.0, 6.0, 6.0], (1, 2, 3))})
    try:
        assert ax.get_ylim() == (0.0, 7.5) and [float(t) for t in ax.get_xticks() if 1 <= t <= 3] == [1.0, 2.0, 3.0]
    finally:
        plt.close(f)
    plt, f, ax = _drawn({"title": "solve", "xlabel": "step", "percent": True, "series": _series([0.2, 0.9])})
    try:
        assert ax.get_ylim() == (0.0, 1.0)
    finally:
        plt.close(f)


def test_the_headline_is_filled_for_two_steps_and_says_why_when_empty():
    rows = P.headline({"task validity rate": {"population": [{"x": 1, "mean": 0.1}, {"x": 2, "mean": 0.3}]}})
    text = P.headline_markdown(rows, {"task validity rate"})
    assert "| task validity rate | population | 2 | 10.0% | 30.0% | – |" in text and "need 3 points" in text
    assert P.headline_markdown([]).startswith("No headline: every curve over training has fewer than 2 points")


@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=3, max_size=12),
       st.sampled_from(["any", "flat", "line"]))
def test_a_headline_slope_has_a_positive_width_interval_or_none(values, kind):
    """Issue 67: a flat curve printed "+0 (+0 to +0)". A slope's interval has positive width, holds the slope, or
    is not given (the points exactly on a line: no residual), and the table then says so."""
    if kind == "flat":
        values = [values[0]] * len(values)
    elif kind == "line":
        values = [values[0] + 0.5 * i for i in range(len(values))]
    rows = P.headline({"c": {"population": [{"x": i + 1, "mean": v} for i, v in enumerate(values)]}})
    (row,) = rows
    text = P.headline_markdown(rows)
    if row["slope_low"] is None:
        assert "(no interval)" in text and "lie exactly on a line" in text
    else:
        assert row["slope_low"] < row["slope_high"] and row["slope_low"] <= row["slope"] <= row["slope_high"]
    lo_hi = text.split("|")[-2]
    assert " to " not in lo_hi or lo_hi.split("(")[1].split(" to ")[0] != lo_hi.split(" to ")[1].rstrip(") ")


def test_the_arms_race_draws_a_rate_in_percent_on_whole_steps():
    from populora.evaluation import figures as F

    plt = F._plt()
    f = F.arms_race({"lr=1e-5": {0: [(1, 0.25), (2, 0.5)], 1: [(1, 0.25), (2, 0.75)]}})
    try:
        (ax,) = f.axes
        f.canvas.draw()
        assert "(%)" in ax.get_ylabel() and all(t.get_text().endswith("%") for t in ax.get_yticklabels() if t.get_text())
        assert [float(t) for t in ax.get_xticks() if 1 <= t <= 2] == [1.0, 2.0]
    finally:
        plt.close(f)


def _arm(name: str, curves: dict) -> P.Arm:
    arm = P.Arm(name, {0: "r0"})
    for slug, by_seed in curves.items():
        arm.curves[slug] = by_seed
    return arm


def test_arms_differ_by_line_and_marker_and_compute_is_labelled_in_whole_tokens():
    """Paper-ready in grey too: the baseline dashed with squares, a population solid with circles (not only a
    colour); a y label with the quantity; the compute axis in whole tokens with separators; curves interpolated
    across seeds have no markers (nothing was measured at those x)."""
    one = lambda xs, ys, seeds=1: [{"x": x, "mean": y, "low": y, "high": y, "seeds": seeds} for x, y in zip(xs, ys)]  # noqa: E731
    fig = {"title": "task validity rate", "xlabel": P.COMPUTE_LABEL, "percent": True, "ylabel": P.YLABELS["validity"],
           "series": {"population": one([1200, 2400, 3600], [0.2, 0.3, 0.5]), "baseline": one([1100, 2500, 3500], [0.1, 0.2, 0.2])}}
    plt, f, ax = _drawn(fig)
    try:
        pop, base = ax.get_lines()[:2]
        assert (pop.get_linestyle(), pop.get_marker()) == ("-", "o")
        assert (base.get_linestyle(), base.get_marker()) == ("--", "s")
        assert ax.get_ylabel() == "valid tasks (%)"
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert labels and all("," in t or len(t) <= 3 for t in labels) and any("," in t for t in labels), labels
    finally:
        plt.close(f)
    plt, f, ax = _drawn(fig | {"interpolated": True, "series": {"population": one([1, 2], [0.1, 0.2], seeds=2)}})
    try:
        assert ax.get_lines()[0].get_marker() in (None, "None", "")
    finally:
        plt.close(f)
