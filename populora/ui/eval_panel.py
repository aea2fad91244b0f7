"""Evaluation from the web UI: a form generated from ``EvalConfig`` that launches ``populora eval`` on a training
run as a background job (the same supervisor, log, stop and queue as a training job), and the run's evaluation
jobs with their status, place in the queue and progress per (target, benchmark). A stopped evaluation resumes
where it stopped: its finished pairs are kept in its out dir and reused by the next start of the same config.

The Compare and Runs pages call ``launcher(run_id, ...)`` and ``jobs_panel(run_id, ...)``.
"""

from __future__ import annotations

from pathlib import Path

import time
from dataclasses import dataclass
from types import SimpleNamespace

import pandas as pd
import streamlit as st
import yaml

from populora.evaluation import (BENCHMARKS, GROUPS, EvalConfig, checkpoint_steps, eval_pace, eval_progress, eval_size,
                                 sampling_gain)
from populora.platform.jobs import jobs, queue
from populora.platform import progress
from populora.platform.store import runlayout as rl
from populora.ui import common, form, store

# the fields a user sets for most evaluations; the rest of EvalConfig sits in "advanced", generated from the schema
ADVANCED = ["batched", "device", "generation.max_new_tokens", "generation.temperature",
            "generation.n_samples", "generation.seed", "generation.batch_size"]
FINAL = "final adapters"


def _defaults() -> dict:
    return EvalConfig.model_construct().model_dump(mode="json")  # the schema's defaults, without its source check


CPU_LIMIT = 2  # the form's default limit on a machine without a CUDA GPU: every benchmark, 2 items each, finishes


@dataclass
class RunFacts:
    """What the form needs to know about the evaluated run: its kind, model and size."""

    kind: str
    model: SimpleNamespace  # base, tiny_random: what the protocol's default depends on
    members: dict[str, int]  # {"alive": n, "all": n}
    has_baseline: bool

    @classmethod
    def read(cls, run_id: str) -> "RunFacts":
        info = store.run_info(store.uri(), run_id) or {"tags": {}, "params": {}}
        params, tags = info["params"], info["tags"]
        model = SimpleNamespace(base=params.get("model.base", "embedded"), tiny_random=params.get("model.tiny_random") == "True")
        found = store.members(store.uri(), run_id)
        alive = int(found["alive"].sum()) if "alive" in found.columns else len(found)
        return cls(tags.get(rl.KIND, rl.POPULATION), model, {"alive": alive, "all": len(found)},
                   bool(tags.get(rl.BASELINE_RUN)))


def _fields(run_id: str, steps: list[int], key: str, errors: dict, facts: RunFacts,
            picked_baseline: str | None = None, related: bool = True) -> dict:
    """The form's widgets; returns the flat values (dotted EvalConfig fields). On a machine without a CUDA GPU the
    defaults (the model's protocol, quick for the embedded and tiny models, and a limit of ``CPU_LIMIT``) finish in
    minutes; the estimate under the form says how long. ``picked_baseline``: the baseline run picked on the page,
    scored in the same job on the same problems; ``related`` False (not the run's or its family's, or on another
    base model): offered, not ticked."""
    info = EvalConfig.model_fields
    cols = st.columns(3)
    members = cols[0].selectbox("members", ["alive", "all"], help=info["members"].description, key=f"{key}_members")
    step = cols[1].selectbox("checkpoint", [FINAL] + steps, key=f"{key}_step", help=info["step"].description,
                             format_func=lambda s: s if s == FINAL else f"step {s}")
    default = f"(default for the model: {protocol_default(facts.model)})"
    protocol = cols[2].selectbox("protocol", [default, "quick", "azr"], key=f"{key}_protocol",
                                 help=info["protocol"].description)
    names = st.multiselect("benchmarks", list(GROUPS) + list(BENCHMARKS), default=["all"], key=f"{key}_benchmarks",
                           help=info["benchmarks"].description)
    cols = st.columns(3)
    limit = cols[0].number_input("limit (items per benchmark, 0 = all)", min_value=0, value=0 if cuda_here() else CPU_LIMIT,
                                 step=1, key=f"{key}_limit", help=info["limit"].description
                                 + ("" if cuda_here() else f" (default {CPU_LIMIT} here: no CUDA GPU on this machine)"))
    flat = {"run": run_id, "members": members, "step": None if step == FINAL else int(step),
            "protocol": None if protocol.startswith("(") else protocol, "benchmarks": ",".join(names),
            "limit": int(limit) or None, "include_baseline": False}
    if facts.kind != rl.BASELINE:  # a baseline run is its own single member: it has no baseline of its own
        label = f"the baseline picked above ({picked_baseline[:8]})" if picked_baseline else "the run's baseline"
        ticked = bool(picked_baseline) and related or not picked_baseline and facts.has_baseline
        flat["include_baseline"] = cols[1].checkbox(label, ticked, key=f"{key}_baseline",
                                                    help=info["include_baseline"].description
                                                    + " (scored in the same job, on the same problems)")
        flat["baseline"] = picked_baseline if flat["include_baseline"] and picked_baseline else None
    flat["include_base"] = cols[2].checkbox("the base model", True, key=f"{key}_base", help=info["include_base"].description)
    defaults = _defaults()
    with st.expander("advanced (decoding, device)"):
        by_path = dict(form.schema_fields(EvalConfig))
        for path in ADVANCED:
            flat[path] = form.widget(path, by_path[path], form.get_path(defaults, path), f"{key}_{path}")
            if path in errors:
                st.error(errors[path])
    return flat


def protocol_default(model) -> str:
    return "quick" if model.tiny_random or model.base == "embedded" else "azr"


def cuda_here() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch in the UI's environment: no GPU to speak of
        return False


def estimate_line(flat: dict, facts: RunFacts) -> str:
    """Generations, most new tokens and (from this machine's last evaluation's pace) time of the form's values."""
    n_targets = facts.members.get(flat["members"], 0) + bool(flat.get("include_base")) + bool(flat.get("include_baseline"))
    try:
        size = eval_size(flat["benchmarks"], flat["limit"], n_targets, facts.model, flat["protocol"],
                         _int(flat.get("generation.max_new_tokens")), _int(flat.get("generation.n_samples")) or 1)
    except (ValueError, KeyError) as err:
        return f"No estimate: {err}"
    samples = _int(flat.get("generation.n_samples")) or 1
    line = (f"**Estimate**: {n_targets} targets, {size['rows']:,} generations, at most {size['tokens']:,} new tokens "
            f"(protocol {size['protocol']}{f'; {samples} samples per problem' if samples > 1 else ''})")
    if samples > 1:  # what the samples buy (assumed base scores): the standard error of pass@1 per adapter
        line += f"; {sampling_gain(samples, flat['benchmarks'], flat['limit'])['words']} (assumed base scores)"
    if size["missing"]:
        line += f"; no data for {', '.join(size['missing'])} (`populora data fetch`)"
    pace = last_pace()
    if pace:
        line += (f"; about {common.fmt_duration(size['rows'] / pace)} of generation at this machine's last "
                 f"evaluation's pace ({pace:.2f} generations/s; another model or settings change it)")
    else:
        line += "; no earlier evaluation on this machine to time it by"
    return line


def _int(value) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


@st.cache_data(ttl=30, show_spinner=False)
def last_pace() -> float | None:
    """Generations per second of the newest evaluation job on this machine that measured any."""
    for job in jobs.list_jobs():
        if job.kind == "eval" and (out := _out_dir(job)) is not None and (pace := eval_pace(eval_progress(out))):
            return pace
    return None


def launcher(run_id: str, run_dir: str | None, key: str = "eval", baseline: str | None = None,
             related: bool = True) -> None:
    """The evaluation form of ``run_id``; on submit, an evaluation job (or the fields' errors beside its button);
    "Estimate" shows the size and time of the form's values without launching. ``baseline``: the baseline run picked
    on the page, scored in the same job (else the run's linked one)."""
    steps = checkpoint_steps(run_dir) if run_dir else []
    errors = st.session_state.get(f"{key}_errors", {})
    facts = RunFacts.read(run_id)
    with st.form(f"{key}_form"):
        st.markdown("**Evaluate this run** (a background job; it waits in the job queue like a training run)")
        flat = _fields(run_id, steps, key, errors, facts, baseline, related)
        st.caption(estimate_line(flat, facts) + " · change a value, then press Estimate to update")
        for field, message in errors.items():  # beside the button: the form is taller than a screen
            if field not in ADVANCED:
                st.error(f"**{field or 'config'}**: {message}")
        cols = st.columns([1, 1, 3])
        submitted = cols[0].form_submit_button("Launch evaluation", type="primary")
        cols[1].form_submit_button("Estimate", help="Recompute the estimate above for the values picked; launches nothing")
    if not submitted:
        return
    cfg, errors = form.validate({k: v for k, v in flat.items() if v is not None}, "", EvalConfig)
    st.session_state[f"{key}_errors"] = errors  # shown beside the button by the rerun below
    if cfg is not None:
        text = yaml.safe_dump(cfg.model_dump(mode="json", exclude_unset=True), sort_keys=False)
        where = f" step {cfg.step}" if cfg.step else ""
        job = jobs.launch_eval(text, name=f"eval {run_id[:8]}{where}", env={"MLFLOW_TRACKING_URI": store.uri()})
        st.toast(f"evaluation job {job.id} started")
    st.rerun()


# ====================================================================== the run's evaluation jobs
def _config(job: jobs.Job) -> dict:
    try:
        return yaml.safe_load(Path(job.dir, jobs.CONFIG_FILE).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def run_jobs(run_id: str) -> list[jobs.Job]:
    """Evaluation jobs of ``run_id`` launched from this UI, newest first."""
    return [j for j in jobs.list_jobs() if j.kind == "eval" and _config(j).get("run") == run_id]


def _out_dir(job: jobs.Job) -> str | None:
    try:
        return Path(job.dir, rl.EVAL_OUT_FILE).read_text().strip() or None
    except OSError:
        return None


def progress_rows(job: jobs.Job) -> list[dict]:
    out = _out_dir(job)
    return eval_progress(out) if out else []


def progress_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows = targets, columns = benchmarks: the score (%) once a pair is done, "7/20" generations while it runs,
    "…" while it is to do."""
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows)
    frame["cell"] = [common.fmt_pct(r["score"], 1) if r["done"] and r["score"] is not None else "done" if r["done"]
                     else f"{r['items']}/{r['items_total']}" if r["items_total"] else "…" for r in rows]
    table = frame.pivot(index="target", columns="benchmark", values="cell")
    return table.loc[list(dict.fromkeys(frame["target"])), list(dict.fromkeys(frame["benchmark"]))]


def progress_summary(rows: list[dict], since: float, now: float) -> dict:
    """How far an evaluation job is, in generations: ``done`` of ``total`` (pairs not started yet count as many as
    a started pair of the same benchmark, else the mean of the started ones), ``fraction``, and ``eta_s`` at this
    job's pace (``progress.remaining``: generations since ``since``, the job's start, to its last generation, which
    includes model loading: an over-estimate early on), counting down from that last generation; ``stalled_s``
    instead while none has come for a while (the ETA rose from 51 s to 1m 57s while a job sat at 18/36). Pairs
    finished by an earlier job count as done and take no time.

    >>> rows = [{"benchmark": "gsm8k", "done": True, "items": 4, "items_total": 4, "started": 100.0, "updated": 105.0},
    ...         {"benchmark": "gsm8k", "done": False, "items": 2, "items_total": 4, "started": 100.0, "updated": 110.0},
    ...         {"benchmark": "amc23", "done": False, "items": None, "items_total": None, "started": None}]
    >>> progress_summary(rows, since=90.0, now=110.0)
    {'done': 6, 'total': 12, 'fraction': 0.5, 'eta_s': 20.0, 'stalled_s': None}
    >>> progress_summary(rows, since=90.0, now=400.0)["stalled_s"]
    290.0
    """
    totals = {r["benchmark"]: r["items_total"] for r in rows if r.get("items_total")}
    mean = sum(totals.values()) / len(totals) if totals else None
    done = total = mine = 0
    last = None
    for r in rows:
        size = r.get("items_total") or totals.get(r["benchmark"]) or mean
        if size is None:
            return {"done": 0, "total": 0, "fraction": sum(r["done"] for r in rows) / len(rows) if rows else 0.0,
                    "eta_s": None, "stalled_s": None}
        total += size
        got = size if r["done"] else (r.get("items") or 0)
        done += got
        if r.get("started") and r["started"] >= since:
            mine += got
            at = r.get("updated") or r["started"]
            last = at if last is None else max(last, at)
    eta, stalled = progress.remaining(mine, total - done, since, last, now)
    return {"done": int(done), "total": int(total), "fraction": done / total if total else 0.0,
            "eta_s": eta, "stalled_s": stalled}


def _status_line(job: jobs.Job, status: str) -> str:
    line = f"{common.STATUS_ICONS.get(status, '•')} {status}"
    if status == "queued":
        place = queue.position(job)
        line += (f" · #{place} in line" if place else "") + f" for one of {job.slots} slot(s)"
    return line


def progress_line(rows: list[dict], summary: dict, status: str) -> str:
    """"6/12 pairs scored · 1,234/2,468 generations · ETA 4 min" (what is known of it; "" before any pair).

    >>> progress_line([{"done": True}, {"done": False}], {"done": 10, "total": 20, "eta_s": 90.0}, "running")
    '1/2 pairs scored · 10/20 generations · ETA 1m 30s'
    """
    line = f"{sum(r['done'] for r in rows)}/{len(rows)} pairs scored" if rows else ""
    if summary["total"]:
        line += f" · {summary['done']:,}/{summary['total']:,} generations"
    if status == "running" and summary["eta_s"] is not None:
        line += f" · ETA {common.fmt_duration(summary['eta_s'])}"
    elif status == "running" and summary.get("stalled_s") is not None:
        line += f" · no new generation for {common.fmt_duration(summary['stalled_s'])} (no ETA while none comes)"
    return line


def active_summary(run_id: str) -> str | None:
    """The newest queued or running evaluation of ``run_id`` in one line (status, place in line, pairs, ETA), for the
    page's top while it has no scores to show yet; None when none is active."""
    job = next((j for j in run_jobs(run_id) if j.status in queue.ACTIVE), None)
    if job is None:
        return None
    rows, status = progress_rows(job), job.status
    line = progress_line(rows, progress_summary(rows, job.created, time.time()), status)
    return f"{_status_line(job, status)}{' · ' + line if line else ''}"


def job_view(job: jobs.Job, key: str) -> None:
    status = job.status
    cfg = _config(job)
    rows = progress_rows(job)
    table = progress_frame(rows)
    summary = progress_summary(rows, job.created, time.time())
    cols = st.columns([4, 3, 2])
    cols[0].markdown(f"**{job.name}**  \n`{job.id}` · benchmarks `{cfg.get('benchmarks', 'all')}`"
                     + (f" · limit {cfg['limit']}" if cfg.get("limit") else ""))
    line = progress_line(rows, summary, status)
    cols[1].markdown(_status_line(job, status) + (f"  \n{line}" if line else ""))
    if status in ("running", "queued", "starting") and cols[2].button("Stop", key=f"{key}_stop_{job.id}"):
        cols[2].write(jobs.stop(job))
    elif status in ("stopped", "failed", "lost") and cols[2].button(
            "Resume", key=f"{key}_resume_{job.id}", help="Start the same evaluation again: pairs already scored are kept"):
        again = jobs.launch_eval(Path(job.dir, jobs.CONFIG_FILE).read_text(), name=f"{job.name.removesuffix(' (resumed)')} (resumed)",
                                 env=job.env)
        st.toast(f"resumed as job {again.id}")
    if rows:
        st.progress(min(1.0, summary["fraction"]))
        st.dataframe(table, width="stretch")
    elif status in ("running", "starting"):
        st.caption("loading the benchmarks and the adapters…")
    with st.expander("log", expanded=status in ("failed", "lost")):
        st.code(job.log_tail(30) or "(empty)", language="text", wrap_lines=True)


def jobs_panel(run_id: str, key: str = "eval") -> bool:
    """The run's evaluation jobs (the newest three); True if one is still active (the caller refreshes)."""
    found = run_jobs(run_id)
    for job in found[:3]:
        job_view(job, key)
    return any(j.status in queue.ACTIVE for j in found[:3])
