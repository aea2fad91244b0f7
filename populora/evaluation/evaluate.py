"""The one evaluation entry point: ``evaluate(EvalConfig) -> [Results]``. ``populora eval``, the web UI's
evaluation jobs and in-training evaluation all call it; the CLI only parses the flags and prints what it returns.

What it does, in order: resolve what to score (``plan``: a run's members, its baseline and the base model, the
members alive at a checkpoint, one adapter dir, or every finished run of a sweep), write the plan of
(target, benchmark) pairs next to the results (``progress.json``, what the UI's progress table reads), score the
pairs still missing (``Runner``: resumable, pair by pair), then write ``results.json`` with its reports and log
them to MLflow.

A checkpoint (``step``) is scored into ``<run dir>/eval/step_NNNNNN`` and logged as the parent run's artifacts
``eval/step_NNNNNN/...`` only: member runs' ``eval/<benchmark>/<metric>`` histories are in-training evaluation's
(MLflow step = training step), and a full score of an old checkpoint logged there would read as one of its points.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from populora.evaluation.harness import benchmarks, regrade
from populora.evaluation import estimate, results
from populora.evaluation.statistics import power
from populora.evaluation import targets as T
from populora.evaluation.harness.runner import ITEMS_DIR, Runner, slug
from populora.evaluation.targets import TargetError
from populora.platform import diskspace
from populora.platform.store import runlayout
from populora.platform.store import sweep as S
from populora.platform.files import write_atomic
from populora.platform.store.tracking import Tracker

PROGRESS_FILE = "progress.json"  # in the eval out dir: the plan of pairs, read by ``progress``


class MissingDependency(RuntimeError):
    """An evaluation package is not installed; the message says which and how to install it."""


@dataclass
class Plan:
    """What one evaluation scores, resolved without loading any model."""

    targets: list                      # evaluation.targets.Target, in table order
    names: list[str]                   # benchmark names
    root: Path                         # benchmark data dir
    out: Path                          # results dir (resumable)
    model: object                      # platform.config.ModelSource the adapters were trained on
    backend: str = "multilora"         # multilora | peft
    run: str | None = None             # the evaluated training run (MLflow parent run id)
    step: int | None = None            # a checkpoint's step; None = the run's final adapters


@dataclass
class Results:
    """One evaluation's outcome: ``data`` is results.json (its layout: ``evaluation.results``)."""

    plan: Plan
    data: dict
    paths: dict[str, Path] = field(default_factory=dict)


def require_packages(names: list[str]) -> None:
    """EvalPlus for HumanEval+/MBPP+, lm-eval + math-verify for the math suite: say so before loading a model."""
    groups = {benchmarks.BENCHMARKS[n].group for n in names}
    need = {"evalplus": any(n in ("humaneval_plus", "mbpp_plus") for n in names),
            "lm_eval": "math" in groups, "math_verify": "math" in groups}
    missing = [pkg for pkg, used in need.items() if used and importlib.util.find_spec(pkg) is None]
    if missing:
        raise MissingDependency(f"{', '.join(missing)} not installed: pip install populora-platform "
                                f"(evalplus==0.3.1, lm-eval==0.4.13, math-verify)")


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ====================================================================== the entry point
def evaluate(cfg, *, backend=None, tracker=None, log: Callable[[str], None] | None = None) -> list[Results]:
    """Score what ``cfg`` (an ``EvalConfig``) names; one ``Results`` per evaluated run (a sweep gives several).

    ``backend``: an already loaded model backend to score on (in-training evaluation passes the trainer's);
    None loads one, only if some pair is still to do. ``tracker``: the MLflow ``Tracker`` (default: the
    configured store). Bad input raises ``TargetError``, ``DataError``, ``MissingDependency`` or ``ConfigError``
    with a message saying what to change."""
    log = log or _stderr
    root = benchmarks.data_dir(cfg.data_dir)
    names = benchmarks.select(cfg.benchmarks)
    benchmarks.verify(root, names)
    require_packages(names)
    if (cfg.run or cfg.sweep) and tracker is None:
        tracker = Tracker()
    if cfg.sweep:
        return _evaluate_sweep(cfg, names, root, tracker, log)
    return [score(plan(cfg, names, root, tracker), cfg, tracker, backend, log)]


def _evaluate_sweep(cfg, names: list[str], root: Path, tracker, log) -> list[Results]:
    """Each finished run of the sweep in turn, with the same configuration (each resumable as a single run)."""
    runs = S.latest_by_key(S.find_runs(tracker.client, cfg.sweep))
    if not runs:
        raise TargetError(f"no runs tagged {runlayout.SWEEP}={cfg.sweep}; start one with populora sweep")
    done = {k: r for k, r in sorted(runs.items()) if r.info.status == "FINISHED"}
    for key in sorted(set(runs) - set(done)):
        log(f"skipping {key}: run {runs[key].info.run_id} is {runs[key].info.status}")
    out = []
    for key, run in done.items():
        rid = run.info.run_id
        log(f"== sweep {cfg.sweep}: {key} (run {rid})")
        one = cfg.model_copy(update={"sweep": None, "run": rid, "include_base": cfg.sweep_base,
                                     "out": str(Path(cfg.out) / rid) if cfg.out else None})
        out.append(score(plan(one, names, root, tracker, in_sweep=True), one, tracker, None, log))
    return out


def plan(cfg, names: list[str], root: Path, tracker=None, in_sweep: bool = False) -> Plan:
    """The targets, base model, backend kind and output dir of what ``cfg`` asks to evaluate."""
    if cfg.run:
        if cfg.step is not None:
            found, model, run = T.step_targets(tracker, cfg.run, cfg.step, cfg.members, cfg.baseline, cfg.include_base)
        else:
            found, model, run = T.run_targets(tracker, cfg.run, cfg.members, cfg.baseline, cfg.include_base)
        if not cfg.include_baseline:
            found = [t for t in found if t.kind != T.BASELINE or run.data.tags.get(runlayout.KIND) == runlayout.BASELINE]
        if in_sweep:  # a sweep's baselines are runs of the sweep, evaluated once each
            found = [t for t in found if t.kind != T.BASELINE or run.data.tags.get(runlayout.KIND) == runlayout.BASELINE]
        out = Path(cfg.out or Path(run.data.tags.get(runlayout.RUN_DIR) or f"populora-eval/{cfg.run}") / "eval")
        if cfg.step is not None:
            out = out / runlayout.step_folder(cfg.step)
        kind = cfg.backend or run.data.params.get("model.backend") or "multilora"
        return Plan(found, names, root, out, model, kind, cfg.run, cfg.step)
    found = [T.adapter_target(cfg.adapter)] if cfg.adapter else []
    if cfg.base_only or cfg.include_base:
        found.append(T.Target(T.BASE_LABEL, T.BASE, None))
    name = found[0].label if cfg.adapter else "base"
    return Plan(found, names, root, Path(cfg.out or Path("populora-eval") / name), cfg.model, cfg.backend or "multilora")


def backend_factory(model, device: str, kind: str = "multilora", lora=None):
    """Builds the evaluation's backend with the platform's ``make_backend``, as training does. ``lora``: the one
    LoRA shape of the adapters (multi-LoRA needs it; PEFT reads each adapter dir's own)."""
    def make():
        # the one import of our own inside a function here: the backends load torch (seconds), and importing
        # populora.evaluation (the UI does) must not; a scored pair asks for a model only when it is still to do
        from populora.platform.backends import BackendConfig, LoraSpec, make_backend

        return make_backend(BackendConfig(model.base, model.gguf_file, model.tiny_random, model.dtype, device,
                                          lora or LoraSpec(), kind, slots=1))
    return make


def score(p: Plan, cfg, tracker=None, backend=None, log=_stderr, loaded: dict[str, str] | None = None,
          progress: bool = True) -> Results:
    """Score the plan's missing pairs, write results.json and its reports, log them to MLflow (a run's only).
    ``loaded``: {target label: adapter name} the given ``backend`` already holds (scored in place, see Runner);
    ``progress``: tqdm bars per (target, benchmark) on stderr."""
    lora = T.lora_spec(p.targets) if p.backend == "multilora" and backend is None else None
    protocol = cfg.resolved_protocol(p.model)
    log(f"evaluating {', '.join(t.label for t in p.targets)} on {', '.join(p.names)}"
        f"{f' at checkpoint step {p.step}' if p.step is not None else ''}"
        f"{f' (first {cfg.limit} items each)' if cfg.limit else ''} under protocol {protocol.name}; results in {p.out}")
    log(cost_line(p, cfg, protocol))
    factory = (lambda: backend) if backend is not None else backend_factory(p.model, cfg.device, p.backend, lora)
    runner = Runner(factory, p.root, p.out, cfg.generation, cfg.limit, p.model.model_dump(), log=log,
                    batched=cfg.batched, protocol=protocol, loaded=loaded, progress=progress)
    write_progress(p)
    if cfg.regrade:
        scores = regrade.run(runner, p.targets, p.names)
    else:
        scores = runner.run(p.targets, p.names)
    config = {"run": p.run, "step": p.step, "data_dir": str(p.root.resolve()), "benchmarks": p.names, **runner.config,
              "data_sha256": {n: runner.sums.get(benchmarks.BENCHMARKS[n].file) for n in p.names}}
    data = results.build(p.targets, scores, config)
    paths = results.write_local(p.out, data)
    if tracker is not None and p.run:
        with diskspace.writing(f"the evaluation results of run {p.run} in the MLflow store",
                               diskspace.store_location(getattr(tracker, "uri", ""))):
            results.log_mlflow(tracker, p.run, p.targets, data, paths, step=p.step)
    return Results(p, data, paths)


def cost_line(p: Plan, cfg, protocol) -> str:
    """Before scoring: what the evaluation will generate (``estimate.size``: generations, the most new tokens) and,
    sampled, what its samples buy (``power.sampling_gain``, at assumed base scores)."""
    size = estimate.size(",".join(p.names), cfg.limit, len(p.targets), p.model, protocol.name,
                         cfg.generation.max_new_tokens, cfg.generation.sampled, p.root)
    line = (f"to generate: {size['rows']:,} completions, at most {size['tokens']:,} new tokens ({protocol.decoding()}"
            f"; before resuming finished pairs)")
    if cfg.generation.sampled > 1:
        line += f"; {power.sampling_gain(cfg.generation.sampled, ','.join(p.names), cfg.limit)['words']} (assumed base scores)"
    return line


# ====================================================================== progress (what the UI shows)
def write_progress(p: Plan) -> None:
    """The plan of (target, benchmark) pairs, next to the pairs the runner writes as each one finishes."""
    pairs = [{"target": t.label, "benchmark": n, "file": str(Path("pairs") / slug(t.label) / f"{n}.json")}
             for t in p.targets for n in p.names]
    write_atomic(p.out / PROGRESS_FILE, json.dumps({"run": p.run, "step": p.step, "pairs": pairs}, indent=1))
    job_dir = runlayout.job_dir_from_env()
    if job_dir is not None:  # an evaluation job: the UI finds its out dir from the job dir (the job's run_id file
        write_atomic(job_dir / runlayout.EVAL_OUT_FILE, str(p.out.resolve()))  # stays a training job's: evaluations start no run)


def progress(out: str | Path) -> list[dict]:
    """One row per planned (target, benchmark) pair: ``target``, ``benchmark``, ``done`` and, once done, the
    ``score`` (primary metric); [] before the evaluation wrote its plan. A pair done in an earlier (stopped)
    evaluation counts as done: the next start reuses it. A pair that started also has ``items`` and ``items_total``
    (generated rows so far, of all), ``started`` and ``updated`` (epoch seconds), from the runner's ``items/`` files."""
    try:
        planned = json.loads((Path(out) / PROGRESS_FILE).read_text())["pairs"]
    except (OSError, ValueError, KeyError):
        return []
    rows = []
    for pair in planned:
        row = {"target": pair["target"], "benchmark": pair["benchmark"], "done": False, "score": None,
               "items": None, "items_total": None, "started": None, "updated": None}
        try:
            stored = json.loads((Path(out) / pair["file"]).read_text())
            row.update(done=True, score=stored.get("score"))
        except (OSError, ValueError):
            pass
        try:
            items = json.loads((Path(out) / ITEMS_DIR / slug(pair["target"]) / f"{pair['benchmark']}.json").read_text())
            row.update(items=int(items["done"]), items_total=int(items["total"]), started=float(items["started"]),
                       updated=float(items["updated"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        rows.append(row)
    return rows
