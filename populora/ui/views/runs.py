"""Runs: every training run in the store with status, progress and config; refreshes itself while one trains."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from populora.platform.jobs import heartbeat, jobs, queue, state
from populora.platform import progress
from populora.platform.store import runlayout as rl
from populora.training import baseline_stop_words
from populora.ui import common, eval_panel, experiments, resume_choice, store, sweeps

st.title("Runs")


def with_timing(runs: pd.DataFrame) -> pd.DataFrame:
    """Training time (the steps' time, over resumes), wall time (start to end, stopped hours included) and, for a
    running run, the ETA: from its measured phase times inside the step when it reports them, else its pace."""
    times = [common.timing(r.started, r.ended, r.step, r.steps, r.status, step_s=r.step_s) for r in runs.itertuples()]
    records = [progress.read(r.run_dir) for r in runs.itertuples()]  # training time's one source, ended runs too
    live = [p if r.status == "running" else None for p, r in zip(records, runs.itertuples())]
    measured = [progress.eta_s(p) if p is not None else None for p in live]
    etas = [t[1] if e is None else common.fmt_duration(e) for e, t in zip(measured, times)]
    return runs.assign(duration=[t[0] for t in times], eta=etas,
                       training=[common.training_time(r, live=p) for (_, r), p in zip(runs.iterrows(), records)])


def run_table(runs: pd.DataFrame) -> None:
    # rates as text, "–" when not logged: the same as the run's header (a NaN number cell reads "None")
    steps = [common.steps_shown(r) for _, r in runs.iterrows()]  # a budget-stopped run: done, not "5/56" at 9%
    shown = with_timing(runs).assign(
        state=[f"{common.STATUS_ICONS.get(s, '•')} {s}" for s in runs["status"]],
        done=[f for _, f in steps], progress=[t for t, _ in steps],
        solve_rate=runs["solve_rate"].map(common.fmt_rate), validity_rate=runs["validity_rate"].map(common.fmt_rate))
    st.dataframe(
        shown[(["_group"] if "_group" in shown.columns else []) + [
            "state", "name", "kind", "done", "progress", "training", "duration", "eta", "solve_rate", "validity_rate", "monitors",
            "population", "base_model", "note", "started", "experiment", "run_id"]],
        hide_index=True, width="stretch",
        column_config={
            "done": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0, format="percent"),
            "_group": st.column_config.TextColumn("group"),
            "progress": st.column_config.TextColumn("steps"),
            "training": st.column_config.TextColumn("training time", help="the time its steps took, summed over "
                                                    "resumes: not the time it sat stopped or loaded its model"),
            "duration": st.column_config.TextColumn("wall time", help="start to end (to now while it trains), "
                                                    "the hours it sat stopped included"),
            "eta": st.column_config.TextColumn("ETA", help="the rest of the run at its measured phase times when its "
                                               "trainer reports them (progress.json), else at its pace so far"),
            "solve_rate": st.column_config.TextColumn("solve rate"),
            "validity_rate": st.column_config.TextColumn("valid tasks"),
            "monitors": st.column_config.TextColumn("🚩 monitors", help="monitors that fired (collapse, degenerate "
                                                    "teaching, population convergence, no learning signal, generator out of "
                                                    "sync): the run's page says what they saw"),
            "started": st.column_config.DatetimeColumn("started (UTC)", format="YYYY-MM-DD HH:mm"),
        },
    )


def typed(value: str):
    """A logged param (MLflow keeps strings) as the config value it was: "0" -> 0, "True" -> True, "None" -> None.

    >>> [typed(v) for v in ("0", "0.5", "1e-5", "True", "None", "['q_proj', 'v_proj']", "smoke")]
    [0, 0.5, 1e-05, True, None, ['q_proj', 'v_proj'], 'smoke']
    """
    import yaml

    if value == "None":
        return None
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    if isinstance(parsed, str) and parsed.lower() not in ("nan", "inf", "-inf", "infinity"):
        try:  # YAML 1.1 reads 1e-5 as a string
            return float(parsed)
        except ValueError:
            return value
    return parsed if isinstance(parsed, (int, float, bool, list)) else value


def config_tree(params: dict) -> dict:
    """Flattened dotted params back into sections, for a readable config view."""
    tree: dict = {}
    for key in sorted(params):
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = typed(params[key])
    return tree


DIRECT_NOTE = ("Tasks format **direct**: a reduction of AZR's method for tiny CPU models. Answers are prefilled up "
               "to a code fence and no <think> reasoning is trained; the paper's runs use the azr format.")


def run_details(row, status: str) -> None:
    """Status, progress and rates come from the run list (one cached read) so they never disagree with it."""
    run_id = row.name
    info = store.run_info(store.uri(), run_id)
    if info is None:
        st.warning(f"run {run_id} is not in the store any more")
        return
    tags = info["tags"]
    job = common.job_for_run(run_id)
    current = job is not None and common.job_is_current(job, tags)
    now = row["status"] if current else status  # the state every page shows (platform/jobs/state.py)
    shown = common.shown_state(job, now)
    live = common.run_progress(row["run_dir"], job if current else None) if status == "running" else None
    cols = st.columns([2.4, 1, 1, 1, 1])  # "🕒 resume queued (#1)" whole, not "resume queue…"
    cols[0].metric("status", f"{state.icon(shown)} {shown}")
    cols[1].metric("progress", common.steps_shown(row)[0] if row["steps"] or row["step"] else "?")
    wall, eta = common.timing(row["started"], row["ended"], row["step"], row["steps"], status, step_s=row["step_s"])
    record = live if live is not None else progress.read(row["run_dir"])  # ended: counted to its last word
    cols[2].metric("training time", common.training_time(row, live=record),
                   help="the time the run's steps took, summed over its resumes (not the time it sat stopped)")
    cols[3].metric("student solve rate", common.fmt_rate(row["solve_rate"]))
    cols[4].metric("task validity", common.fmt_rate(row["validity_rate"]))
    st.caption(f"wall time {wall} (start to {'now' if status == 'running' else 'end'}, stopped time included)"
               + (f" · ETA {eta} at this run's pace so far" if eta != "–" and live is None else ""))
    if live is not None:
        st.info(f"**Now**: {progress.line(live)}", icon="⏱️")
    if now == state.STOPPING:
        st.info("Stopping: the trainer finishes writing its state, then the run reads stopped (Resume goes on from "
                "its last checkpoint)." + baseline_line(tags, stopping=True), icon="⏳")
    elif current and job.status in queue.ACTIVE and now in (state.RUNNING, state.RESUME_QUEUED, state.RESUMING) \
            and st.button("⏹️ Stop this run" if now == state.RUNNING else "⏹️ Stop the resume", key=f"stop_{job.id}",
                          help="SIGINT: the run stops after writing its state (a queued resume never starts); Resume "
                          "goes on from its last checkpoint"):
        jobs.stop_soon(job)  # sent now, followed in the background: the rerun shows "stopping" at once
        common.forget_jobs()
        st.rerun()
    experiments.fork_origin(tags)
    resume_controls(run_id, row, now, job, tags)  # the folded state: a job that died makes it crashed
    links = st.columns(4)
    with links[0]:
        common.link("arms_race", "Arms race", run_id, "📈")
    with links[1]:
        common.link("lineage", "Lineage", run_id, "🌳")
    with links[2]:
        common.link("tasks", "Tasks", run_id, "🧩")
    with links[3]:
        common.link("compare", "Compare", run_id, "⚖️")
    fmt = tags.get(rl.TASKS_FORMAT) or info["params"].get("tasks.format", "?")
    # the list's label (a tiny random run trained no "embedded": ``runlayout.base_model_label``), not the raw tag
    base = rl.base_model_label(tags.get(rl.BASE_MODEL, info["params"].get(rl.PARAM_BASE_MODEL, "?")), info["params"])
    st.caption(f"run id `{run_id}` · run dir `{tags.get(rl.RUN_DIR, '?')}` · base model `{base}`"
               f" · tasks format `{fmt}`")
    if fmt == "direct":
        st.info(DIRECT_NOTE)
    common.monitor_flags(tags)
    common.learning_line(info["metrics"])
    if tags.get(rl.SEED_FALLBACK, "none") != "none":
        st.warning(f"the base model proposed no valid {tags[rl.SEED_FALLBACK]} task at step 0: "
                   "those buffers were seeded with hand-written programs")
    if tags.get(rl.SANDBOX_UNCONFINED) == "true":
        st.error("sandbox.allow_unconfined: model-written code in this run ran WITHOUT the sandbox's confinement "
                 "(no isolating layer was available and the config allowed it)", icon="⚠️")
    if job is not None:
        job_log(job, status, current=common.job_is_current(job, tags))
    else:
        st.caption("no job log: this run was not launched from this UI (a terminal's `populora train` prints its "
                   "steps there; its metrics are all here)")
    experiments.notes(store.uri(), run_id, tags)
    wanted = rl.to_int(st.query_params.get("fork"))
    with st.expander("🍴 Fork from a checkpoint (a new run from its full state, with changed settings)", expanded=wanted is not None):
        experiments.fork_form(run_id, tags.get(rl.RUN_DIR), row["name"] or run_id[:8], wanted)
    with st.expander("Diff: the settings that differ from another run", expanded=bool(tags.get(rl.FORKED_FROM))):
        experiments.runs_diff(store.uri(), run_id, common.load_runs())
    if status in ("finished", "stopped"):
        with st.expander("Evaluate this run (benchmarks; scores show on the Compare page)"):
            eval_panel.launcher(run_id, tags.get(rl.RUN_DIR), key="runs_eval")
            eval_panel.jobs_panel(run_id, key="runs_eval")
    with st.expander("config"):
        yaml_text = store.artifact_text(store.uri(), run_id, rl.CONFIG_FILE)
        if yaml_text:
            cols = st.columns(2)
            cols[0].download_button("Download config.yaml", yaml_text, file_name=f"{row['name'] or run_id}.yaml",
                                    mime="application/x-yaml", key=f"yaml_{run_id}",
                                    help=f"Train again with it: populora train --config {row['name'] or run_id}.yaml")
            with cols[1]:
                common.link("launch", "Launch again with this config", icon="🔁", query={"from_run": run_id})
        st.json(config_tree(info["params"]), expanded=1)


RESUMABLE = state.RESUMABLE


def baseline_line(tags: dict, stopping: bool = False) -> str:
    """What a Stop or a Resume of a population does to its linked baseline (training/compute/budget.py)."""
    linked = tags.get(rl.BASELINE_RUN)
    if not linked or tags.get(rl.KIND) != rl.POPULATION:
        return ""
    info = store.run_info(store.uri(), linked)
    if stopping:
        return baseline_stop_words(linked, info["status"] if info else None)
    return (f" Its linked baseline {linked[:8]}, if it was matched to this population's spend while it was stopped, "
            "is resumed in the same job once the population finishes, to the population's final spend.")


def resume_controls(run_id: str, row, status: str, job: jobs.Job | None, tags: dict) -> None:
    """What ended the run and how to go on: a Resume button (``populora train --resume`` as a job, in the queue like
    a launch) while no job of the run is active; the terminal command beside it."""
    active = job is not None and job.status in queue.ACTIVE and common.job_is_current(job, tags)
    if active and status in (*RESUMABLE, state.RESUME_QUEUED, state.RESUMING):
        st.info(f"Resuming: job `{job.id}` is {job.status}"
                + (f" (#{place} in line)" if (place := queue.position(job)) else "")
                + ". Its log is below; the run shows running once the trainer has loaded its last checkpoint.")
        st.button("Resume", key=f"resume_{run_id}", disabled=True, help=f"already resuming: job {job.id}")
        return
    if status == state.SILENT:  # alive here, not beating: a resume would be a second writer (platform/jobs/lease.py)
        st.warning(f"Silent: {common.resume_refusal(tags, status) or 'its trainer is alive but sends no heartbeat'}. "
                   "No Resume while it lives.", icon="⏸️")
        return
    if status not in RESUMABLE:
        return
    where = common.stopped_where(row)  # the steps its trainer finished, and what its checkpoint kept
    command = f"`populora train --resume {run_id}`"
    if status == "stopped":
        st.info(f"Stopped{where}. Resume it from its last checkpoint here, or in a terminal with {command}."
                + baseline_line(tags))
    elif status == "crashed":
        silent = heartbeat.silence(tags)
        beat = f" (no heartbeat for {heartbeat.describe_silence(silent)})" if silent is not None else ""
        st.error(f"The trainer process died without ending this run{where}{beat}. Resume it from its last checkpoint "
                 f"here, or with {command}; `populora runs --reap` marks it failed.")
    else:
        why = f": {tags[rl.ERROR][:1500]}" if tags.get(rl.ERROR) else ""  # e.g. the OOM's setting to lower
        st.error(f"This run failed{where}{why}. Its log (if launched from here) is below; resume here or with {command}.")
    step = resume_choice.checkpoint_step(run_id, tags)
    if st.button("Resume", key=f"resume_{run_id}", type="primary",
                 help="Runs populora train --resume as a background job (it waits in the job queue like a launch)"):
        started, new = common.resume_once(run_id, row["name"] or run_id[:8], step=step)
        st.toast(f"resume job {started.id} started" if new else f"already resuming: job {started.id}")
        st.rerun()


def job_log(job: jobs.Job, status: str, current: bool) -> None:
    """The log of the run's newest job; said so when the run was resumed since outside this UI."""
    if not current:
        st.caption(f"This run was resumed outside this UI (e.g. `populora train --resume` in a terminal) after "
                   f"job `{job.id}` ended {job.status}: that job's log below ends there; the run's progress is above.")
    label = f"job log ({job.status})" if current else f"log of the earlier job {job.id} ({job.status})"
    with st.expander(label, expanded=current and status in ("crashed", "failed")):
        st.code(job.log_tail(60) or "(empty)", language="text", wrap_lines=True)


def queue_table(waiting: pd.DataFrame, below_runs: bool = True) -> None:
    """Jobs waiting in the machine's queue (or starting) that the run list cannot show yet, with their place;
    ``below_runs``: under the run table (else the store has no run yet, and there is no table to point at)."""
    if waiting.empty:
        return
    in_line = int(waiting["place"].str.startswith("#").sum())
    where = "in the table above" if below_runs else "in the store yet"
    st.markdown(f"**Job queue**: {in_line} waiting for a slot, {len(waiting) - in_line} holding one without a run "
                f"{where} (an evaluation, or a trainer loading its model); one slot per GPU, "
                "`POPULORA_MAX_PARALLEL_JOBS` sets it")
    st.dataframe(waiting, hide_index=True, width="stretch")


GROUPS = {"(none)": None, "sweep": "sweep", "preset / name": "name", "kind": "kind", "forked from": "forked_from"}


def filters(runs: pd.DataFrame) -> pd.DataFrame:
    cols = st.columns([2, 2, 3, 3, 2])
    kinds = cols[0].multiselect("kind", sorted(runs["kind"].unique()), placeholder="all kinds")
    statuses = cols[1].multiselect("status", sorted(runs["status"].unique()), placeholder="any status")
    text = cols[2].text_input("name, notes or run id contains", "")
    setting = cols[3].text_input("setting = value", "", placeholder="optim.lr=3e-05",
                                 help="runs whose config has this value (the dotted key of the config, as logged)")
    group = cols[4].selectbox("group by", list(GROUPS), key="runs_group")
    if kinds:
        runs = runs[runs["kind"].isin(kinds)]
    if statuses:
        runs = runs[runs["status"].isin(statuses)]
    if text:
        runs = runs[runs["name"].str.contains(text, case=False, regex=False) | runs["run_id"].str.startswith(text)
                    | runs["note"].fillna("").str.contains(text, case=False, regex=False)]
    if "=" in setting:
        runs = runs[[matches_setting(s, setting) for s in runs["settings"]]]
    if GROUPS[group]:
        runs = runs.assign(_group=runs[GROUPS[group]].fillna("").replace("", "(none)")).sort_values("_group", kind="stable")
    return runs


def matches_setting(settings, query: str) -> bool:
    """Whether a run's logged settings hold ``key=value`` (values compared as typed config values).

    >>> matches_setting({"optim.lr": "3e-05"}, "optim.lr = 3e-5"), matches_setting({"optim.lr": "3e-05"}, "optim.lr=1e-5")
    (True, False)
    """
    key, _, value = query.partition("=")
    if not isinstance(settings, dict) or key.strip() not in settings:
        return False
    return typed(settings[key.strip()]) == typed(value.strip())


def body() -> None:
    runs = common.load_runs()
    if runs.empty:
        waiting = common.queued_jobs(set())
        if waiting.empty:
            common.empty_state()
        else:  # right after a launch: its job is here before its run (not "No runs yet ... the table above")
            st.info("No run in the store yet: the job below creates its run once its trainer has loaded the model; "
                    "this page refreshes by itself until then.")
        queue_table(waiting, below_runs=False)
        common.link("launch", "Launch a run", icon="🚀")
        return
    shown = filters(sweeps.sweeps_panel(runs))
    run_table(shown)
    queued = common.queued_jobs(set(runs["run_id"]))
    st.caption(f"{len(shown)} of {len(runs)} runs" + (f" · {len(queued)} job(s) in the queue (below)" if len(queued) else "")
               + " · refreshes every 5 s while a run trains or a job waits")
    queue_table(queued)
    if shown.empty:
        st.info("No run matches these filters.")
        return
    run_id = common.pick_run(shown, "Details of run")
    if run_id:
        row = runs.set_index("run_id").loc[run_id]
        run_details(row, row["store_status"])


def live_interval() -> str | None:
    try:
        runs = common.load_runs()
    except Exception:  # noqa: BLE001 - the body shows the error
        return None
    active_job = any(j.status in queue.ACTIVE for j in jobs.list_jobs()[:10])  # a queued run or a resume starting
    return "5s" if active_job or (runs["status"].isin(["running", "starting"])).any() else None


st.fragment(body, run_every=live_interval())()
