"""Evaluation from the web UI: a form generated from ``EvalConfig`` that launches ``populora eval`` on a training
run as a background job (the same supervisor, log, stop and queue as a training job), and the run's evaluation
jobs with their status, place in the queue and progress per (target, benchmark). A stopped evaluation resumes
where it stopped: its finished pairs are kept in its out dir and reused by the next start of the same config.

The Compare and Runs pages call ``launcher(run_id, ...)`` and ``jobs_panel(run_id, ...)``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st
import yaml

from populora.evaluation import BENCHMARKS, GROUPS, EvalConfig, checkpoint_steps, eval_progress
from populora.platform import jobs, queue
from populora.platform import runlayout as rl
from populora.ui import common, form, store

# the fields a user sets for most evaluations; the rest of EvalConfig sits in "advanced", generated from the schema
ADVANCED = ["batched", "device", "generation.max_new_tokens", "generation.temperature",
            "generation.n_samples", "generation.seed", "generation.batch_size"]
FINAL = "final adapters"


def _defaults() -> dict:
    return EvalConfig.model_construct().model_dump(mode="json")  # the schema's defaults, without its source check


def _fields(run_id: str, steps: list[int], key: str, errors: dict, picked_baseline: str | None = None) -> dict:
    """The form's widgets; returns the flat values (dotted EvalConfig fields)."""
    info = EvalConfig.model_fields
    cols = st.columns(3)
    members = cols[0].selectbox("members", ["alive", "all"], help=info["members"].description, key=f"{key}_members")
    step = cols[1].selectbox("checkpoint", [FINAL] + steps, key=f"{key}_step", help=info["step"].description,
                             format_func=lambda s: s if s == FINAL else f"step {s}")
    protocol = cols[2].selectbox("protocol", ["(default for the model)", "quick", "azr"], key=f"{key}_protocol",
                                 help=info["protocol"].description)
    names = st.multiselect("benchmarks", list(GROUPS) + list(BENCHMARKS), default=["all"], key=f"{key}_benchmarks",
                           help=info["benchmarks"].description)
    cols = st.columns(3)
    limit = cols[0].number_input("limit (items per benchmark, 0 = all)", min_value=0, value=0, step=1,
                                 key=f"{key}_limit", help=info["limit"].description)
    baseline = cols[1].checkbox(f"the baseline picked above ({picked_baseline[:8]})" if picked_baseline else "the run's baseline",
                                True, key=f"{key}_baseline", help=info["include_baseline"].description
                                + " (scored in the same job, on the same problems)")
    base = cols[2].checkbox("the base model", True, key=f"{key}_base", help=info["include_base"].description)
    flat = {"run": run_id, "members": members, "step": None if step == FINAL else int(step),
            "protocol": None if protocol.startswith("(") else protocol, "benchmarks": ",".join(names),
            "limit": int(limit) or None, "include_baseline": baseline, "include_base": base,
            "baseline": picked_baseline if baseline else None}
    defaults = _defaults()
    with st.expander("advanced (decoding, device)"):
        by_path = dict(form.schema_fields(EvalConfig))
        for path in ADVANCED:
            flat[path] = form.widget(path, by_path[path], form.get_path(defaults, path), f"{key}_{path}")
            if path in errors:
                st.error(errors[path])
    return flat


def launcher(run_id: str, run_dir: str | None, key: str = "eval", baseline: str | None = None) -> None:
    """The evaluation form of ``run_id``; on submit, an evaluation job (or the fields' errors under the form).
    ``baseline``: the baseline run picked on the page, scored in the same job (else the run's linked one)."""
    steps = checkpoint_steps(run_dir) if run_dir else []
    errors = st.session_state.get(f"{key}_errors", {})
    with st.form(f"{key}_form"):
        st.markdown("**Evaluate this run** (a background job; it waits in the job queue like a training run)")
        flat = _fields(run_id, steps, key, errors, baseline)
        submitted = st.form_submit_button("Launch evaluation", type="primary")
    for field, message in errors.items():
        if field not in ADVANCED:
            st.error(f"**{field or 'config'}**: {message}")
    if not submitted:
        return
    cfg, errors = form.validate({k: v for k, v in flat.items() if v is not None}, "", EvalConfig)
    st.session_state[f"{key}_errors"] = errors  # shown under the form by the rerun below
    if cfg is not None:
        text = yaml.safe_dump(cfg.model_dump(mode="json", exclude_unset=True), sort_keys=False)
        where = f" step {cfg.step}" if cfg.step else ""
        job = jobs.launch_eval(text, name=f"eval {run_id[:8]}{where}", env={"MLFLOW_TRACKING_URI": store.uri()})
        st.toast(f"evaluation job {job.id} started")
    st.rerun()


# ====================================================================== the run's evaluation jobs
def _config(job: jobs.Job) -> dict:
    try:
        return yaml.safe_load(Path(job.dir, "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def run_jobs(run_id: str) -> list[jobs.Job]:
    """Evaluation jobs of ``run_id`` launched from this UI, newest first."""
    return [j for j in jobs.list_jobs() if j.kind == "eval" and _config(j).get("run") == run_id]


def progress_frame(job: jobs.Job) -> pd.DataFrame:
    """Rows = targets, columns = benchmarks: the score once a pair is done, "…" while it is to do."""
    try:
        out = Path(job.dir, rl.EVAL_OUT_FILE).read_text().strip()
    except OSError:
        return pd.DataFrame()
    rows = eval_progress(out)
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows)
    frame["cell"] = [f"{r.score:.3f}" if r.done and r.score is not None else ("done" if r.done else "…")
                     for r in frame.itertuples()]
    table = frame.pivot(index="target", columns="benchmark", values="cell")
    return table.loc[list(dict.fromkeys(frame["target"])), list(dict.fromkeys(frame["benchmark"]))]


def _status_line(job: jobs.Job, status: str) -> str:
    line = f"{common.STATUS_ICONS.get(status, '•')} {status}"
    if status == "queued":
        place = queue.position(job)
        line += (f" · #{place} in line" if place else "") + f" for one of {job.slots} slot(s)"
    return line


def job_view(job: jobs.Job, key: str) -> None:
    status = job.status
    cfg = _config(job)
    table = progress_frame(job)
    done = int((table != "…").to_numpy().sum()) if not table.empty else 0
    total = int(table.size) if not table.empty else 0
    cols = st.columns([4, 3, 2])
    cols[0].markdown(f"**{job.name}**  \n`{job.id}` · benchmarks `{cfg.get('benchmarks', 'all')}`"
                     + (f" · limit {cfg['limit']}" if cfg.get("limit") else ""))
    cols[1].markdown(_status_line(job, status) + (f"  \n{done}/{total} pairs scored" if total else ""))
    if status in ("running", "queued", "starting") and cols[2].button("Stop", key=f"{key}_stop_{job.id}"):
        cols[2].write(jobs.stop(job))
    elif status in ("stopped", "failed", "lost") and cols[2].button(
            "Resume", key=f"{key}_resume_{job.id}", help="Start the same evaluation again: pairs already scored are kept"):
        again = jobs.launch_eval(Path(job.dir, "config.yaml").read_text(), name=f"{job.name.removesuffix(' (resumed)')} (resumed)",
                                 env=job.env)
        st.toast(f"resumed as job {again.id}")
    if total:
        st.progress(done / total)
        st.dataframe(table, width="stretch")
    elif status in ("running", "starting"):
        st.caption("loading the benchmarks and the adapters…")
    with st.expander("log", expanded=status in ("failed", "lost")):
        st.code(job.log_tail(30) or "(empty)", language="text")


def jobs_panel(run_id: str, key: str = "eval") -> bool:
    """The run's evaluation jobs (the newest three); True if one is still active (the caller refreshes)."""
    found = run_jobs(run_id)
    for job in found[:3]:
        job_view(job, key)
    return any(j.status in queue.ACTIVE for j in found[:3])
