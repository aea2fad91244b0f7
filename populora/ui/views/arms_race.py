"""Arms race: how students and teachers push each other over the steps of one run, next to the baseline."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pandas as pd
import streamlit as st

from populora.evaluation import BENCHMARKS
from populora.platform.store import family
from populora.platform.store import runlayout as rl
from populora.training import EQUAL_M, RECENT, FiguresError, figure_set
from populora.ui import charts, common, store
from populora.ui.eval_curves import setup_of, subset_note

st.title("Arms race")

HEADLINE = [("student/solve_rate", "student solve rate"), ("teacher/reward", "teacher reward"),
            ("tasks/validity_rate", "task validity rate"), ("student/format_rate", "answer format rate")]
M = EQUAL_M
CURRICULUM = [("curriculum/ast_depth", "AST depth"), ("curriculum/cyclomatic", "cyclomatic complexity"),
              ("curriculum/loc", "lines of code"), ("curriculum/variables", "variables"),
              # equal volume: distinct per program proposed falls with volume, so arms are compared at the same m
              (rl.RAREFIED, f"distinct structures among {M} programs (all so far)"),
              (rl.RECENT_RAREFIED, f"distinct structures among {M} of the last {RECENT} programs")]
SAMENESS = [("sameness/exact_rate", "same structure as an earlier program"),
            ("sameness/near_rate", "near-duplicate of an earlier program"),
            ("sameness/semantic_rate", "same outputs as an earlier program on its inputs"),
            ("sameness/reproposed_rate", "task proposed before"),
            ("degenerate/constant_output_rate", "constant-output tasks"),
            ("degenerate/dead_code", "dead code share of teachers' programs"),
            ("population/task_overlap", "teachers' task overlap (Jaccard)"),
            ("population/adapter_distance", "adapter weight distance (within a role)"),
            ("monitor/collapse", "collapse monitor (1: firing)"), ("monitor/degenerate", "degenerate-teaching monitor"),
            ("monitor/convergence", "convergence monitor")]
LEARNING = [("learn/no_signal_share", "flat advantage groups (no gradient)"),
            ("learn/flat_task_share", "tasks whose answers all earned the same reward"),
            ("learn/adv_std", "advantage std"),
            ("learn/mismatch_k3", "generator-vs-trainer mismatch (k3 KL)", "the generator is the trainer: nothing to compare"),
            ("learn/mismatch_max_abs", "max |generator - trainer log-prob|", "the generator is the trainer: nothing to compare"),
            ("monitor/no_signal", "no-learning-signal monitor (1: firing)"),
            ("monitor/out_of_sync", "generator-out-of-sync monitor")]
FIRST_MEMBER_METRICS = ["student/solve_rate", "teacher/reward", "teacher/validity_rate", "teacher/task_solve_rate",
                        "student/reward", "rating/mu", "rating/conservative", "train/loss", "train/kl", "train/grad_norm",
                        "learn/no_signal_share", "learn/mismatch_k3"]


def member_metrics(members: pd.DataFrame) -> list[str]:
    """Every metric any member run logged (train/entropy, clip_frac, compute/*, eval/*, ...), the usual ones first."""
    logged = {c for c in members.columns if isinstance(c, str) and "/" in c and members[c].notna().any()}
    return [m for m in FIRST_MEMBER_METRICS if m in logged] + sorted(logged - set(FIRST_MEMBER_METRICS))


COMPUTE_X = "per-adapter compute (generated + trained tokens)"  # the x-axis the curves can be read against


def compared(uri: str, runs: dict[str, str], key: str, x: str = "step") -> pd.DataFrame:
    """One metric of several runs as a long frame, ``series`` = the run's role in the comparison; ``x`` "compute":
    with each step's per-adapter compute so far (the run's ledger) in a ``compute`` column, the steps without one
    left out, so arms are read at equal spend."""
    frames = [store.history(uri, rid, key).assign(series=label) for label, rid in runs.items() if rid]
    if x == "compute":
        frames = [f.merge(compute_by_step(uri, rid), on="step") for f, rid in zip(frames, [r for r in runs.values() if r])]
    frames = [f for f in frames if not f.empty]
    columns = ["step", "value", "series"] + (["compute"] if x == "compute" else [])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def compute_by_step(uri: str, run_id: str) -> pd.DataFrame:
    """(step, compute): the run's per-adapter generated + trained tokens after each step (``compute/per_adapter/*``)."""
    gen, trained = (store.history(uri, run_id, rl.COMPUTE_PER_ADAPTER[q]) for q in ("generated_tokens", "trained_tokens"))
    both = gen.merge(trained, on="step", suffixes=("_g", "_t"))
    return pd.DataFrame({"step": both["step"], "compute": both["value_g"] + both["value_t"]})


def grid(uri: str, runs: dict[str, str], metrics: list[tuple[str, ...]], per_row: int = 2, empty: str = "no data yet",
         x: str = "step") -> None:
    """Charts of ``metrics`` ((key, title) or (key, title, what an empty chart says)), ``per_row`` a row, against
    ``x`` (the step, or "compute": per-adapter compute)."""
    for i in range(0, len(metrics), per_row):
        cols = st.columns(per_row)
        for col, (key, title, *own) in zip(cols, metrics[i:i + per_row]):
            with col:
                charts.lines(compared(uri, runs, key, x), title, color="series", key=key, empty=own[0] if own else empty,
                             x=x, x_title=COMPUTE_X if x == "compute" else "step")


def empty_text(status: str) -> str:
    """What an empty chart says: a live run may log it later; an ended one never did (e.g. no valid task, so no
    student answered and there is no solve rate or complexity of valid programs)."""
    if status in ("running", "starting"):
        return "no data yet (steps reach MLflow with each checkpoint)"
    return "never logged in this run (no valid task or no answer at any logged step)"


def volume_text(programs: dict[str, int], otherwise: str) -> str:
    """What an empty equal-volume diversity chart says: it is logged from the step a run has written ``M`` valid
    programs, and how many each run (label -> programs so far) has written; ``otherwise`` when no run logged its
    count (a run from before ``curriculum/programs``) or every run has written that many (then volume is not why).

    >>> volume_text({"population": 5, "baseline": 3}, "never logged")
    'logged from the step a run has written 20 valid programs (so far: population 5, baseline 3)'
    >>> volume_text({"run": 5}, "never logged")  # one run: no label to tell it from another
    'logged from the step a run has written 20 valid programs (so far: 5)'
    >>> volume_text({}, "never logged"), volume_text({"run": 20}, "never logged")
    ('never logged', 'never logged')
    """
    if all(n >= M for n in programs.values()):  # none logged, or volume is not what is missing
        return otherwise
    so_far = (f"{next(iter(programs.values()))}" if len(programs) == 1
              else ", ".join(f"{label} {n}" for label, n in programs.items()))
    return f"logged from the step a run has written {M} valid programs (so far: {so_far})"


def programs_so_far(uri: str, runs: dict[str, str]) -> dict[str, int]:
    """label -> valid programs the run's teachers have written so far (its latest ``curriculum/programs``), for
    the runs that log it."""
    out = {}
    for label, rid in runs.items():
        h = store.history(uri, rid, rl.PROGRAMS) if rid else None
        if h is not None and not h.empty:
            out[label] = int(h["value"].iloc[-1])
    return out


def kinds_logged(metrics: dict) -> list[str]:
    """Task kinds with a per-kind metric: validity is logged for every kind proposed, solve rate only for kinds
    that had a valid task, so a kind that never produced one (validity 0%) still gets its chart.

    >>> kinds_logged({"tasks/validity_rate/code_f": 0.0, "student/solve_rate/code_o": 0.5, "tasks/validity_rate": 0.2})
    ['code_f', 'code_o']
    """
    prefixes = ("student/solve_rate/", "tasks/validity_rate/")
    return sorted({k.rsplit("/", 1)[1] for k in metrics if k.startswith(prefixes)})


def ratings(uri: str, run_id: str, member_ids: list[str]) -> None:
    mu = store.member_histories(uri, run_id, "rating/mu", member_ids)
    sigma = store.member_histories(uri, run_id, "rating/sigma", member_ids)
    if mu.empty:
        charts.rating_band(pd.DataFrame())
        return
    df = mu.rename(columns={"value": "mu"}).merge(sigma.rename(columns={"value": "sigma"})[["member", "step", "sigma"]],
                                                  on=["member", "step"], how="left").fillna({"sigma": 0.0})
    charts.rating_band(df)


def per_member(uri: str, run_id: str, members: pd.DataFrame) -> None:
    st.subheader("Per member")
    cols = st.columns([2, 3])
    roles = cols[0].multiselect("roles", sorted(members["role"].unique()), default=sorted(members["role"].unique()), key="ar_roles")
    alive_only = cols[0].toggle("alive members only", value=len(members) > 8, key="ar_alive")
    pool = members[members["role"].isin(roles) & (members["alive"] | (not alive_only))]
    chosen = cols[1].multiselect("members", list(pool["member"]), default=list(pool["member"])[:16], key="ar_members",
                                 help="Only the chosen members' histories are loaded")
    ratings(uri, run_id, chosen)
    options = member_metrics(members)
    metric = st.selectbox("member metric", options, key="ar_metric", help=f"Every metric the member runs logged ({len(options)})")
    if metric:
        df = store.member_histories(uri, run_id, metric, chosen)
        charts.lines(df, metric, color="member", title=f"{metric} per member", key=metric,
                     empty="not logged by the chosen members (teacher metrics are logged on teachers, student ones on students)")


def pick_baseline(runs: pd.DataFrame, run_id: str) -> str | None:
    row = runs.set_index("run_id").loc[run_id]
    if row["kind"] == "baseline":
        return None
    baselines = runs[runs["kind"] == "baseline"]
    # its own or its family's, on its base model; never the store's newest (it drew a tiny random run's)
    default = family.default_baseline(run_id, runs.to_dict("records"))
    options = [None] + list(baselines["run_id"])
    labels = common.baseline_labels(baselines, row)
    chosen = st.selectbox("Baseline to compare with", options, index=options.index(default) if default else 0,
                          format_func=lambda i: "(none)" if i is None else labels[i], key="ar_baseline", help=BASELINE_HELP)
    if len(options) == 1:
        st.caption("No baseline run in this store. " + BASELINE_HELP)
    elif default is None and chosen is None:
        st.caption("No baseline of this run or its family on its base model: pick one only if it was trained to match. "
                   + BASELINE_HELP)
    elif chosen is not None and chosen != default:
        st.warning(f"This baseline is {family.unrelated(dict(row, run_id=run_id), runs.set_index('run_id').loc[chosen].to_dict() | {'run_id': chosen})}.",
                   icon="⚠️")
    return chosen


BASELINE_HELP = ("A baseline is a single-agent run (`configs/baseline.yaml`; on the Launch page tick *Also launch the compute-matched "
                 "single-agent baseline*). A run started with `--set baseline_run=<baseline run id>` picks it here by itself.")


def not_logged_yet(uri: str, runs: dict[str, str]) -> None:
    """Say why a run has no curves yet: steps reach MLflow with each checkpoint (a resumed run re-runs the steps
    after its last checkpoint, so only checkpointed steps are logged, each once)."""
    for label, rid in runs.items():
        info = store.run_info(uri, rid) if rid else None
        if info and rl.STEP_SENTINEL not in info["metrics"] and info["status"] == "running":
            every = info["params"].get("checkpoint.every", "?")
            st.info(f"The {label} run has logged no step yet: steps reach MLflow with each checkpoint "
                    f"(checkpoint.every = {every}), so its first curves appear after step {every}.")


# ====================================================================== benchmarks during training (eval.every)
CURVE_STATS = ("mean", "weakest")  # the population's; a baseline's one adapter is its own mean


def eval_setup(uri: str, runs: dict[str, str]) -> dict[str, dict]:
    """{label: in-training evaluation setup} of the runs that evaluate during training (tag populora.eval_every)."""
    setups = {label: setup_of((store.run_info(uri, rid) or {}).get("tags", {})) if rid else None for label, rid in runs.items()}
    return {label: s for label, s in setups.items() if s}


def eval_metrics(uri: str, run_id: str, benchmark: str) -> list[str]:
    """The metrics the run's population statistics hold for ``benchmark`` (score first)."""
    prefix = rl.eval_population_key("mean", f"{rl.EVAL_PREFIX}{benchmark}/")
    logged = sorted(k[len(prefix):] for k in (store.run_info(uri, run_id) or {}).get("metrics", {}) if k.startswith(prefix))
    return sorted(logged, key=lambda m: (m != "score", m))


def eval_curves(uri: str, runs: dict[str, str], setup: dict[str, dict], benchmark: str, metric: str) -> pd.DataFrame:
    """Long frame (step, value, series): the population's mean and weakest, every other run's mean (a baseline's
    is its one adapter), over the steps each run evaluated."""
    frames = []
    for label, rid in runs.items():
        if label not in setup:
            continue
        single = setup[label]["kind"] == rl.BASELINE or label != next(iter(runs))
        for stat in ("mean",) if single else CURVE_STATS:
            h = store.history(uri, rid, rl.eval_population_key(stat, f"{rl.EVAL_PREFIX}{benchmark}/{metric}"))
            frames.append(h.assign(series=label if single else f"{label} {stat}"))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["step", "value", "series"])


def benchmarks_during_training(uri: str, runs: dict[str, str], empty: str) -> None:
    st.subheader("Benchmarks during training")
    setup = eval_setup(uri, runs)
    first = next(iter(runs))
    if first not in setup:
        st.caption("This run does not evaluate during training. Start one with `--set eval.every=K` (and "
                   "`eval.benchmarks`, `eval.limit`) to follow benchmark scores step by step; `populora eval` scores "
                   "the final adapters.")
        return
    subsets = {(tuple(s["names"]), s["limit"], s["seed"]) for s in setup.values()}
    if len(subsets) > 1:
        st.warning("These runs evaluated different subsets (benchmarks, items or subset seed differ): their curves "
                   "are not comparable problem for problem.")
    missing = [label for label, rid in runs.items() if rid and label not in setup]
    if missing:
        st.caption(f"No in-training evaluation in: {', '.join(missing)}.")
    names = setup[first]["names"]
    metrics = eval_metrics(uri, runs[first], names[0]) if names else []
    metric = st.selectbox("benchmark metric", metrics or ["score"], key="ar_eval_metric",
                          help="score: the benchmark's main score (pass@1 on the plus tests for HumanEval+/MBPP+, "
                               "accuracy for math), as `populora eval` reports it")
    per_row = 2 if len(names) > 1 else 1
    for i in range(0, len(names), per_row):
        for col, name in zip(st.columns(per_row), names[i:i + per_row]):
            with col:
                label = BENCHMARKS[name].label if name in BENCHMARKS else name
                charts.lines(eval_curves(uri, runs, setup, name, metric), metric, key=metric, height=260,
                             title=f"{label}: {metric}", empty=empty, percent=metric != "max_new_tokens")
    st.caption(subset_note(setup))


def body(run_id: str, baseline: str | None, status: str = "running", others: dict[str, str] | None = None) -> None:
    uri = store.uri()
    runs = {"population" if baseline else "run": run_id, "baseline": baseline, **(others or {})}
    empty = empty_text(status)
    st.subheader("Population vs baseline" if baseline else "Run")
    not_logged_yet(uri, runs)
    x = "compute" if st.radio("x-axis", ["step", COMPUTE_X], horizontal=True, key="ar_x",
                              help="per-adapter compute: each run's ledger (compute/per_adapter/*), so a population "
                                   "and its baseline are compared at equal spend") == COMPUTE_X else "step"
    grid(uri, runs, HEADLINE, empty=empty, x=x)
    for label, rid in runs.items():  # the flags at once (tags): no learning signal, generator out of sync, ...
        if rid:
            info = store.run_info(uri, rid) or {}
            common.monitor_flags(info.get("tags", {}), label=f"{label}: ")
            common.learning_line(info.get("metrics", {}), label=f"{label}: ")
    if st.toggle("Is the update learning? (learn/*: flat groups, advantages, generator-vs-trainer mismatch)",
                 key="ar_learning"):
        grid(uri, runs, LEARNING, per_row=3, empty=empty, x=x)
    benchmarks_during_training(uri, runs, empty)
    st.subheader("Curriculum of the programs teachers wrote (valid ones)")
    volume = volume_text(programs_so_far(uri, runs), empty)  # too few programs yet to compare at equal volume
    grid(uri, runs, [(k, t, volume) if k in (rl.RAREFIED, rl.RECENT_RAREFIED) else (k, t) for k, t in CURRICULUM],
         per_row=3, empty=empty, x=x)
    st.caption(f"Diversity is compared at equal volume: the expected number of distinct program structures among "
               f"{M} valid programs drawn from those written so far (rarefaction), so an arm that proposes more does "
               "not look narrower for it. Structures per 100 programs proposed (`curriculum/coverage_per_100`, still "
               "logged) falls with volume even for a generator that never changes: it does not compare arms.")
    # on demand: eleven more histories per run would double a first load's reads of the store
    if st.toggle("Sameness, degenerate teaching and the monitors, step by step", key="ar_sameness"):
        grid(uri, runs, SAMENESS, per_row=3, empty=empty, x=x)
    members = store.members(uri, run_id)
    if members.empty:
        st.info("No member runs yet: the trainer logs them with its first checkpoint.")
        return
    per_member(uri, run_id, members)
    kinds = kinds_logged(store.run_info(uri, run_id)["metrics"])
    with st.expander(f"solve and validity rate per task kind ({', '.join(kinds) or 'none logged'})", expanded=True):
        grid(uri, {"run": run_id}, [(f"tasks/validity_rate/{k}", f"validity rate {k}") for k in kinds]
             + [(f"student/solve_rate/{k}", f"solve rate {k}") for k in kinds], per_row=max(1, len(kinds)),
             empty="no valid task of this kind, so nothing to solve" if status not in ("running", "starting") else empty)


def figure_files(run_id: str, baseline: str | None, sweep: str | None) -> None:
    """The paper's figure set (``populora figures``) of this run and its baseline, or of its whole sweep."""
    st.subheader("Figures for the paper")
    options = ["this run and its baseline"] + ([f"the whole sweep {sweep} (mean over seeds, band)"] if sweep else [])
    which = st.radio("figures of", options, horizontal=True, key="ar_fig_scope")
    whole_sweep = which != options[0]
    out = Path("figures") / (sweep if whole_sweep else run_id)
    st.caption(f"PNG, SVG and PDF with the numbers beside them (CSV, figures.json) and captions.md, written to `{out}`; "
               f"the same as `populora figures {'--sweep ' + sweep if whole_sweep else '--run ' + run_id}`.")
    if st.button("Write the figure set", key="ar_fig_go"):
        with st.spinner("reading the runs and drawing"):
            try:
                figure_set(store.client(store.uri()), out, run_id=None if whole_sweep else run_id,
                                         sweep_id=sweep if whole_sweep else None, baseline=None if whole_sweep else baseline)
            except FiguresError as err:
                st.error(str(err))
                return
    if (out / "figure-set.png").is_file():
        st.image(str(out / "figure-set.png"), width="stretch")
        st.markdown((out / "captions.md").read_text())
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as z:
            for f in sorted(out.iterdir()):
                z.write(f, f.name)
        st.download_button("Download the figure set (zip)", buffer.getvalue(), f"{out.name}-figures.zip", key="ar_fig_zip")


def main() -> None:
    runs = common.load_runs()
    if runs.empty:
        common.empty_state()
        return
    cols = st.columns(2)
    with cols[0]:
        run_id = common.pick_run(runs)
    with cols[1]:
        baseline = pick_baseline(runs, run_id)
    status = runs.set_index("run_id").loc[run_id, "status"]
    if status in ("crashed", "failed"):
        st.warning(f"This run {status}: the charts show the steps it logged before stopping.")
    others = overlay_runs(runs, {run_id, baseline})
    st.fragment(body, run_every=common.live_interval(status))(run_id, baseline, status, others)
    figure_files(run_id, baseline, (store.run_info(store.uri(), run_id) or {}).get("tags", {}).get(rl.SWEEP))


def overlay_runs(runs: pd.DataFrame, shown: set) -> dict[str, str]:
    """Other runs whose run-level curves are drawn on the same charts (run-to-run comparison)."""
    rest = runs[~runs["run_id"].isin(shown)]
    labels = {r.run_id: f"{r.name} · {r.run_id[:6]}" for r in rest.itertuples()}
    picked = st.multiselect("Overlay other runs", list(labels), format_func=labels.get, key="ar_overlay",
                            placeholder="none", help="Their run-level curves (top charts) are drawn next to this run's")
    return {labels[r]: r for r in picked}


main()
