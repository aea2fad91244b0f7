"""Sweeps in the UI: start one from the Launch page, follow its runs on the Runs page, read its statistics (intervals,
paired tests, figures) on the Compare page, export a member from the Lineage page. Each piece is one function the
page calls; the sweep itself runs as a background ``populora sweep --wait`` job, like a single run."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import streamlit as st

from populora.evaluation import (SweepReportError, arms_race_figure, gather_sweep, intervals_figure, planned_mde,
                                 sweep_column_heads, sweep_curves, sweep_printed_arms, sweep_score_cell,
                                 sweep_statistics)
from populora.platform import config as config_io
from populora.platform.jobs import jobs
from populora.platform.store import runlayout as rl
from populora.platform.store import sweep as S
from populora.platform.store.tracking import Tracker
from populora.training import plan_sweep, sweep_id
from populora.ui import store
from populora.ui.compare_table import aggregates_frame


# ====================================================================== Launch: sweep mode
def sweep_fields(preset: str) -> dict:
    """Inside the launch form: the sweep's grid, seeds and parallelism (ignored unless "sweep" is ticked)."""
    with st.expander("Sweep mode: a grid of configurations x seeds, with a baseline per seed"):
        on = st.checkbox("Launch a sweep instead of one run", key=f"f_{preset}_sweep")
        grid = st.text_area("Grid (one axis per line)", key=f"f_{preset}_grid",
                            placeholder="population.teachers,population.students=1:1,4:4\noptim.lr=1.0e-5,2.0e-5",
                            help="key=v1,v2 per line (cartesian product); keys varied together: k1,k2=a1:a2,b1:b2")
        cols = st.columns(2)
        # min 0, not 1: below a widget's minimum the browser only reddens the field and keeps the old value (the
        # power line said "2 seeds", a launch did nothing and said nothing); 0 is refused with words at launch
        seeds = cols[0].number_input("Seeds", 0, 100, 2, key=f"f_{preset}_seeds")
        parallel = cols[1].number_input("Runs at a time", 1, 64, 1, key=f"f_{preset}_parallel")
        st.caption("Power before launch: " + (mde_caption(int(seeds)) if seeds >= 1 else NO_SEEDS))
    return {"on": on, "grid": [g.strip() for g in grid.splitlines() if g.strip()], "seeds": int(seeds),
            "parallel": int(parallel)}


NO_SEEDS = "Seeds is 0: a sweep trains every configuration once per seed, so it would train nothing; set Seeds to 1 or more."


@st.cache_data(show_spinner=False)
def mde_caption(seeds: int) -> str:
    """What ``seeds`` seeds per arm can see, against the baseline on all ten benchmarks (evaluation/statistics/power.py)."""
    m = planned_mde(seeds)
    return m["words"] + " (assumed base scores and seed effect until a sweep measures them; docs/evaluation.md)"


def launch_sweep(config_yaml: str, sweep: dict, baseline: bool, env: dict, ray_address: str | None) -> jobs.Job:
    """The validated form config as the sweep's preset; the driver is a background job (raises ConfigError)."""
    if sweep["seeds"] < 1:
        raise config_io.ConfigError(NO_SEEDS)
    root = S.sweeps_dir() / "launched"
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{abs(hash(config_yaml)) % 10**10}.yaml"
    path.write_text(config_yaml)
    runs = plan_sweep(str(path), sweep["grid"], sweep["seeds"], baseline, [], ray_address)  # validates every run now
    sid = sweep_id(runs)
    argv = [sys.executable, "-m", "populora.cli", "sweep", "--config", str(path), "--seeds", str(sweep["seeds"]),
            "--parallel", str(sweep["parallel"]), "--id", sid, "--wait"]
    argv += [a for g in sweep["grid"] for a in ("--grid", g)] + (["--baseline"] if baseline else [])
    argv += ["--ray", ray_address] if ray_address else []
    argv += ["--max-restarts", str(sweep["max_restarts"])] if sweep.get("max_restarts") else []
    return jobs.start(argv, name=f"sweep {sid} ({len(runs)} runs)", env=env)


# ====================================================================== Runs: a sweep's runs grouped, with progress
def read_plan(sid: str) -> list[dict] | None:
    """The sweep's planned runs (the driver's ``plan.json``: key, config label, seed, baseline), None if absent."""
    return S.read_plan(S.sweeps_dir() / sid) or None


def design(plan: list[dict] | None, runs) -> dict:
    """A sweep's design, counted from its plan while it runs (the runs started so far undercount it: at 2 of 4
    runs done the table said "configs 2, seeds 1" for 1 configuration and its baseline over 2 seeds); from the
    runs' tags when no plan is on disk (a sweep started on another machine). The baseline is not a configuration.

    >>> plan = [{"config": c, "seed": s, "baseline": c == "baseline"} for c in ("lr=1", "baseline") for s in (0, 1)]
    >>> design(plan, [])
    {'planned': 4, 'configs': 1, 'seeds': 2, 'baseline': 'yes'}
    """
    if plan:
        rows = [(p.get("config"), p.get("seed"), bool(p.get("baseline"))) for p in plan]
    else:
        rows = [(r.data.tags.get(rl.SWEEP_CONFIG), r.data.tags.get(rl.SWEEP_SEED),
                 r.data.tags.get(rl.SWEEP_CONFIG) == S.BASELINE_LABEL) for r in runs]
    return {"planned": len(rows), "configs": len({c for c, _, base in rows if not base}),
            "seeds": len({seed for _, seed, _ in rows}), "baseline": "yes" if any(base for *_, base in rows) else "no"}


@st.cache_data(ttl=3, show_spinner=False)
def sweep_table(uri: str) -> pd.DataFrame:
    rows = []
    for sid, runs in S.list_sweeps(store._client(uri)).items():
        latest = S.latest_by_key(runs)
        status = [rl.status(r) for r in latest.values()]  # crashed: running in the store, its heartbeat stopped
        shape = design(read_plan(sid), list(latest.values()))
        planned = shape["planned"]
        rows.append({"sweep": sid, "finished": status.count(rl.FINISHED), "planned": planned,
                     "running": status.count(rl.RUNNING), "crashed": status.count(rl.CRASHED),
                     "failed": sum(s in (rl.FAILED, rl.STOPPED, "killed") for s in status),
                     "configs": shape["configs"], "seeds": shape["seeds"], "baseline": shape["baseline"],
                     "done": status.count(rl.FINISHED) / planned if planned else 0.0,
                     "started": pd.to_datetime(min(r.info.start_time for r in runs), unit="ms")})
    return pd.DataFrame(rows)


def sweeps_panel(runs: pd.DataFrame) -> pd.DataFrame:
    """The sweeps in the store, each with its progress; picking one narrows the run table to its runs."""
    table = sweep_table(store.uri())
    if table.empty:
        return runs
    st.subheader("Sweeps")
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        "done": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0, format="percent")})
    pick = st.selectbox("Show the runs of sweep", ["(all runs)"] + list(table["sweep"]), key="runs_sweep")
    if pick == "(all runs)":
        return runs
    ids = {r.info.run_id for r in S.list_sweeps(store._client(store.uri())).get(pick, [])}
    st.caption(f"report: `populora eval --sweep {pick}` then `populora report --sweep {pick}` (or the Compare page)")
    return runs[runs["run_id"].isin(ids)]


# ====================================================================== Compare: the statistics of a sweep
@st.cache_data(ttl=30, show_spinner="bootstrapping intervals…")
def sweep_stats(uri: str, sid: str) -> tuple[dict | None, list[str], str]:
    try:
        configs, missing = gather_sweep(Tracker(uri), sid)
    except SweepReportError as err:
        return None, [], str(err)
    return sweep_statistics(configs), missing, ""


def config_rows(report: dict) -> list[dict]:
    """The sweep report's score rows as the Compare page's table: per configuration and arm, every benchmark and
    average as the report prints it ("57.3 [52.4, 62.0]", ``sweep_score_cell``) under the report's heads
    ("GSM8K", "overall (mean of 2)": ``sweep_column_heads``), the baseline configuration in one row as there
    (``sweep_printed_arms``)."""
    heads = sweep_column_heads(report)
    return [{"config": r["label"], "seeds": len(r["seeds"]), "arm": arm,
             **{heads.get(k, k): sweep_score_cell(e) for k, e in r[arm].items()}}
            for r in report["configs"] for arm in sweep_printed_arms(r)]


def compare_panel() -> None:
    table = sweep_table(store.uri())
    if table.empty:
        return
    st.subheader("Sweeps: intervals over seeds and problems, paired tests against the baseline")
    sid = st.selectbox("Sweep", list(table["sweep"]), key="cmp_sweep")
    report, missing, error = sweep_stats(store.uri(), sid)
    if report is None:
        st.info(error)
        return
    if missing:
        st.caption(f"not evaluated yet (left out): {', '.join(missing)}")
    st.dataframe(pd.DataFrame(config_rows(report)), hide_index=True, width="stretch")
    for c in report["comparisons"]:
        (st.success if c["significant"] else st.info)(c["words"])
    for label, v in (report.get("verdicts") or {}).items():
        st.markdown(f"**Verdict, {label}:** {v['words']}")
    agg = report.get("aggregates")
    if agg:
        st.markdown(f"**rliable (Agarwal et al. 2021), population mean over seeds x {len(agg['benchmarks'])} "
                    "benchmarks** (stratified bootstrap 95% intervals)")
        st.table(aggregates_frame(agg))
        st.line_chart(pd.DataFrame({k: v["value"] for k, v in agg["profile"].items() if k != "taus"},
                                   index=pd.Index(agg["profile"]["taus"], name="score threshold tau")))
        st.caption("Performance profile: the share of runs x benchmarks scoring above tau.")
    st.pyplot(intervals_figure(report), clear_figure=True)
    st.pyplot(arms_race_figure(sweep_curves(store._client(store.uri()), sid)), clear_figure=True)


# ====================================================================== Lineage: export the selected member
def export_form(run_id: str, member: str) -> None:
    with st.expander(f"Export {member}"):
        with st.form(f"export_{run_id}_{member}"):
            out = st.text_input("Output dir", str(Path.cwd() / "exports" / f"{run_id[:8]}-{member}"))
            merge = st.checkbox("Merge into the base (a standard HF model dir)")
            name = st.text_input("Register in the MLflow model registry as (optional)")
            go = st.form_submit_button("Export")
        st.caption(f"Same as `populora export --run {run_id} --member {member} --out DIR [--merge] [--register NAME]`")
    if go:
        argv = [sys.executable, "-m", "populora.cli", "export", "--run", run_id, "--member", member, "--out", out]
        argv += (["--merge"] if merge else []) + (["--register", name] if name.strip() else [])
        job = jobs.start(argv, name=f"export {member}", env={"MLFLOW_TRACKING_URI": store.uri()})
        st.success(f"export started (job {job.id}); log: {job.log_path}")
