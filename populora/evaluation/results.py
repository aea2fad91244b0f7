"""Evaluation results: one JSON file in lm-eval's layout, MLflow metrics per member, the table as artifacts.

``results.json``: {"results": {target: {benchmark: {"alias", <metric>, <metric>_stderr, "n", "score", ...}}},
"targets": {target: {"kind", "mlflow_run", "adapter_dir", ...}}, "configs": {benchmark: {...}}, "config": {...}}.
MLflow: each member's (and the baseline's) child run gets ``eval/<benchmark>/<metric>``; the base model's scores
go on the evaluated parent run as ``eval_base/<benchmark>/<metric>``; the parent run gets ``eval/results.json``,
``eval/table.json`` (MLflow table layout), ``eval/report.md`` and ``eval/report.csv``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from populora.evaluation.harness import benchmarks
from populora.evaluation import report
from populora.evaluation.targets import BASE, Target
from populora.platform.store import runlayout
from populora.platform.files import write_atomic

PAIR_FIELDS = ("alias", "metrics", "primary", "score", "n", "seconds", "samples_file", "lm_eval_config")


def build(targets: list[Target], scores: dict[str, dict[str, dict]], config: dict) -> dict:
    results = {}
    for t in targets:
        per = {}
        for name, r in scores.get(t.label, {}).items():
            entry = {k: r[k] for k in PAIR_FIELDS if k in r}
            entry.update(entry.pop("metrics"))
            if "config" in r:  # what this pair was made with (a resumed pair can predate this evaluation)
                entry["pair_config"] = {k: r["config"].get(k) for k in ("protocol", "template", "batched",
                                        "evalplus_time_limits", "regraded") if k in r["config"]}
                entry["max_new_tokens"] = r["config"].get("generation", {}).get("max_new_tokens")  # flat metric keys next to their _stderr twins, as lm-eval does
            per[name] = entry
        results[t.label] = per
    names = list(dict.fromkeys(n for per in scores.values() for n in per))
    configs = {n: {"alias": benchmarks.BENCHMARKS[n].label, "group": benchmarks.BENCHMARKS[n].group,
                   "file": benchmarks.BENCHMARKS[n].file} for n in names}
    return {"results": results, "configs": configs, "config": config, "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "targets": {t.label: {"kind": t.kind, "mlflow_run": t.mlflow_run, "adapter_dir": t.adapter_dir, **t.info}
                        for t in targets}}


HIGHER_IS_BETTER = {"grading_fallback": False, "truncated_rate": False}


def lm_eval_schema(data: dict) -> dict:
    """The results in lm-eval's own layout (``results_lm_eval.json``), one task per (target, benchmark) named
    ``<target>/<benchmark>``: ``"<metric>,none"`` and ``"<metric>_stderr,none"`` keys, ``versions``,
    ``n-samples`` and ``higher_is_better``, so lm-eval's tooling reads it."""
    out: dict = {"results": {}, "versions": {}, "n-samples": {}, "higher_is_better": {}, "config": data["config"]}
    totals = {n: benchmarks.count_records(Path(data["config"]["data_dir"]), n) for n in data["configs"]} \
        if Path(data["config"].get("data_dir") or "/nonexistent").is_dir() else {}
    for label, per in data["results"].items():
        for name, entry in per.items():
            task = f"{label}/{name}"
            row = {"alias": f"{label} / {entry.get('alias', name)}"}
            metrics = {k: v for k, v in entry.items() if k not in PAIR_FIELDS + ("max_new_tokens",)
                       and (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)))}
            for key, value in metrics.items():
                row[f"{key},none"] = "N/A" if value is None else value
            out["results"][task] = row
            out["versions"][task] = entry.get("lm_eval_config", {}).get("version") or 1.0
            out["n-samples"][task] = {"original": totals.get(name, entry.get("n")), "effective": entry.get("n")}
            out["higher_is_better"][task] = {k: HIGHER_IS_BETTER.get(k, True) for k in metrics if not k.endswith("_stderr")}
    return out


def metric_keys(prefix: str, per: dict[str, dict]) -> dict[str, float]:
    """{"eval/humaneval_plus/plus": 0.41, "eval/humaneval_plus/base": ..., "eval/gsm8k/accuracy": ...}."""
    out = {}
    for name, entry in per.items():
        for key, value in entry.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("n", "seconds"):
                out[f"{prefix}/{name}/{key}".replace("@", "_at_")] = float(value)  # MLflow rejects "@"
    return out


def write_local(out_dir: Path, data: dict) -> dict[str, Path]:
    """results.json, report.md and report.csv in ``out_dir``; returns their paths."""
    table = report.build(data)
    paths = {"results": out_dir / "results.json", "md": out_dir / "report.md", "csv": out_dir / "report.csv",
             "lm_eval": out_dir / "results_lm_eval.json"}
    write_atomic(paths["results"], json.dumps(data, indent=1))
    write_atomic(paths["lm_eval"], json.dumps(lm_eval_schema(data), indent=1))
    write_atomic(paths["md"], report.markdown(table))
    write_atomic(paths["csv"], report.csv_text(table))
    return paths



def log_mlflow(tracker, run_id: str | None, targets: list[Target], data: dict, paths: dict, step: int | None = None) -> None:
    """Metrics on each target's own run, the base model's on ``run_id``; the files and the table on ``run_id``.

    A checkpoint's evaluation (``step``) logs only its files, under ``eval/step_NNNNNN/`` on ``run_id``: member
    runs' ``eval/...`` metrics at a training step are in-training evaluation's curve points."""
    if step is not None:
        folder = f"{runlayout.EVAL_FOLDER}/{runlayout.step_folder(step)}"
        for key in ("results", "md", "csv", "lm_eval"):
            tracker.client.log_artifact(run_id, str(paths[key]), folder)
        return
    for t in targets:
        per = data["results"].get(t.label, {})
        if t.mlflow_run and per:
            # linked to the member's newest LoggedModel (its final checkpoint's, or its death's): the adapter scored
            model_id = tracker.get_run(t.mlflow_run).data.tags.get(runlayout.MODEL_ID)
            tracker.log_metrics(t.mlflow_run, metric_keys("eval", per), 0, model_id)
            tracker.set_tags(t.mlflow_run, {runlayout.EVALUATED: "true"})
        elif t.kind == BASE and per and run_id:
            tracker.log_metrics(run_id, metric_keys("eval_base", per), 0)
    if run_id is None:
        return
    table = report.build(data)
    header, rows = report.with_compute(table)
    tracker.log_table(run_id, [dict(zip(header, r)) for r in rows], runlayout.EVAL_TABLE)
    for key in ("results", "md", "csv", "lm_eval"):
        tracker.client.log_artifact(run_id, str(paths[key]), runlayout.EVAL_FOLDER)
    proto = data["config"].get("protocol") or {}
    tracker.set_tags(run_id, {runlayout.EVAL_DIR: str(Path(paths["results"]).parent),
                              # what the scores are comparable with, readable in MLflow's own UI
                              "populora.eval_protocol": str(proto.get("name")),
                              "populora.eval_limit": str(data["config"].get("limit") or "none")})


def load(tracker, run_id: str, step: int | None = None) -> dict:
    """The results.json of an evaluated run (its MLflow artifact, else the local eval dir); ``step``: of the
    evaluation of its checkpoint at that step."""
    try:
        return tracker.load_json(run_id, runlayout.eval_results_path(step))
    except Exception:  # noqa: BLE001 - no artifact: try the local eval dir the tag points at
        local = tracker.get_run(run_id).data.tags.get(runlayout.EVAL_DIR)
        if local and step is None and (Path(local) / "results.json").is_file():
            return json.loads((Path(local) / "results.json").read_text())
        raise
