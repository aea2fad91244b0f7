"""The MLflow run layout: the contract between training (which writes it) and evaluation, the UI, the CLI, jobs
and the tests (which read it). Every tag, shared param, metric and artifact name lives here, with the reads
the readers share, so a renamed tag is one edit and a reader cannot drift from the writer.

A training run is one parent run plus one child run per member (``mlflow.parentRunId``):

    parent tags      populora.kind (population | baseline), .status, .progress ("<done>/<steps>"), .run_dir,
                     .base_model, .baseline_run, .resumed_from, .job_id, .forked_from and .fork_step (a fork); after ``populora eval``: .eval_dir
    parent params    the flattened TrainConfig (``steps``, ``model.base``, ``population.teachers``, ...)
    parent metrics   tasks/*, student/*, teacher/*, curriculum/*, rating/games, time/*, evolution/<operator>/*
                     (``operator_table``), and ``progress/step``
                     (the sentinel, written last for each step); ``eval_base/<benchmark>/<metric>``; with
                     in-training evaluation (tags .eval_every, .eval_subset): ``eval_population/<mean|weakest|
                     best>/<benchmark>/<metric>`` and ``compute/eval/*`` at each evaluated step
    parent artifacts lineage.json, population.json, tasks/step_NNNNNN.json, answers/step_NNNNNN.json
                     (MLflow table layout), eval/results.json, eval/table.json, eval/report.{md,csv}
    member tags      populora.member_id, .role, .rank, .generation, .parents ("T0,T1" or "-"), .operator,
                     .born_step, .alive ("true"/"false"), .replaced_by, .replaced_at (step), .adapter_dir;
                     after eval: .evaluated. The run name says the same: "T1 (teacher) · replaced by T2 @2"
    member params    member_id, role, rank, generation, parents, operator, born_step
    member metrics   teacher/*, student/*, train/*, rating/mu|sigma|conservative, eval/<benchmark>/<metric>
    member artifacts adapter/ (final PEFT dir), checkpoints/step_NNNNNN/adapter/; after ``populora export
                     --register``: export/
    logged models    one MLflow 3 LoggedModel per member and checkpoint step ("S2-step4", source run: the
                     member run, an output of it), and one at a replaced member's death: tags populora.run,
                     .member, .role, .parents, .step, .parent_models (its lineage as model ids, across forks),
                     .model_origin, .adapter_path, .adapter_artifact; the member's metrics of that step
                     (rating/*, eval/*, ...) are linked to it (``model_id``); member tag .model_id: the newest

A run of a sweep (``populora sweep``) also carries, on its parent run, populora.sweep (the sweep id), .sweep_run
(the planned run's key, unique in the sweep), .sweep_config (the configuration's label, "baseline" for the
single-agent baseline of each seed) and .sweep_seed; see sweep_tags(). A model version registered by ``populora
export --register`` carries populora.run, .member, .base_model, .lineage and one tag per eval metric, see
registry_tags().

Reads take an ``MlflowClient`` (or a store URI), never a global "active run", so one process can read several
stores (the UI tests do).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from populora.platform.jobs import heartbeat

# ====================================================================== tags
TAG_PREFIX = "populora."
PARENT = "mlflow.parentRunId"  # MLflow's own nesting tag: set on member runs, names the training run

KIND = "populora.kind"                  # population | baseline; its presence marks a PopuLoRA parent run
STATUS = "populora.status"              # running | finished | failed | stopped (MLflow's status cannot say stopped)
PROGRESS = "populora.progress"          # "<steps done>/<steps>", see progress()
PHASE = "populora.phase"                # inside a step: "step 2/3 · solving 12/32 answers · ..." (platform/progress.py)
SANDBOX_UNCONFINED = "populora.sandbox.allow_unconfined"  # "true": model code ran without the sandbox's confinement
TASKS_FORMAT = "populora.tasks_format"  # azr | direct (direct: a reduction, shown as such wherever the run is)
SEED_SUMMARY = "populora.seed_summary"  # what step-0 seeding by base-model proposals did, per kind
SEED_FALLBACK = "populora.seed_fallback"  # kinds seeded with hand-written programs ("none" when the model sufficed)
RUN_DIR = "populora.run_dir"            # local dir of checkpoints and adapters
BASE_MODEL = "populora.base_model"
BASELINE_RUN = "populora.baseline_run"  # the single-agent run to compare against ("" if none)
BASELINE_OF = "populora.baseline_of"    # on a baseline run: the population run(s) it is the baseline of (comma-separated)
BUDGET = "populora.budget"              # a run trained to a compute budget (budget.*): its spend against the target, one line
BUDGET_MATCHED = "populora.budget_matched"  # a budgeted run's match in words, beside its ratio: a target that did not finish, one below a step
PAIR = "populora.pair"                  # a population and its baseline started together share it (see link_pair)
RESUMED_FROM = "populora.resumed_from"  # checkpoint dir name of the last resume
FORKED_FROM = "populora.forked_from"    # a fork (populora train --fork): the run it continues
FORK_STEP = "populora.fork_step"        # ... and the step of that run's checkpoint it starts from
FORK_RESIZE = "populora.fork_resize"    # a fork that resized the population: "resized: teachers 2 -> 3 (T4 = gaussian of T0), ..."
JOB_ID = "populora.job_id"              # the job (local or Ray) that started the run, see job_link_tags()
HEARTBEAT = heartbeat.TAG               # a running trainer's beat, overwritten every ~20 s (platform/jobs/heartbeat.py)
RESTARTS = "populora.restarts"          # how many times the job supervisor restarted the run (platform/jobs/restart.py)
RESTART_PREFIX = "populora.restart."    # populora.restart.<n>: what the n-th restart resumed from, and why
EVAL_DIR = "populora.eval_dir"          # local dir of the last ``populora eval`` output
EVAL_EVERY = "populora.eval_every"      # in-training evaluation every K steps (training's ``eval.every``; absent: off)
EVAL_SUBSET = "populora.eval_subset"    # its fixed subset, "<benchmarks>@<limit>" (e.g. "gsm8k,mbpp_plus@20")
EVAL_SUBSET_SEED = "populora.eval_subset_seed"  # the seed that drew the subset (same seed, same problems)
# a sweep's runs (set by the sweep driver as soon as a run's id is known)
MONITOR_TAG = "populora.monitor."      # + a name of MONITORS: "fired at step N: what was seen"
SWEEP = "populora.sweep"                # the sweep id (``sw-<hash of the plan>`` unless named with --id)
SWEEP_RUN = "populora.sweep_run"        # "<config label>|seed=<s>", unique within the sweep
SWEEP_CONFIG = "populora.sweep_config"  # the configuration's label: its grid overrides, or SWEEP_BASELINE
SWEEP_SEED = "populora.sweep_seed"
SWEEP_BASELINE = "baseline"             # SWEEP_CONFIG of the compute-matched single-agent baseline of each seed
ERROR = "populora.error"                # a failed run: "<ExceptionType>: <message>" of the error that ended it

MEMBER_ID = "populora.member_id"
ROLE = "populora.role"
GENERATION = "populora.generation"
PARENTS = "populora.parents"            # comma-separated member ids, "-" for none
OPERATOR = "populora.operator"          # init or the evolution operator's name (gaussian, svd_fit, ...; older runs: mutation | crossover)
ALIVE = "populora.alive"                # "true" | "false"
REPLACED_BY = "populora.replaced_by"
REPLACED_AT = "populora.replaced_at"    # the step evolution replaced the member at
RUN_NAME = "mlflow.runName"             # MLflow's own: renaming a member run when it dies or the run ends
NOTE = "mlflow.note.content"            # MLflow's own: the run's description (why a run was stopped, how to resume)
ADAPTER_DIR = "populora.adapter_dir"
EVALUATED = "populora.evaluated"

# a model version in the MLflow model registry (``populora export --register``)
REGISTRY_RUN = "populora.run"           # the training run the member came from
REGISTRY_MEMBER = "populora.member"
REGISTRY_LINEAGE = "populora.lineage"   # "S2 <- S0 <- S1": the member's birth, then its ancestors'

# a member's checkpoint as an MLflow 3 LoggedModel (external: its adapter stays in the run dir), one per member and
# checkpoint step, and one at a replaced member's death; tags REGISTRY_RUN, REGISTRY_MEMBER, ROLE, PARENTS too
MODEL_ID = "populora.model_id"          # member runs: the id of the member's newest LoggedModel
MODEL_TYPE = "populora-lora"            # the LoggedModels' model_type
MODEL_STEP = "populora.step"            # the step whose weights it is (a checkpoint's, or the death's)
MODEL_PARENTS = "populora.parent_models"  # comma-separated parent model ids ("-": none): its lineage as models
MODEL_ORIGIN = "populora.model_origin"  # trained (its previous model, trained on) | init | <operator> (a birth) | died
MODEL_ADAPTER = "populora.adapter_path"  # the PEFT dir on local disk (a checkpoint's: while checkpoint.keep keeps it)
MODEL_PRUNED = "populora.adapter_pruned"  # set when checkpoint.keep deleted that dir: which step's checkpoint did
MODEL_ARTIFACT = "populora.adapter_artifact"  # runs:/<member run>/checkpoints/step_N/adapter (log_adapters_every)

POPULATION, BASELINE = "population", "baseline"                                   # values of KIND
RUNNING, FINISHED, FAILED, STOPPED = "running", "finished", "failed", "stopped"  # values of STATUS
CRASHED = heartbeat.CRASHED  # what readers show for a running run whose heartbeat stopped (never in the store)
SILENT = heartbeat.SILENT    # ... whose heartbeat stopped while its trainer lives on this machine (suspended, hung)
# our status -> MLflow's run status
MLFLOW_STATUS = {RUNNING: "RUNNING", FINISHED: "FINISHED", FAILED: "FAILED", STOPPED: "KILLED"}

# ====================================================================== params (the flattened config, per member)
PARAM_STEPS = "steps"
PARAM_BASE_MODEL = "model.base"
PARAM_TINY_RANDOM = "model.tiny_random"
PARAM_TEACHERS = "population.teachers"
PARAM_STUDENTS = "population.students"
PARAM_BORN_STEP = "born_step"

# ====================================================================== metrics read outside training
STEP_SENTINEL = "progress/step"  # the run-level metric written last for each step: "this step is fully logged"
SOLVE_RATE = "student/solve_rate"
STEP_SECONDS = "time/step_s"     # the latest step's training time (the Runs page's ETA)
TRAINING_SECONDS = "time/training_s"  # the run's steps' time so far, over resumes (not stopped or loading time)
VALIDITY_RATE = "tasks/validity_rate"
# the compute ledger (populora.training.compute.ledger): member runs and the parent log all three families
COMPUTE_QUANTITIES = ("generated_tokens", "trained_tokens", "rollouts")
COMPUTE_STEP = {q: f"compute/{q}" for q in COMPUTE_QUANTITIES}                     # this step
COMPUTE_CUMULATIVE = {q: f"compute/cumulative/{q}" for q in COMPUTE_QUANTITIES}    # since the member (or run) began
COMPUTE_PER_ADAPTER = {q: f"compute/per_adapter/{q}" for q in COMPUTE_QUANTITIES}  # parent only: cumulative / adapters alive
COVERAGE = "curriculum/coverage"                   # distinct program structures teachers wrote, cumulative
# the same per 100 programs proposed: volume-biased (falls as an arm proposes more), never compare arms on it
COVERAGE_PER_100 = "curriculum/coverage_per_100"
PROGRAMS = "curriculum/programs"                   # valid programs teachers wrote so far (diversity's volume)
RAREFIED = "curriculum/rarefied_structures"        # expected distinct structures among a fixed number of them
RECENT_RAREFIED = "curriculum/recent_rarefied_structures"  # the same among the most recent ones
MONITORS = ("collapse", "degenerate", "convergence", "no_signal", "out_of_sync")  # training.monitors: metric monitor/<name>, tag monitor_tag
EVAL_PREFIX = "eval/"            # member runs: eval/<benchmark>/<metric> (in-training: at each evaluated step)
EVAL_POPULATION_PREFIX = "eval_population/"  # parent run, in-training: eval_population/<stat>/<benchmark>/<metric>
EVAL_POPULATION_STATS = ("mean", "weakest", "best")  # over the members alive at the step
# in-training evaluation's compute, apart from the training ledger above (compute-matching ignores it)
EVAL_COMPUTE_QUANTITIES = ("generated_tokens", "completions")
EVAL_COMPUTE_STEP = {q: f"compute/eval/{q}" for q in EVAL_COMPUTE_QUANTITIES}
EVAL_COMPUTE_CUMULATIVE = {q: f"compute/eval/cumulative/{q}" for q in EVAL_COMPUTE_QUANTITIES}
EVAL_BASE_PREFIX = "eval_base/"  # parent run: the base model's scores
RATING_PREFIX = "rating/"         # member runs: rating/mu, rating/sigma, rating/conservative

# ====================================================================== artifacts
LINEAGE = "lineage.json"
POPULATION_FILE = "population.json"
TASKS, ANSWERS = "tasks", "answers"  # folders of per-step tables
ADAPTER = "adapter"                  # a member's final PEFT dir
EVAL_FOLDER = "eval"
EVAL_RESULTS = "eval/results.json"
EVAL_TABLE = "eval/table.json"
EXPORT_FOLDER = "export"             # member runs: the dir ``populora export --register`` logged
CHECKPOINTS = "checkpoints"          # <run dir>/checkpoints/step_NNNNNN/ (populora.training.run.checkpoint)
CHECKPOINT_STATE = "state.json"      # a checkpoint is complete once this is in its dir
CONFIG_FILE = "config.yaml"          # the validated config a run trained with: in its run dir and as an artifact
ERROR_FILE = "error.txt"             # a failed run: the traceback of the error that ended it

# ====================================================================== leagues (``populora league``, training/league.py)
# A league run is a run of its own (experiment "populora-league", no populora.kind: the run lists leave it out)
LEAGUE = "populora.league"              # the league id (lg-<hash of its spec>): marks a league run
LEAGUE_RUNS = "populora.league_runs"    # the training runs it read (comma-separated parent run ids)
LEAGUE_DIR = "populora.league_dir"      # its local out dir (panel.json, answers.jsonl, league.json)
LEAGUE_RESULTS = "league/league.json"   # artifact: abilities, difficulties, teachers, comparisons
LEAGUE_PANEL = "league/panel.json"      # artifact: the fixed task panel (reusable)

# ====================================================================== jobs
ENV_JOB_ID = "POPULORA_JOB_ID"    # set by the job launcher: the trainer tags its run with it
ENV_JOB_DIR = "POPULORA_JOB_DIR"  # set by the local launcher: the trainer writes RUN_ID_FILE there
RUN_ID_FILE = "run_id"
EVAL_OUT_FILE = "eval_out"        # an evaluation job's dir: the path of its eval out dir (written as it starts)
RAY_JOB_NAME = "populora.name"    # Ray Job metadata key holding the run name


# ====================================================================== names
def member_tags(params: dict[str, Any]) -> dict[str, Any]:
    """A member run's tags from its params (``member_id`` -> ``populora.member_id``, ...)."""
    return {TAG_PREFIX + k: v for k, v in params.items()}


def member_run_name(member_id: str, role: str, state: str = "", replaced_by: str = "", step: int | None = None) -> str:
    """What MLflow's run list calls a member run: its id and role, then alive or by whom and when it was replaced,
    so MLflow's own UI reads right too.

    >>> member_run_name("T1", "teacher", "replaced", "T2", 2)
    'T1 (teacher) · replaced by T2 @2'
    >>> member_run_name("S0", "student", "alive")
    'S0 (student) · alive'
    """
    name = f"{member_id} ({role})"
    if state == "replaced":
        return f"{name} · replaced by {replaced_by} @{step}"
    return f"{name} · {state}" if state else name


def progress(done: int, total: int) -> str:
    return f"{done}/{total}"


def parse_progress(text: str) -> tuple[int | None, int | None]:
    """The (done, total) of a progress tag.

    >>> parse_progress("3/10")
    (3, 10)
    """
    done, _, total = (text or "").partition("/")
    return to_int(done), to_int(total)


def step_table(folder: str, step: int) -> str:
    """The artifact path of one step's table: ``tasks/step_000003.json``."""
    return f"{folder}/step_{step:06d}.json"


def table_step(path: str) -> int | None:
    """The step of a step table's path, None for any other file.

    >>> table_step("tasks/step_000003.json")
    3
    """
    stem = Path(path).stem
    return int(stem[5:]) if stem.startswith("step_") and stem[5:].isdigit() else None


def monitor_tag(name: str) -> str:
    """The tag a fired monitor leaves on its run.

    >>> monitor_tag("collapse")
    'populora.monitor.collapse'
    """
    return MONITOR_TAG + name


def fired_monitors(tags: dict[str, str]) -> dict[str, str]:
    """{monitor: what its tag says} of the monitors that fired on a run.

    >>> fired_monitors({"populora.monitor.collapse": "fired at step 9: ...", "populora.kind": "baseline"})
    {'collapse': 'fired at step 9: ...'}
    """
    return {name: tags[monitor_tag(name)] for name in MONITORS if tags.get(monitor_tag(name))}


def sweep_tags(sweep_id: str, key: str, config: str, seed: int) -> dict[str, str]:
    """The tags that make a parent run one planned run of a sweep."""
    return {SWEEP: sweep_id, SWEEP_RUN: key, SWEEP_CONFIG: config, SWEEP_SEED: str(seed)}


def registry_tags(run_id: str, member: str, base_model: str, lineage: list[str], scores: dict[str, float]) -> dict[str, str]:
    """The tags of an exported member's model version; each eval metric as ``populora.<metric>``.

    >>> registry_tags("r1", "S2", "embedded", ["S2", "S0"], {"eval/gsm8k/accuracy": 0.5})["populora.eval/gsm8k/accuracy"]
    '0.5000'
    """
    return {REGISTRY_RUN: run_id, REGISTRY_MEMBER: member, BASE_MODEL: base_model, REGISTRY_LINEAGE: " <- ".join(lineage),
            **{TAG_PREFIX + k: f"{v:.4f}" for k, v in scores.items()}}


def model_name(member: str, step: int) -> str:
    """A member checkpoint's LoggedModel name (MLflow forbids / : . in it).

    >>> model_name("S2", 4)
    'S2-step4'
    """
    return f"{member}-step{step}"


def checkpoint_adapter(step: int) -> str:
    return f"checkpoints/step_{step:06d}/{ADAPTER}"


def step_folder(step: int) -> str:
    """``step_000001``: a checkpoint's dir name under ``<run dir>/checkpoints``, and the folder of its evaluation
    (``<run dir>/eval/step_000001``, artifacts ``eval/step_000001/...`` on the parent run)."""
    return f"step_{step:06d}"


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    """Checkpoint ``step``'s dir in a run dir (``populora.training.run.checkpoint`` writes it)."""
    return Path(run_dir) / CHECKPOINTS / step_folder(step)


def checkpoint_steps(run_dir: Path) -> list[int]:
    """The steps of the complete checkpoints a run dir keeps on disk, oldest first (fork points)."""
    if not run_dir:
        return []
    root = Path(run_dir) / CHECKPOINTS
    found = [folder_step(p.name) for p in root.glob("step_*") if (p / CHECKPOINT_STATE).is_file()] if root.is_dir() else []
    return sorted(s for s in found if s is not None)


def kept_note(run_dir: Path) -> str:
    """What a run dir keeps, for an error naming a missing checkpoint."""
    kept = checkpoint_steps(run_dir)
    return (f"it keeps steps {', '.join(map(str, kept))} (older ones are pruned: the run's checkpoint.keep)"
            if kept else "it has no checkpoint")


def folder_step(name: str) -> int | None:
    """The step of a ``step_NNNNNN`` folder name, else None."""
    return to_int(name[len("step_"):]) if name.startswith("step_") else None


def eval_results_path(step: int | None = None) -> str:
    """The results.json artifact of the final evaluation (``step`` None) or of checkpoint ``step``'s."""
    return EVAL_RESULTS if step is None else f"{EVAL_FOLDER}/{step_folder(step)}/results.json"


def eval_subset(names: list[str], limit: int) -> str:
    """The ``populora.eval_subset`` tag of in-training evaluation: its benchmarks and items per benchmark.

    >>> eval_subset(["gsm8k", "mbpp_plus"], 20)
    'gsm8k,mbpp_plus@20'
    >>> parse_eval_subset('gsm8k,mbpp_plus@20')
    (['gsm8k', 'mbpp_plus'], 20)
    """
    return f"{','.join(names)}@{limit}"


def parse_eval_subset(text: str) -> tuple[list[str], int | None]:
    names, _, limit = (text or "").rpartition("@")
    return [n for n in names.split(",") if n], to_int(limit)


def eval_population_key(stat: str, metric: str) -> str:
    """The parent run's in-training statistic of a member metric: ("mean", "eval/gsm8k/accuracy") ->
    "eval_population/mean/gsm8k/accuracy"."""
    return f"{EVAL_POPULATION_PREFIX}{stat}/{metric.removeprefix(EVAL_PREFIX)}"


def to_int(text) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


# ====================================================================== reads: runs
PARENT_RUNS = f"tags.`{KIND}` != ''"


def search_runs(client, limit: int = 500) -> tuple[list, dict[str, str]]:
    """PopuLoRA parent runs of every experiment (member runs excluded), newest first, and {experiment id: name}."""
    exps = {e.experiment_id: e.name for e in client.search_experiments()}
    runs = client.search_runs(list(exps), filter_string=PARENT_RUNS, order_by=["attributes.start_time DESC"],
                              max_results=limit) if exps else []
    return runs, exps


def status(run) -> str:
    """Our status tag, else MLflow's status in lower case (a run from before the tag existed); "crashed" for a
    running run whose heartbeat stopped (``heartbeat.shown_status``: shown, never written)."""
    return heartbeat.shown_status(run.data.tags.get(STATUS, run.info.status.lower()), run.data.tags)


def run_row(run, exps: dict[str, str]) -> dict:
    """One parent run as the run list shows it (``start_time`` in ms since the epoch)."""
    t, m, p = run.data.tags, run.data.metrics, run.data.params
    text = t.get(PROGRESS, "")
    step, steps = parse_progress(text)
    return {"run_id": run.info.run_id, "name": run.info.run_name, "kind": t.get(KIND, "?"), "status": status(run),
            "mlflow_status": run.info.status, "progress": text, "step": step, "steps": steps or to_int(p.get(PARAM_STEPS)),
            "start_time": run.info.start_time, "end_time": run.info.end_time, "base_model": base_model_label(t.get(BASE_MODEL, p.get(PARAM_BASE_MODEL, "")), p),
            "teachers": to_int(p.get(PARAM_TEACHERS)), "students": to_int(p.get(PARAM_STUDENTS)),
            "population": population_label(t.get(KIND, ""), to_int(p.get(PARAM_TEACHERS)), to_int(p.get(PARAM_STUDENTS))),
            "note": t.get(NOTE, ""), "forked_from": t.get(FORKED_FROM, ""), "sweep": t.get(SWEEP, ""), "settings": dict(p),
            "solve_rate": m.get(SOLVE_RATE), "validity_rate": m.get(VALIDITY_RATE), "step_s": m.get(STEP_SECONDS),
            "training_s": m.get(TRAINING_SECONDS),
            "baseline_run": t.get(BASELINE_RUN, ""), "run_dir": t.get(RUN_DIR, ""),
            "compute_metrics": {k: m[k] for k in COMPUTE_PER_ADAPTER.values() if k in m},  # its per-adapter ledger
            "experiment": exps.get(run.info.experiment_id, run.info.experiment_id),
            "monitors": ", ".join(fired_monitors(t)), "tags": dict(t)}


def population_label(kind: str, teachers: int | None, students: int | None) -> str:
    """What a run trains, as lists show it: a baseline is one adapter in both roles, whatever its config's
    (unused) population.teachers/students say.

    >>> population_label(BASELINE, 2, 2), population_label(POPULATION, 4, 4), population_label(POPULATION, None, None)
    ('1 adapter (both roles)', '4 teachers + 4 students', '?')
    """
    if kind == BASELINE:
        return "1 adapter (both roles)"
    if teachers is None or students is None:
        return "?"
    return f"{teachers} teachers + {students} students"


def base_model_label(base: str, params: dict) -> str:
    """The base model as lists show it: a ``model.tiny_random`` run trained a tiny random model, not ``base``.

    >>> base_model_label("embedded", {"model.tiny_random": "True"})
    'tiny random model shaped like embedded'
    """
    if str(params.get(PARAM_TINY_RANDOM, "")).lower() == "true":
        return f"tiny random model shaped like {base}"
    return base


def short_name(name: str, width: int = 28) -> str:
    """A run name cut to ``width`` in the middle, so that what tells runs of one preset apart, at the end (a fork's
    "· fork of ID @step", a baseline's "-baseline"), stays: cut at the end, a parent, its fork and its baseline all
    read "smoke model.tiny_r".

    >>> short_name("smoke model.tiny_random=true steps=6-baseline", 24)
    'smoke model.…=6-baseline'
    >>> short_name("smoke model.tiny_random=true steps=6 · fork of e22bd58e @3", 24)
    'smoke model.…e22bd58e @3'
    >>> short_name("smoke", 24)
    'smoke'
    """
    if len(name) <= width:
        return name
    tail = (width - 1) // 2
    return name[:width - 1 - tail] + "…" + name[len(name) - tail:]


def list_runs(client, limit: int = 500) -> list[dict]:
    """The run list of the UI's Runs page and of ``populora runs``: one run_row per parent run, newest first."""
    runs, exps = search_runs(client, limit)
    return [run_row(r, exps) for r in runs]


def league_runs(client, limit: int = 200) -> list[dict]:
    """League runs (``populora league``) of every experiment, newest first: id, league id, runs read, status, start."""
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps, filter_string=f"tags.`{LEAGUE}` LIKE 'lg-%'", order_by=["attributes.start_time DESC"],
                              max_results=limit) if exps else []
    return [{"run_id": r.info.run_id, "league": r.data.tags.get(LEAGUE), "runs": r.data.tags.get(LEAGUE_RUNS, ""),
             "status": r.info.status.lower(), "start_time": r.info.start_time} for r in runs]


def run_dir(run) -> Path:
    return Path(run.data.tags.get(RUN_DIR, ""))


def run_dir_of(tags: dict) -> Path | None:
    """The run dir a run's tags name, None if they name none."""
    return Path(tags[RUN_DIR]) if tags.get(RUN_DIR) else None


# ====================================================================== reads: members
def member_runs(client, run_id: str, max_results: int = 10000) -> list:
    """The member (child) runs of a training run."""
    exp_id = client.get_run(run_id).info.experiment_id
    return client.search_runs([exp_id], filter_string=f"tags.`{PARENT}` = '{run_id}'", max_results=max_results)


def members_by_id(children: list) -> dict[str, Any]:
    """{member id: member run} of the children that carry a member id."""
    return {c.data.tags[MEMBER_ID]: c for c in children if c.data.tags.get(MEMBER_ID)}


def member_row(run) -> dict:
    """A member run's identity (from its tags), then the latest value of each of its metrics."""
    t = run.data.tags
    parents = t.get(PARENTS, "-")
    return {"member": t.get(MEMBER_ID, run.info.run_name), "role": t.get(ROLE, "?"),
            "generation": to_int(t.get(GENERATION)) or 0,
            "parents": [] if parents in ("", "-") else parents.split(","), "operator": t.get(OPERATOR, "init"),
            "born_step": to_int(run.data.params.get(PARAM_BORN_STEP)) or 0,
            "alive": t.get(ALIVE, "true") == "true", "adapter_dir": t.get(ADAPTER_DIR, ""),
            "member_run_id": run.info.run_id, "model_id": t.get(MODEL_ID, ""), **run.data.metrics}


def member_order(member_id: str) -> tuple:
    """T2 < T10: the prefix, then the number."""
    head = member_id.rstrip("0123456789")
    return (head, int(member_id[len(head):] or 0))


# ====================================================================== reads: artifacts
def read_json(store: str, run_id: str, path: str) -> Any:
    """A JSON artifact of a run in the store at URI ``store``; raises if it is missing."""
    return json.loads(read_text(store, run_id, path))


def read_text(store: str, run_id: str, path: str) -> str:
    """A text artifact of a run in the store at URI ``store``; raises if it is missing."""
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=tmp, tracking_uri=store)
        return Path(local).read_text()


def table_rows(data: Any) -> tuple[list[str], list[list]]:
    """(columns, rows) of a table artifact ({"columns": [...], "data": [[...]]}); empty if it is not one."""
    if not isinstance(data, dict) or "columns" not in data:
        return [], []
    return data["columns"], data.get("data", [])


def lineage_of(data: Any) -> dict:
    """lineage.json, or an empty lineage before the first checkpoint wrote it."""
    return data if isinstance(data, dict) else {"events": [], "nodes": [], "edges": []}


def population_of(data: Any) -> list[dict]:
    """The member list of population.json ([] before the first checkpoint)."""
    return data.get("members", []) if isinstance(data, dict) else []


# ====================================================================== jobs <-> runs
def job_link_tags() -> dict[str, str]:
    """Tags linking a new run to the job that started it ({} outside a job)."""
    job_id = os.environ.get(ENV_JOB_ID)
    return {JOB_ID: job_id} if job_id else {}


def resume_job_tags() -> dict[str, str]:
    """The job tag of a resumed run: the resuming job's id, or "" for a resume outside any job (a terminal), so
    the run never keeps naming the earlier job whose log and state ended with the stop."""
    return {JOB_ID: os.environ.get(ENV_JOB_ID, "")}


def record_job_run(run_id: str) -> None:
    """Inside a local job: write the run id to ``<job dir>/run_id``, where the job finds it without MLflow."""
    job_dir = os.environ.get(ENV_JOB_DIR)
    if job_dir and Path(job_dir).is_dir():
        write_run_id(Path(job_dir), run_id)


def job_dir_from_env() -> Path | None:
    """Inside a local job: its dir (where the job's status files live), else None."""
    job_dir = os.environ.get(ENV_JOB_DIR)
    return Path(job_dir) if job_dir and Path(job_dir).is_dir() else None


def write_run_id(job_dir: Path, run_id: str) -> None:
    tmp = job_dir / f".{RUN_ID_FILE}.tmp"
    tmp.write_text(run_id)
    tmp.replace(job_dir / RUN_ID_FILE)


def read_run_id(job_dir: Path) -> str | None:
    try:
        return (job_dir / RUN_ID_FILE).read_text().strip() or None
    except OSError:
        return None


def link_baseline(tracker, population: str, baseline: str) -> None:
    """Link a population run and its single-agent baseline both ways: ``populora.baseline_run`` on the population,
    ``populora.baseline_of`` (a list: a sweep's seed has one baseline for every configuration) on the baseline.
    Idempotent, so whoever learns of the pair (either trainer, a sweep driver) may call it."""
    tracker.set_tags(population, {BASELINE_RUN: baseline})
    of = [r for r in tracker.get_run(baseline).data.tags.get(BASELINE_OF, "").split(",") if r]
    if population not in of:
        tracker.set_tags(baseline, {BASELINE_OF: ",".join(of + [population])})


def matched_by_rule(population_tags: dict, baseline_tags: dict) -> bool:
    """Whether a baseline's configuration was matched to the population by the rule: the two runs were launched
    together (``populora train --baseline``, Launch's baseline box) and share a ``populora.pair``.

    >>> matched_by_rule({PAIR: "p1"}, {PAIR: "p1"}), matched_by_rule({PAIR: "p1"}, {}), matched_by_rule({}, {})
    (True, False, False)
    """
    pair = population_tags.get(PAIR)
    return bool(pair) and pair == baseline_tags.get(PAIR)


def link_pair(tracker, run_id: str, pair: str) -> str | None:
    """Link ``run_id`` with the run of the other kind tagged with the same ``populora.pair`` (a population and its
    baseline launched together, started in either order or at once: each trainer calls this once its run is
    tagged, so the second to start always finds the first). Returns the other run's id, None if not started yet."""
    client = tracker.client
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps, filter_string=f"tags.`{PAIR}` = '{pair}'", max_results=50) if exps else []
    mine = next((r for r in runs if r.info.run_id == run_id), None) or tracker.get_run(run_id)
    kind = mine.data.tags.get(KIND)
    other = next((r for r in runs if r.info.run_id != run_id and r.data.tags.get(KIND) not in (None, kind)
                  and PARENT not in r.data.tags), None)
    if other is None:
        return None
    population, baseline = (run_id, other.info.run_id) if kind == POPULATION else (other.info.run_id, run_id)
    link_baseline(tracker, population, baseline)
    return other.info.run_id


def run_of_job(client, job_id: str) -> str | None:
    """The newest run tagged with ``job_id`` in any experiment (a Ray job's run: its job dir is on another
    machine than the trainer)."""
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps, filter_string=f"tags.`{JOB_ID}` = '{job_id}'",
                              order_by=["attributes.start_time DESC"], max_results=1) if exps else []
    return runs[0].info.run_id if runs else None
