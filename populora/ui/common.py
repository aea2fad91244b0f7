"""Widgets and helpers every page shares: the store, the empty state, the run picker, links between pages."""

from __future__ import annotations

import os
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pandas as pd
import streamlit as st

from populora.platform.jobs import heartbeat, jobs, lease, queue, state
from populora.platform import progress
from populora.platform.store import runlayout as rl
from populora.platform.store import sweep as S
from populora.training import MONITOR_MEANINGS, job_slots
from populora.ui import charts, store

ROLE_COLORS = {"teacher": "#f28e2b", "student": "#4e79a7", "both": "#59a14f"}
STATUS_ICONS = state.ICONS  # one state machine for runs and jobs (platform/jobs/state.py)
PAGES = {"launch": "views/launch.py", "runs": "views/runs.py", "arms_race": "views/arms_race.py",
         "lineage": "views/lineage.py", "tasks": "views/tasks.py", "compare": "views/compare.py"}


def load_runs() -> pd.DataFrame:
    """All runs, with job state folded into the status; an unreadable store stops the page with the reason."""
    try:
        runs = store.list_runs(store.uri())
    except store.StoreError as err:
        st.error(f"{err}\n\nSet `MLFLOW_TRACKING_URI` to your store (default: `sqlite:///mlflow.db` in the "
                 "directory where you run `populora ui`).")
        st.stop()
    if not runs.empty:  # store_status: the store's (heartbeat applied); status: the state every page shows
        runs = runs.assign(store_status=runs["status"],
                           status=[effective_status(r.run_id, r.status) for r in runs.itertuples()])
    return runs


def effective_status(run_id: str, status: str) -> str:
    """The run's state (``state.of_run``): the store's status with its current job folded in (stopping, resume
    queued, resuming; crashed when the store says running but its job ended without ending it). A job that is not
    current any more (the run was resumed since in a terminal) does not override the store."""
    job = job_for_run(run_id)
    if job is None:
        return status
    shown = state.of_run(status, job)
    if shown == state.CRASHED and status == state.RUNNING:
        info = store.run_info(store.uri(), run_id)  # resumed since by something else (a terminal): that one drives it
        return shown if info is None or job_is_current(job, info["tags"]) else status
    return shown


def crashed_notes(runs: pd.DataFrame, run_ids: list[str | None]) -> None:
    """A warning per picked run shown crashed (its trainer died without ending it: a failed job, or a stopped
    heartbeat), with the resume command: its scores and curves stop at its last logged step."""
    table = runs.set_index("run_id")
    for run_id in [r for r in run_ids if r and r in table.index]:
        if table.loc[run_id, "status"] == rl.SILENT:  # alive here, not beating: its scores stop where it hangs
            st.warning(f"{STATUS_ICONS['silent']} run {run_id[:8]} is silent at step {table.loc[run_id, 'progress'] or '?'}: "
                       "its trainer is alive on this machine but sends no heartbeat (suspended or hung); the Runs page "
                       "says which process and how to stop it. No resume while it lives.")
        if table.loc[run_id, "status"] == rl.CRASHED:
            st.warning(f"{STATUS_ICONS['crashed']} run {run_id[:8]} crashed at step {table.loc[run_id, 'progress'] or '?'}: "
                       f"its trainer died without ending it (no heartbeat for {heartbeat.limit_s():.0f} s or more). Resume "
                       f"it on the Runs page or with `populora train --resume {run_id}`.")


@st.cache_data(ttl=2, show_spinner=False)
def _job_dirs_by_run(root: str, sweeps: str) -> dict[str, str]:
    """{run id: the dir of its newest job}: the UI's jobs, and the jobs each sweep's driver started for its runs
    (``<sweeps dir>/<sweep>/jobs``: a sweep launched from Launch runs its runs there, and they have logs too)."""
    found = [j for d in [Path(root), *sorted(Path(sweeps).glob("*/jobs"))] for j in jobs.list_jobs(d)]
    # oldest first, so a run's newest job (its latest resume) wins
    return {j.run_id: j.dir for j in sorted(found, key=lambda j: j.created) if j.run_id}


def job_for_run(run_id: str) -> jobs.Job | None:
    """The run's newest job from this UI (its launch or its latest resume, or its sweep's job for it)."""
    job_dir = _job_dirs_by_run(str(jobs.jobs_dir()), str(S.sweeps_dir())).get(run_id)
    try:
        return jobs.Job.load(job_dir) if job_dir else None
    except (OSError, ValueError, TypeError):
        return None


def forget_jobs() -> None:
    """Drop the cached run -> job map: a job just started (a Resume) must show at once, not after the cache's 2 s."""
    _job_dirs_by_run.clear()


def resume_once(run_id: str, name: str, step: int | None = None) -> tuple[jobs.Job, bool]:
    """Start ``populora train --resume`` (from checkpoint ``step``, else the newest intact one) as a job, unless one is already active for the run (read from disk, not
    the page's cached map: a second click on a page not yet redrawn must not queue a second resume); (the job,
    whether it is new)."""
    newest = jobs.latest_for_run(run_id)
    if newest is not None and newest.status in queue.ACTIVE:
        return newest, False
    config = store.artifact_text(store.uri(), run_id, rl.CONFIG_FILE) or ""
    started = jobs.launch_resume(run_id, name=f"{name} (resumed)", env={"MLFLOW_TRACKING_URI": store.uri()},
                                 need=job_slots(config), step=step)
    forget_jobs()
    return started, True


def shown_state(job: jobs.Job | None, status: str) -> str:
    """The run's state with its place in line (``state.label``): "resume queued (#k)", "queued (#k)"."""
    place = queue.position(job) if job is not None and status in (state.QUEUED, state.RESUME_QUEUED) else None
    return state.label(status, place)


def resume_refusal(tags: dict, status: str) -> str | None:
    """Why the run's trainer may still be writing it (``lease.refusal``): a Resume is not offered then."""
    return lease.refusal(tags.get(rl.STATUS, status), tags)


def run_progress(run_dir: str | None, job: jobs.Job | None) -> dict | None:
    """Where a running trainer says it is inside its step (platform/progress.py): its job's copy when it has a
    current job (also what a Ray Job's driver cannot write into a shared run dir), else the run dir's."""
    return (progress.read(job.dir) if job is not None and job.status == "running" else None) or progress.read(run_dir)


def training_time(row, now: float | None = None, live: dict | None = None) -> str:
    """A run's training time: the time its steps took, over resumes, from one source: its trainer's progress record
    (``live``: ``progress.read`` of its run dir, or its job's copy) while it trains and after it ended (counted to
    the trainer's last word: never less than what the page showed while it ran), else ``time/training_s``; "–" for
    a run from before both."""
    if live is not None:
        return fmt_duration(progress.training_seconds(live, now, live=row["status"] == "running"))
    value = row["training_s"] if "training_s" in row else None
    return fmt_duration(value) if value is not None and not pd.isna(value) else "–"


def steps_shown(row) -> tuple[str, float]:
    """(steps as text, the bar's fraction) of a run row (``progress.steps_shown``: a budget-stopped run is done)."""
    budget = row["budget"] if "budget" in row and isinstance(row["budget"], str) else ""  # its populora.budget tag
    step = None if row["step"] is None or pd.isna(row["step"]) else int(row["step"])
    steps = None if row["steps"] is None or pd.isna(row["steps"]) else int(row["steps"])
    return progress.steps_shown(step, steps, row["status"], budget)


def stopped_where(row) -> str:
    """" after step 5/6; its last checkpoint is step 4, ..." of a run that ended early: the steps its trainer
    finished (its progress record) against the one its checkpoint kept (the progress tag)."""
    step = None if row["step"] is None or pd.isna(row["step"]) else int(row["step"])
    steps = None if row["steps"] is None or pd.isna(row["steps"]) else int(row["steps"])
    where = progress.stopped_where(progress.steps_done(progress.read(row["run_dir"])), step, steps)
    return f" {where}" if where else ""


def job_is_current(job: jobs.Job, tags: dict) -> bool:
    """Whether ``job`` is what last started the run: the run's job tag names it (a resume re-tags the run with its
    own job, or "" from a terminal); a run without the tag (older stores) counts its job as current. The run's
    newest job while it is still active (a resume waiting in the queue, not yet re-tagging the run) is current."""
    return tags.get(rl.JOB_ID) in (None, job.id) or job.status in queue.ACTIVE


def queued_jobs(known_runs: set[str]) -> pd.DataFrame:
    """The job queue's entries not yet in the run list (waiting for a slot, or starting before the trainer created
    its run), in queue order with their place in line: what Runs shows under its table."""
    rows = []
    for entry in queue.snapshot():
        if entry.job.run_id in known_runs and entry.status == "running":
            continue
        shown = state.job_state(entry.status, state.stop_sent(entry.job))
        rows.append({"place": f"#{entry.position} in line" if entry.position else "has a slot",
                     "state": f"{state.icon(shown)} {shown}", "name": entry.job.name or entry.job.id,
                     "kind": entry.job.kind, "waiting": fmt_duration(time.time() - entry.job.created), "job": entry.job.id})
    return pd.DataFrame(rows, columns=["place", "state", "name", "kind", "waiting", "job"])


def empty_state(what: str = "runs") -> None:
    st.info(
        f"No PopuLoRA {what} in the MLflow store `{store.uri()}` yet.\n\n"
        "- Start one from the **Launch** page, or in a terminal: `make demo` "
        "(or `populora train --config configs/smoke.yaml`).\n"
        "- Already trained elsewhere? Start the UI where that `mlflow.db` is, or set `MLFLOW_TRACKING_URI`."
    )


def run_label(row) -> str:
    """Only what never changes: a live status or progress in the label went stale in the browser's selectbox."""
    return f"{row.name} · {row.kind} · {row.run_id[:8]} · started {row.started:%Y-%m-%d %H:%M}"


def baseline_labels(baselines: pd.DataFrame, run) -> dict[str, str]:
    """{baseline run id: its picker label}, those on another base model than ``run``'s marked so."""
    return {r.run_id: run_label(r) + ("" if r.base_model == run["base_model"] else f" · other base model: {r.base_model}")
            for r in baselines.itertuples()}


CHOSEN = "populora_chosen_"  # session-state prefix: the run last chosen on any page, per picker key


def pick_run(runs: pd.DataFrame, label: str = "Run", kinds: tuple[str, ...] | None = None, key: str = "run",
             sync_url: bool = True, allow_none: bool = False) -> str | None:
    """A run selectbox; its choice is mirrored in the URL (``?run=ID``) so links and refreshes keep it, and in the
    session (``CHOSEN``), so a page opened from the sidebar (whose links carry no query) opens the same run."""
    if kinds:
        runs = runs[runs["kind"].isin(kinds)]
    ids = list(runs["run_id"])
    labels = {r.run_id: run_label(r) for r in runs.itertuples()}
    options = ([None] if allow_none else []) + ids
    if not ids and not allow_none:
        return None
    wanted = (st.query_params.get(key) or st.session_state.get(CHOSEN + key)) if sync_url else None
    index = options.index(wanted) if wanted in options else 0
    chosen = st.selectbox(label, options, index=index, format_func=lambda i: "(none)" if i is None else labels[i], key=f"pick_{key}")
    if sync_url and chosen and st.query_params.get(key) != chosen:
        st.query_params[key] = chosen
    if sync_url and chosen:
        st.session_state[CHOSEN + key] = chosen
    return chosen


def link(page: str, label: str, run_id: str | None = None, icon: str | None = None, query: dict | None = None) -> None:
    """A link to another page of the app carrying the run (and ``query``); falls back to plain text outside the
    app's navigation (a page run on its own, as in AppTest)."""
    params = ({"run": run_id} if run_id else {}) | (query or {})
    try:
        st.page_link(PAGES[page], label=label, icon=icon, query_params=params or None)
    except Exception:  # noqa: BLE001 - StreamlitPageNotFoundError and friends when the page is not registered
        st.caption(f"{label}: open the {page.replace('_', ' ')} page" + (f" with run `{run_id}`" if run_id else ""))


def live_interval(status: str) -> str | None:
    """Fragments re-run every few seconds only while the run trains (sessions keep polling after a tab closes)."""
    return "5s" if status in ("running", "starting") else None


def fmt_rate(value) -> str:
    return fmt_pct(value, 0)


def fmt_pct(value, digits: int = 1) -> str:
    """A rate in [0, 1] as a percentage, "–" when missing (never "None" or "nan" in a cell).

    >>> fmt_pct(0.5), fmt_pct(0.12345, 2), fmt_pct(None), fmt_pct(float("nan"))
    ('50.0%', '12.35%', '–', '–')
    """
    return "–" if value is None or pd.isna(value) else f"{100 * value:.{digits}f}%"


def mlflow_ui_url() -> str:
    """Where MLflow's own UI is: the tracking server itself, else ``POPULORA_MLFLOW_UI`` (default: what
    ``mlflow ui`` serves)."""
    uri = store.uri()
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    return os.environ.get("POPULORA_MLFLOW_UI", "http://127.0.0.1:5000").rstrip("/")


def mlflow_link(run_id: str, experiment_id: str | None, page: str = "runs") -> str:
    """Markdown: the run id (``page`` "models": a LoggedModel's id) as a link to its page in MLflow's UI when that
    UI answers; else the id and the command that starts it (a link to a server that is not there is a dead end:
    issue 31). The routes are MLflow's own (#/experiments/E/runs/R, #/experiments/E/models/M)."""
    if not experiment_id:
        return f"`{run_id}`"
    base = mlflow_ui_url()
    if mlflow_ui_up(base):
        return f"[`{run_id}`]({base}/#/experiments/{experiment_id}/{page}/{run_id}) (in MLflow's UI)"
    port = urllib.parse.urlsplit(base).port or 5000
    return (f"`{run_id}` (MLflow's UI does not answer at `{base}`: start it with "
            f"`mlflow ui --backend-store-uri {store.uri()} --port {port}` in `{os.getcwd()}`, or set "
            f"`POPULORA_MLFLOW_UI` to where it runs)")


@st.cache_data(ttl=10, show_spinner=False)
def mlflow_ui_up(base: str) -> bool:
    """Whether something answers HTTP at ``base`` (MLflow's UI serves its page at /)."""
    try:
        with urllib.request.urlopen(base + "/", timeout=1.0) as response:
            return response.status < 500
    except (OSError, ValueError):
        return False


def cell_formats(table: pd.DataFrame) -> dict:
    """Styler formats per column: rates (``charts.is_rate``: solve, validity, ...) in %, as every other page shows
    them, ratings and other scores with 2 decimals.

    >>> f = cell_formats(pd.DataFrame(columns=["student/solve_rate", "rating/mu"]))
    >>> f["student/solve_rate"](0.5), f["rating/mu"](25.0)
    ('50.0%', '25.00')
    """
    return {c: (lambda v: fmt_pct(v, 1)) if charts.is_rate(str(c)) else (lambda v: f"{v:.2f}") for c in table.columns}


def code_span(text: str) -> str:
    """``text`` as one inline code span in Markdown, whatever backticks it holds (a prefill ending in a code
    fence broke the caption's markup): fenced by one more backtick than its longest run, spaces inside.

    >>> code_span("```python"), code_span("<think>")
    ('```` ```python ````', '` <think> `')
    """
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text.strip()} {fence}"


def text_table(table: pd.DataFrame, formats: dict[str, str]) -> pd.DataFrame:
    """``table`` with the ``formats`` columns as text ("–" where missing: Streamlit draws a missing number as
    "None" whatever a Styler's na_rep says); other columns as they are.

    >>> text_table(pd.DataFrame({"op": ["mask", "svd"], "kl": [0.01, None]}), {"kl": "{:.2e}"})["kl"].tolist()
    ['1.00e-02', '–']
    """
    out = table.copy()
    for column, fmt in formats.items():
        if column in out.columns:
            out[column] = ["–" if v is None or pd.isna(v) else fmt.format(v) for v in table[column]]
    return out


def styled_table(table: pd.DataFrame, fmt: str | None = None, signed_rows: list | None = None):
    """``table`` as text cells for ``st.dataframe`` ("–" where missing: Streamlit draws a missing number as "None"
    whatever the Styler's na_rep says), rates in % (``cell_formats``) unless ``fmt`` says otherwise;
    ``signed_rows`` (deltas) green when positive, red when negative."""
    formats = cell_formats(table) if fmt is None else {c: fmt.format for c in table.columns}
    text = pd.DataFrame({c: ["–" if v is None or pd.isna(v) else formats[c](v) for v in table[c]] for c in table.columns},
                        index=table.index)
    styled = text.style
    if signed_rows:
        colors = pd.DataFrame("", index=table.index, columns=table.columns)
        for row in signed_rows:
            colors.loc[row] = ["color: #2e7d32" if v > 0 else "color: #c62828" if v < 0 else "" for v in table.loc[row]]
        styled = styled.apply(lambda _: colors, axis=None)
    return styled


def fmt_duration(seconds) -> str:
    """
    >>> fmt_duration(42), fmt_duration(3 * 3600 + 125), fmt_duration(None)
    ('42s', '3h 02m', '–')
    """
    if seconds is None or pd.isna(seconds) or seconds < 0:
        return "–"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    return f"{minutes}m {s:02d}s" if minutes < 60 else f"{minutes // 60}h {minutes % 60:02d}m"


def timing(started, ended, step, steps, status: str, now: pd.Timestamp | None = None,
           step_s: float | None = None) -> tuple[str, str]:
    """(duration, ETA) of a run: time from start to end (or now, while it trains), and for a running run the time
    its remaining steps take: at its latest step's time (``step_s``, the run's ``time/step_s``) when known, else at
    its pace so far (which includes model loading and seeding, an over-estimate after a few steps: the walk saw
    10 min after step 1 when 5 remained).

    >>> t0 = pd.Timestamp("2026-01-01 00:00")
    >>> timing(t0, pd.NaT, 2, 10, "running", now=t0 + pd.Timedelta(minutes=4))
    ('4m 00s', '16m 00s')
    >>> timing(t0, pd.NaT, 1, 3, "running", now=t0 + pd.Timedelta(minutes=5), step_s=150.0)
    ('5m 00s', '5m 00s')
    >>> timing(t0, t0 + pd.Timedelta(seconds=30), 2, 2, "finished")
    ('30s', '–')
    """
    now = now if now is not None else pd.Timestamp.now(tz="UTC").tz_localize(None)
    if started is None or pd.isna(started):
        return "–", "–"
    end = ended if ended is not None and not pd.isna(ended) and status not in ("running", "starting") else now
    elapsed = (end - started).total_seconds()
    eta = "–"
    if status == "running" and step and steps and steps > step:
        pace = step_s if step_s is not None and not pd.isna(step_s) and step_s > 0 else elapsed / step
        eta = fmt_duration(pace * (steps - step))
    return fmt_duration(elapsed), eta


LEARN_LINE = (("learn/no_signal_share", "flat groups", "{:.0%}"), ("learn/flat_task_share", "flat tasks", "{:.0%}"),
              ("learn/adv_std", "advantage std", "{:.3g}"), ("learn/mismatch_k3", "generator-vs-trainer k3", "{:.2g}"),
              ("learn/mismatch_max_abs", "max |log-prob diff|", "{:.2g}"),
              ("learn/rollout_corrected", "tokens corrected", "{:.1%}"))


def learning_line(metrics: dict, label: str = "") -> None:
    """The last step's learning diagnostics (``learn/*``, training/measures/learning.py) in one caption; nothing
    before a run has logged them (the mismatch only where the generator is not the trainer)."""
    parts = [f"{name} {fmt.format(metrics[key])}" for key, name, fmt in LEARN_LINE if metrics.get(key) is not None]
    if parts:
        st.caption(f"{label}learning, last step: " + " · ".join(parts)
                   + " (per adapter, with entropy, clip fraction and grad norm: its learn/* metrics)")


def monitor_flags(tags: dict, label: str = "") -> None:
    """A warning per monitor that fired on the run (its tag): what was seen, and what it means."""
    for name, text in rl.fired_monitors(tags).items():
        st.warning(f"**{label}{name}** monitor {text}. {MONITOR_MEANINGS[name]}", icon="🚩")
