"""Compare: chosen members against the single-agent baseline (and the base model) on benchmark scores, with the
population mean / weakest / best called out (computed by the evaluation report, see ``populora.ui.compare_table``).
Only the picked members' values are shown and charted.

Benchmark scores come from the results.json that ``populora eval`` logs on the run (of its final adapters, or of
a checkpoint: the page picks which), never from the members' latest ``eval/...`` metrics, which in-training
evaluation also writes (subset scores over steps). The page launches evaluations too (``populora.ui.eval_panel``)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from populora.evaluation import (BASE, BASELINE, MEMBER, Results, SweepReportError, build_verdict, compute_side_by_side,
                                 eval_metric_keys, verdict_sentence, with_baseline)
from populora.evaluation import compute_figure, kl_forward_of, matched_note
from populora.platform.store import family
from populora.platform.store import runlayout as rl
from populora.ui import charts, common, eval_panel, store, sweeps
from populora.ui.compare_table import aggregates_frame, headline, report_ends, scored_only, summarize, verdict_frame

st.title("Compare")

TRAINING_METRICS = ["rating/mu", "rating/conservative", "student/solve_rate", "teacher/validity_rate", "teacher/reward"]
BASE_IDS = ("base", "base_model")  # member id an evaluation gives the bare base model, if it logs one


def metric_frame(uri: str, run_id: str, prefix: str | None, keys: list[str] | None = None) -> pd.DataFrame:
    """Latest member metrics of a run: rows = member ids, columns = metric keys (``prefix``ed ones or ``keys``)."""
    mdf = store.members(uri, run_id)
    if mdf.empty:
        return pd.DataFrame()
    cols = [c for c in mdf.columns if isinstance(c, str) and ((prefix and c.startswith(prefix)) or (keys and c in keys))]
    return mdf.set_index("member")[cols] if cols else pd.DataFrame(index=mdf["member"])


def baseline_row(uri: str, baseline: str | None, prefix: str | None, keys: list[str] | None) -> pd.Series | None:
    if not baseline:
        return None
    frame = metric_frame(uri, baseline, prefix, keys)
    return frame.mean(numeric_only=True) if not frame.empty and len(frame.columns) else None


def results_frames(data: dict) -> tuple[pd.DataFrame, pd.Series | None, pd.Series | None]:
    """(members, baseline, base) from a results.json: member rows by id, the baseline's members' mean, the base
    model's row; columns ``eval/<benchmark>/<metric>`` as ``populora eval`` names its metrics."""
    results = Results.from_dict(data)
    rows = {label: eval_metric_keys("eval", per) for label, per in data.get("results", {}).items()}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    members, baseline, base = (frame.loc[results.of_kind(kind)] for kind in (MEMBER, BASELINE, BASE))
    return (members, baseline.mean(numeric_only=True) if len(baseline) else None,
            base.iloc[0] if len(base) else None)


def pick_evaluation(uri: str, run_id: str) -> int | None:
    """Which evaluation to show: the final adapters' (None) or a checkpoint's step (when one was evaluated)."""
    steps = store.eval_steps(uri, run_id)
    if not steps:
        return None
    options = [None] + steps
    return st.selectbox("Evaluation of", options, key="cmp_eval_step",
                        format_func=lambda s: "the final adapters" if s is None else f"checkpoint step {s}")


def benchmark_scores(uri: str, run_id: str, baseline: str | None, step: int | None):
    """(members, baseline row, base row, results.json) of the evaluation picked, or None when there is none to
    show: the results.json (read by ``Results.from_dict``, the one loader of its older layouts), else
    ``older_store_scores``."""
    data = store.eval_results(uri, run_id, step)
    if data is None:
        return older_store_scores(uri, run_id, baseline, step)
    if baseline:  # no baseline scored in this evaluation: the baseline evaluated on its own run
        data = with_baseline(data, store.eval_results(uri, baseline, step))
    members, base_line, base = results_frames(data)
    return members, base_line, base, data


def older_store_scores(uri: str, run_id: str, baseline: str | None, step: int | None):
    """Every fallback for stores written before ``populora eval`` logged results.json, in one place: the members'
    latest ``eval/`` metrics (unless in-training evaluation logs those: tag populora.eval_every, subset curves),
    the baseline's members' mean, and the bare base model's ``eval_base/...`` on the parent run, else a member
    run with id base (no results.json: the report's cross-fitted picks need it). None when there are none."""
    info = store.run_info(uri, run_id) or {}
    if step is not None or info.get("tags", {}).get(rl.EVAL_EVERY):
        return None
    evals = metric_frame(uri, run_id, "eval/")
    if evals.empty or not len(evals.columns):
        return None
    logged = {"eval/" + k[len("eval_base/"):]: v for k, v in info.get("metrics", {}).items() if k.startswith("eval_base/")}
    ids = [b for b in BASE_IDS if b in evals.index]
    base = pd.Series(logged) if logged else evals.loc[ids].mean(numeric_only=True) if ids else None
    return evals, baseline_row(uri, baseline, "eval/", None), base, None


def on_its_way(run_id: str) -> None:
    """The run's evaluation on its way in one line: its place in line while queued, then its pairs scored and ETA
    (a fragment refreshes it; the page reloads the scores when the evaluation ends, see ``evaluations``)."""
    active = eval_panel.active_summary(run_id)
    if active:
        st.info(f"An evaluation of this run is on its way: {active}. Its scores appear here when it ends; its "
                "progress per (member, benchmark) is under \"Evaluate this run\" below.")


def no_scores(run_id: str, baseline: str | None) -> None:
    st.info("No benchmark scores for this run yet. Launch an evaluation with the form below, or in a terminal: "
            f"`populora eval --run {run_id}`" + (f"  and  `populora eval --run {baseline}`" if baseline else "")
            + "\n\nA full evaluation takes about 25 min per run on one GPU; a limit of 20 scores the first 20 "
            "items of each benchmark for a quick look (not comparable to full scores)."
            + ("" if baseline else "\n\nNo baseline picked: train one with `configs/baseline.yaml` (or tick the "
               "baseline box on the Launch page) and pick it above."))


def no_baseline_scored(run_id: str, baseline: str | None) -> None:
    """A visible warning whenever the table has no baseline, saying what to do."""
    if baseline:
        todo = (f"evaluate it with the form below (it scores the picked baseline `{baseline[:12]}` with this run's "
                f"members, on the same problems), or in a terminal: `populora eval --run {run_id} --baseline {baseline}`")
    else:
        todo = ("pick a baseline run above, or train one: tick \"Also launch the compute-matched baseline\" on "
                "Launch, or `populora train --config <preset> --baseline`")
    st.warning(f"No baseline scored: the population is not compared with the single-agent baseline. To compare, {todo}.",
               icon="⚠️")


@st.cache_data(show_spinner="paired intervals over the problems…", max_entries=8)
def _verdict(data: dict) -> dict | None:
    return build_verdict(data)


def show_verdict(data: dict) -> None:
    """Population vs baseline per benchmark and average, with paired 95% intervals (the report's: ``verdict.build``),
    and one line in words."""
    st.markdown("**Verdict: population vs baseline** (%; differences in points with paired 95% intervals: the report's, "
                "its footnote names the method)")
    try:
        v = _verdict(data)
    except SweepReportError as err:
        st.warning(f"No verdict: {err}", icon="⚠️")
        return
    if v is None:
        st.caption("No verdict: it needs the per-problem samples files of the evaluation, not found on this machine.")
        return
    st.table(verdict_frame(v))  # a few rows of text: all of it on the page (and in its text), no scrolling grid
    sentence = verdict_sentence(v)  # the report's verdict line, word for word
    st.markdown(f"**Verdict: {sentence}**")
    with st.expander("The numbers behind it"):
        st.write(v["words"][0].upper() + v["words"][1:])
    if v.get("aggregates"):
        st.table(aggregates_frame(v["aggregates"]))
        st.caption("rliable's aggregates (Agarwal et al. 2021) over the benchmarks: interquartile mean and the "
                   "probability that the population mean beats the baseline on a benchmark; one run per arm, so "
                   "the 95% intervals resample problems (these adapters on these problems).")
    st.caption("Weakest and best are the members the cross-fit rule picks (chosen on one half of the problems, "
               "scored on the other), not the truly weakest / best; every difference pairs the two arms problem by "
               "problem; p-values are Holm-adjusted over every comparison but overall mean - baseline. n per "
               "benchmark: " + ", ".join(f"{b} {n}" for b, n in v["n"].items()))


def show_compute(uri: str, run_id: str, baseline: str) -> None:
    """Both runs' per-adapter training compute from their ledgers, side by side, and the one compute figure's
    words (evaluation/compute.py): a warning past 5%."""
    pop, base = (store.run_info(uri, r) or {} for r in (run_id, baseline))
    by_rule = rl.matched_by_rule(pop.get("tags", {}), base.get("tags", {}))
    kl = kl_forward_of(pop.get("params", {}))
    note = matched_note(base.get("tags", {}))
    models = (pop.get("params", {}), base.get("params", {}))
    rows, warning = compute_side_by_side(pop.get("metrics", {}), base.get("metrics", {}), by_rule, kl, note, models)
    table = pd.DataFrame(rows).set_index("quantity")
    st.markdown("**Training compute per adapter, realised** (the runs' ledgers, `compute/per_adapter/*`)"
                + (" · launched as a pair: the baseline trained to the population's per-adapter ledger "
                   "(budget.population)" if by_rule and base.get("tags", {}).get(rl.BUDGET) else
                   " · the baseline's configuration was matched to the population by rule" if by_rule else ""))
    st.dataframe(common.text_table(table, {"population": "{:,.0f}", "baseline": "{:,.0f}", "ratio": "{:.2f}"}),
                 width="stretch")
    figure = compute_figure(pop.get("metrics", {}), base.get("metrics", {}), kl, note, models)
    if warning:
        st.warning(warning, icon="⚠️")
    elif figure:
        st.caption(figure["words"])


def evaluations(run_id: str, run_dir: str | None, open_form: bool, baseline: str | None = None,
                related: bool = True) -> None:
    """The launch form and the run's evaluation jobs (refreshed while one is active; the page reloads the
    scores when one ends); ``related`` False: the picked baseline is not the run's, so the form does not tick it."""
    with st.expander("Evaluate this run", expanded=open_form):
        eval_panel.launcher(run_id, run_dir, key="cmp_eval", baseline=baseline, related=related)

    def jobs_part() -> None:
        before = st.session_state.get("cmp_eval_active", False)
        active = eval_panel.jobs_panel(run_id, key="cmp_eval")
        st.session_state["cmp_eval_active"] = active
        if before and not active:  # an evaluation just ended: its scores are in the store now
            st.cache_data.clear()
            st.rerun(scope="app")

    active = any(j.status in ("running", "queued", "starting") for j in eval_panel.run_jobs(run_id)[:3])
    st.fragment(jobs_part, run_every="3s" if active else None)()


def axis_group(metric: str) -> str:
    """Metrics sharing a chart share a scale: TrueSkill ratings (~25), rates (0-1) and anything else apart."""
    if metric.startswith("rating/"):
        return "ratings (TrueSkill)"
    return "rates" if charts.is_rate(metric) else "other scores"


def show_table(table: pd.DataFrame, title: str, fmt: str | None = None, split_axes: bool = False) -> None:
    """The table, then its bars; ``split_axes``: one chart per kind of scale (``axis_group``), so rates next to
    ratings are not flattened to nothing."""
    st.markdown(f"**{title}**")
    delta_rows = [r for r in table.index if r.endswith("- baseline")]
    if fmt is None:  # text cells: rates in %, as on every page, and "–" where Streamlit would draw "None"
        st.dataframe(common.styled_table(table, None, delta_rows), width="stretch")
    else:
        styled = table.style.format(fmt, na_rep="–")
        if delta_rows:
            styled = styled.map(lambda v: "color: #2e7d32" if v > 0 else ("color: #c62828" if v < 0 else ""), subset=pd.IndexSlice[delta_rows, :])
        st.dataframe(styled, width="stretch")
    long = table.drop(index=delta_rows).reset_index(names="who").melt(id_vars="who", var_name="metric", value_name="score").dropna()
    if long.empty or table.shape[1] > 40:
        return
    groups = long.groupby(long["metric"].map(axis_group) if split_axes else pd.Series("", index=long.index), sort=False)
    cols = st.columns(len(groups))
    for col, (group, part) in zip(cols, groups):
        with col:
            charts.bars(part, "metric", "score", "who", f"{title}: {group}" if group else f"{title} by metric",
                        percent=group == "rates")


def unplayed_members(members: pd.DataFrame, last_step: int | None) -> set[str]:
    """Members born at the last logged step: their rating is the one they inherited, no game has moved it yet."""
    if members.empty or not last_step:
        return set()
    born = pd.to_numeric(members["born_step"], errors="coerce").fillna(0)
    return set(members.loc[(born > 0) & (born >= last_step), "member"])


def pickers(runs: pd.DataFrame) -> tuple[str, list[str], str | None, bool]:
    cols = st.columns([3, 3])
    with cols[0]:
        run_id = common.pick_run(runs, "Population run", kinds=("population",))
    members = store.members(store.uri(), run_id)
    ids = list(members["member"]) if not members.empty else []
    alive = list(members.loc[members["alive"], "member"]) if not members.empty else []
    baselines = runs[runs["kind"] == "baseline"]
    row = runs.set_index("run_id").loc[run_id]
    # its own or its family's, on its base model: never another family's, which the evaluation form then pre-ticked
    default = family.default_baseline(run_id, runs.to_dict("records"))
    options = [None] + list(baselines["run_id"])
    labels = common.baseline_labels(baselines, row)
    with cols[1]:
        baseline = st.selectbox("Baseline run", options, format_func=lambda i: "(none)" if i is None else labels[i],
                                index=options.index(default) if default in options else 0, key="cmp_baseline")
    if baseline and baseline != default:
        why = family.unrelated(dict(row, run_id=run_id), runs.set_index("run_id").loc[baseline].to_dict() | {"run_id": baseline})
        cols[1].caption(f"not this run's baseline: {why}" if why else "not this run's linked baseline")
    chosen = st.multiselect("Members", ids, default=alive, key="cmp_members", help="Default: the members alive at the end")
    with_base = st.checkbox("Include the base model (if an evaluation scored it)", value=True, key="cmp_base")
    return run_id, chosen, baseline, with_base


def main() -> None:
    runs = common.load_runs()
    if runs.empty or not (runs["kind"] == "population").any():
        common.empty_state("population runs")
        return
    run_id, chosen, baseline, with_base = pickers(runs)
    common.crashed_notes(runs, [run_id, baseline])
    uri = store.uri()
    st.subheader("Benchmarks")
    step = pick_evaluation(uri, run_id)
    scores = benchmark_scores(uri, run_id, baseline, step)
    active = eval_panel.active_summary(run_id) if scores is None else None
    if active:  # an evaluation on its way: its progress, not "launch one"; refreshed (queued, then its pairs)
        def refreshed() -> None:
            on_its_way(run_id)

        st.fragment(refreshed, run_every="3s")()
    elif scores is None:
        no_scores(run_id, baseline)
    else:
        evals, base_line, base, data = scores
        base = base if with_base else None
        picked = chosen if step is None else list(evals.index)  # a checkpoint's members: the ones alive then
        main_scores = headline(evals)
        overall = main_scores["overall"]  # older stores (no results.json): lowest / highest overall, the biased pick
        ends, crossed = report_ends(data, picked) if data is not None else ({}, False)
        show_table(scored_only(summarize(main_scores, picked, headline(base_line), headline(base), overall,
                                         picked={label: headline(row) for label, row in ends.items()})),
                   "Benchmark scores (%; pass@1 for code, accuracy for math)" + (f" at checkpoint step {step}" if step else ""),
                   "{:.1f}")
        st.caption("LiveCodeBench is scored on its public tests only (our copy has no hidden tests). Mean, weakest "
                   "and best are over the members picked above (default: the final population; a checkpoint's "
                   "evaluation: the members alive then). " + (
                       "Weakest and best are picked as populora report picks them: cross-fitted, each chosen on one "
                       "half of the problems and scored on the other, so a member's luck on the problems that chose "
                       "it does not bias its score." if crossed else
                       "Weakest and best are the members with the lowest and highest overall score, scored on the "
                       "same problems that picked them: biased (the weakest looks weaker, the best better, than they "
                       "are); cross-fitted picks need the evaluation's samples files on this machine."))
        if base_line is None:
            no_baseline_scored(run_id, baseline)
        elif data is not None:
            show_verdict(data)
        if st.toggle("Every logged metric (base / plus, stderr, ...)", key="cmp_all_metrics"):
            show_table(summarize(evals, picked, base_line, base, overall, picked=ends), "All benchmark metrics", "{:.3f}")
    if baseline:
        show_compute(uri, run_id, baseline)
    run_dir = runs.set_index("run_id").loc[run_id, "run_dir"]
    related = baseline is None or baseline == family.default_baseline(run_id, runs.to_dict("records"))
    evaluations(run_id, None if pd.isna(run_dir) else run_dir, open_form=scores is None, baseline=baseline, related=related)
    st.subheader("Training scores (each member's last logged step)")
    train = metric_frame(uri, run_id, None, TRAINING_METRICS)
    if train.empty or not len(train.columns):
        st.caption("no member metrics logged yet")
        return
    rank = train["rating/conservative"] if "rating/conservative" in train.columns else None  # what evolution ranks by
    last_step = runs.set_index("run_id").loc[run_id, "step"]
    unplayed = unplayed_members(store.members(uri, run_id), None if pd.isna(last_step) else int(last_step))
    show_table(summarize(train, chosen, baseline_row(uri, baseline, None, TRAINING_METRICS), None, rank, unplayed,
                         deltas=False),  # ratings of two runs live on separate TrueSkill scales: no difference
               "Training scores", split_axes=True)
    picked_unplayed = sorted(unplayed & set(chosen))
    if picked_unplayed:
        st.caption(f"{', '.join(picked_unplayed)}: born at the last step, never played a game: left out of weakest "
                   "and best (their rating is the one they inherited).")
    st.caption("Ratings of a population and of the baseline live on separate TrueSkill scales: compare them within a run, "
               "and use benchmark scores to compare runs.")
    sweeps.compare_panel()


main()
