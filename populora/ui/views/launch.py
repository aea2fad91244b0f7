"""Launch: a form generated from the training config, validated by its schema, started as a background job."""

from __future__ import annotations

import uuid
from pathlib import Path

import streamlit as st
import yaml

from populora.platform import config as config_io
from populora.platform.jobs import jobs, queue, ray_jobs, state
from populora.platform import progress
from populora.platform.store import runlayout as rl
from populora.platform.model.cache import cache_root
from populora.platform.files import write_atomic
from populora.platform.plan import GPUS, PlanError
from populora.training import make_plan, matched_baseline, preflight_problems, render_plan, too_small
from populora.ui import common, experiments, form, store, sweeps

st.title("Launch a run")
st.caption("The run starts as a background process: closing this page does not stop it. "
           "Every value is checked against the training config schema before anything starts.")


def run_config(run_id: str) -> Path | None:
    """The config.yaml a run trained with, as a file the form can load (``?from_run=ID``: "launch again"). In this
    user's cache, not the shared temp dir: there another user's copy of the same run's file could not be replaced,
    and nothing removed them."""
    text = store.artifact_text(store.uri(), run_id, rl.CONFIG_FILE)
    if not text:
        return None
    path = cache_root() / "relaunch" / f"{run_id}.yaml"
    write_atomic(path, text)  # makes the dir
    return path


def pick_preset() -> tuple[str, dict] | None:
    presets = form.presets()
    from_run = st.query_params.get("from_run")
    if from_run and (path := run_config(from_run)) is not None:
        presets = {f"config of run {from_run[:8]}": path, **presets}
    names = ["(defaults)"] + list(presets)
    default = 1 if from_run and len(names) > 1 and names[1].startswith("config of run") else (names.index("smoke") if "smoke" in names else 0)
    name = st.selectbox("Preset (configs/*.yaml)", names, index=default, key="preset",
                        help="Fills the form; you can change any value before launching")
    try:
        return name, form.preset_values(presets.get(name))
    except config_io.ConfigError as err:
        st.error(f"preset {name} is not valid: {err}")
        return None


def draw_field(path: str, info, values: dict, preset: str, errors: dict) -> object:
    if path == "ray.address":  # a choice among the operator's clusters, never free text (the token goes there)
        value = ray_address_widget(form.get_path(values, path), key=f"f_{preset}_{path}")
    else:
        value = form.widget(path, info, form.get_path(values, path), key=f"f_{preset}_{path}")
    if path in errors:
        st.error(f"**{path}**: {errors[path]}", icon="⚠️")
    return value


def ray_address_widget(current: str | None, key: str) -> str | None:
    try:
        allowed = ray_jobs.allowed_addresses()
    except ray_jobs.RayJobError as err:
        st.error(str(err))
        allowed = []
    options = ["", "local", *allowed]
    picked = st.selectbox("address", options, index=options.index(current) if current in options else 0, key=key,
                          format_func=lambda a: a or "(none: no Ray)",
                          help=f"local: Ray inside the trainer. Clusters: the ones the operator lists in "
                               f"{ray_jobs.ENV_ADDRESSES} / {ray_jobs.ENV_ADDRESSES_FILE}")
    return picked or None


def draw_form(preset: str, values: dict, errors: dict) -> dict | None:
    """Render every schema field; return the submitted flat values (None until submitted)."""
    fields = dict(form.schema_fields())
    flat: dict[str, object] = {}
    # enter_to_submit=False: only the Launch button launches. Streamlit's default submits a form on Enter in a text
    # input and on Ctrl+Enter in a text area (the frontend's allowFormEnterToSubmit), which started runs nobody
    # meant to start from the overrides box
    with st.form(f"launch_{preset}", enter_to_submit=False):
        cols = st.columns(3)
        for i, path in enumerate(form.MAIN_FIELDS):
            with cols[i % 3]:
                flat[path] = draw_field(path, fields[path], values, preset, errors)
        sections: dict[str, list[str]] = {}
        for path in fields:
            if path not in form.MAIN_FIELDS:
                sections.setdefault(path.split(".")[0] if "." in path else "run", []).append(path)
        for section, paths in sections.items():
            with st.expander(f"Advanced: {section}", expanded=any(p in errors for p in paths)):
                cols = st.columns(3)
                for i, path in enumerate(paths):
                    with cols[i % 3]:
                        flat[path] = draw_field(path, fields[path], values, preset, errors)
        st.caption(experiments.fork_points(int(values.get("steps") or 1), int(values.get("checkpoint", {}).get("every") or 1),
                                           int(values.get("checkpoint", {}).get("keep") or 1))
                   + ", as the preset sets them: checkpoint.every and checkpoint.keep are above; the launch says it for "
                     "the values launched.")
        overrides = st.text_area("Extra overrides (one `section.key=value` per line)", key=f"f_{preset}_overrides",
                                 help="Same syntax as `populora train --set`; applied after the form values")
        if "overrides" in errors:
            st.error(errors["overrides"], icon="⚠️")
        with_baseline = st.checkbox("Also launch the compute-matched single-agent baseline", key=f"f_{preset}_baseline",
                                    help="A second run: one adapter that proposes and solves, given the population's "
                                    "generated and trained tokens per adapter and step (the rule `populora train --baseline` and `populora sweep --baseline` use too); "
                                    "the two runs are linked, so Compare and evaluations pair them")
        restarts = st.number_input(
            "Restarts after a transient failure", 0, 20, 0, key=f"f_{preset}_restarts",
            help="The job resumes the run from its last checkpoint after a lost worker, a killed process or the "
                 "store unreachable, with backoff, up to this many times (each run of a sweep too); never after a "
                 "Stop, nor after the same failure at the same step twice (`populora train --max-restarts N`)")
        sweep = dict(sweeps.sweep_fields(preset), max_restarts=int(restarts))
        if errors:  # beside the button too: the fields' own messages may be a screen or more above it
            st.error("Not launched: fix " + ", ".join(f"**{p or 'config'}**" for p in errors)
                     + " (each message is under its field; sections with one are open), then launch again.", icon="⚠️")
        cols = st.columns([1, 1, 2])
        submitted = cols[0].form_submit_button("Launch", type="primary")
        planned = cols[1].form_submit_button("Show plan", help="Memory per GPU, compute per step and whether it fits")
        gpu = cols[2].selectbox("GPU to plan for (Show plan)", list(GPUS), key=f"f_{preset}_plan_gpu",
                                help="The plan estimates memory and step time of the configured base model on this GPU")
    if not (submitted or planned):
        return None
    return {"flat": flat, "overrides": overrides, "baseline": with_baseline, "plan": planned, "gpu": gpu, "sweep": sweep,
            "preset": values, "max_restarts": int(restarts)}


def show_plan(cfg, gpu: str) -> None:
    if cfg.model.tiny_random:
        st.info(f"`model.tiny_random` is on: this run uses a tiny randomly initialised model (a few MB; seconds per step "
                f"on a CPU), not {cfg.model.base}. The plan below is for the real {cfg.model.base} on a {gpu}, not for this run.")
    elif not cuda_here():
        st.caption(f"This machine has no CUDA GPU: the plan is for a {gpu} you would run this config on.")
    try:
        p = make_plan(cfg, gpu)
    except PlanError as err:
        st.warning(f"No plan: {err}")
        return
    (st.success if p["fits"] else st.warning)(("Fits: " if p["fits"] else "Does not fit: ") + p["advice"])  # advice has no label
    st.code(render_plan(p), language=None)


def cuda_here() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch in the UI's environment: no GPU to speak of
        return False


def shadow_warnings(flat: dict, overrides: str) -> list[str]:
    return [f"`{path}`: the override `{path}={new}` replaces the form's value `{old}`: the run uses {new}."
            for path, (old, new) in form.shadowed(flat, overrides).items()]


def launch(submission: dict) -> None:
    cfg, errors = form.validate(submission["flat"], submission["overrides"])
    st.session_state["launch_errors"] = errors
    st.session_state["launch_warnings"] = shadow_warnings(submission["flat"], submission["overrides"])
    if errors:
        st.rerun()  # redraw the form with each message under its field
    if submission.get("plan"):
        show_plan(cfg, submission["gpu"])
        return
    ray_address = cfg.ray.address if cfg.ray.address not in (None, "local") else None
    if ray_address:  # the overrides box can name any address: the allowlist is checked here too, before anything
        try:
            ray_jobs.check_allowed(ray_address)
        except ray_jobs.RayJobError as err:
            st.session_state["launch_errors"] = {"ray.address": str(err)}
            st.rerun()
    refused = preflight_problems(cfg)
    if refused:  # before any job, so no MLflow run is created for a config that cannot start here
        for reason in refused:
            st.error(f"Not launched: {reason}", icon="⛔")
        return
    env = {"MLFLOW_TRACKING_URI": store.uri()}  # the job writes where this UI reads
    if submission.get("sweep", {}).get("on"):
        try:
            job = sweeps.launch_sweep(config_io.dump(cfg), submission["sweep"], submission["baseline"], env, ray_address)
        except config_io.ConfigError as err:
            st.error(f"**sweep**: {err}", icon="⚠️")
            return
        st.session_state["launched"] = [job.id]
        if submission["baseline"] and (small := too_small(cfg)):  # the form's config; the driver's log names each
            st.session_state["launch_warnings"] = st.session_state.get("launch_warnings", []) + [f"The population {small}."]
        return
    preset = submission.get("preset") or {}
    try:
        taken = set(store.list_runs(store.uri())["name"].dropna())
    except store.StoreError:
        taken = set()
    taken |= {j.name for j in jobs.list_jobs() if j.name}
    cfg.name = form.run_name(cfg.name, preset.get("name", cfg.name), form.changes(submission["flat"], preset, submission["overrides"]), taken)
    runs = [cfg]
    if submission["baseline"] and not cfg.population.single_agent:
        cfg.pair = cfg.pair or uuid.uuid4().hex[:12]  # links the two runs, whichever starts first
        runs.append(matched_baseline(cfg))
        if (small := too_small(cfg)):  # said at launch (under the form), not as a silent 2.0x at the end
            st.session_state["launch_warnings"] = st.session_state.get("launch_warnings", []) + [f"The population {small}."]
    started = []
    try:
        for run_cfg in runs:
            if ray_address:  # the driver runs on the cluster's head node, where "auto" finds the cluster
                run_cfg = run_cfg.model_copy(deep=True)
                run_cfg.ray.address = "auto"
            started.append(jobs.launch_training(config_io.dump(run_cfg), name=run_cfg.name, env=env,
                                                ray_address=ray_address, need=run_cfg.ray.job_slots(),
                                                max_restarts=submission.get("max_restarts", 0)))
    except ray_jobs.RayJobError as err:
        st.error(f"**ray.address**: {err}", icon="⚠️")
    st.session_state["launched"] = [j.id for j in started]
    # said for the values launched (the form's caption is the preset's)
    st.session_state["launch_forks"] = (experiments.fork_points(cfg.steps, cfg.checkpoint.every, cfg.checkpoint.keep) + "."
                                        if started else "")
    if ray_address and started:
        st.info(f"Submitted as Ray Job(s) to {ray_address}; Ray's dashboard shows them too. The run must log to "
                f"an MLflow store the cluster can reach (this UI reads {store.uri()}).")


def job_row(job: jobs.Job) -> None:
    status, run_id = job.status, job.run_id
    shown = state.job_state(status, state.stop_sent(job))  # one state machine (platform/jobs/state.py)
    cols = st.columns([3, 2, 4, 2])
    cols[0].markdown(f"**{job.name or job.id}**  \n`{job.id}`")
    cols[1].markdown(f"{state.icon(shown)} {shown}" + ("  \nRay Job" if job.ray_address else ""))
    with cols[2]:
        if status == "queued":
            place = queue.position(job)
            st.caption(f"queued{f': #{place} in line' if place else ''} for one of {job.slots} slot(s) of the job "
                       "queue training, sweeps and evaluations share (POPULORA_MAX_PARALLEL_JOBS)")
        elif job.kind == "eval":
            evaluated = (yaml.safe_load(Path(job.dir, jobs.CONFIG_FILE).read_text()) or {}).get("run")
            if evaluated:
                common.link("compare", f"evaluates run {evaluated[:12]}", evaluated, "⚖️")
        elif run_id:
            if status == "running" and job.kind == "train" and (now := progress.read(job.dir)) is not None:
                st.caption(f"⏱️ {progress.line(now)}")
            common.link("runs", f"run {run_id[:12]}", run_id, "📋")
            common.link("arms_race", "arms race", run_id, "📈")
            later = resumed_since(job, run_id)
            if later:
                st.caption(later)
        else:
            st.caption({"running": "waiting for the run id (model loading)…",
                        "lost": "its process is gone (or its pid is another process now): nothing to stop"
                        }.get(status, "no run id in the log"))
    if shown == state.STOPPING:
        cols[3].caption("stopping: the trainer writes its state, then the job reads stopped")
    elif shown in ("running", "queued") and cols[3].button("Stop", key=f"stop_{job.id}",
                                                           help="SIGINT: the run is marked stopped (a queued job never starts)"):
        jobs.stop_soon(job)  # as the Runs page: sent now, followed in the background; the rerun shows "stopping"
        common.forget_jobs()
        st.rerun()
    elif (status in ("stopped", "failed") and job.kind == "train" and run_id and not job.ray_address
          and common.job_for_run(run_id) is not None and common.job_for_run(run_id).id == job.id
          and cols[3].button("Resume", key=f"resume_{job.id}", help=f"populora train --resume {run_id} as a job")):
        again, new = common.resume_once(run_id, job.name.removesuffix(" (resumed)"))
        cols[3].write(f"job {again.id}" if new else f"already resuming: job {again.id}")
    with st.expander("log", expanded=status in ("failed", "lost")):
        st.code(job.log_tail(30) or "(empty)", language="text", wrap_lines=True)


def resumed_since(job: jobs.Job, run_id: str) -> str | None:
    """A line for an ended job whose run was resumed since (by a later job or in a terminal), else None: the
    job's own state is final, the run's is not."""
    if job.status not in ("stopped", "failed", "lost"):
        return None
    newest = common.job_for_run(run_id)
    if newest is not None and newest.id != job.id:
        return f"resumed since by job {newest.id} ({newest.status})"
    info = store.run_info(store.uri(), run_id)
    if info is not None and not common.job_is_current(job, info["tags"]):
        return f"resumed since outside this UI: the run is {info['status']}"
    return None


def jobs_panel() -> None:
    all_jobs = jobs.list_jobs()
    st.subheader("Jobs started from this UI")
    if not all_jobs:
        st.caption(f"none yet (jobs are kept in `{jobs.jobs_dir()}`)")
        return
    for job in all_jobs[:10]:
        job_row(job)
    if len(all_jobs) > 10:
        st.caption(f"{len(all_jobs) - 10} older jobs in `{jobs.jobs_dir()}`")


def main() -> None:
    picked = pick_preset()
    if picked is None:
        return
    preset, values = picked
    errors = st.session_state.get("launch_errors", {})
    # always there, empty without errors: an element inserted above the form on the first failed click moved
    # every element after it, the browser remounted the form and the page jumped to its top
    top = st.container()
    if errors:
        top.error("Fix the fields marked below, then launch again.")
        if "" in errors:
            top.error(errors[""])
    submission = draw_form(preset, values, errors)
    if submission is not None:
        launch(submission)
    for warning in st.session_state.get("launch_warnings", []):
        st.warning(warning, icon="⚠️")
    if st.session_state.get("launched"):
        st.success(f"Started job(s): {', '.join(st.session_state['launched'])}. The run id appears below once "
                   "the trainer has created its MLflow run.")
        if st.session_state.get("launch_forks"):
            st.info(st.session_state["launch_forks"], icon="🍴")
    running = any(j.status in ("running", "starting", "queued") for j in jobs.list_jobs()[:10])
    st.fragment(jobs_panel, run_every="3s" if running else None)()


main()
