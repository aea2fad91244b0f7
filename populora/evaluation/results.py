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

from populora.evaluation import benchmarks, report
from populora.evaluation.runner import write_atomic
from populora.evaluation.targets import BASE, Target
from populora.platform import runlayout

PAIR_FIELDS = ("alias", "metrics", "primary", "score", "n", "seconds", "samples_file")


def build(targets: list[Target], scores: dict[str, dict[str, dict]], config: dict) -> dict:
    results = {}
    for t in targets:
        per = {}
        for name, r in scores.get(t.label, {}).items():
            entry = {k: r[k] for k in PAIR_FIELDS if k in r}
            entry.update(entry.pop("metrics"))  # flat metric keys next to their _stderr twins, as lm-eval does
            per[name] = entry
        results[t.label] = per
    names = list(dict.fromkeys(n for per in scores.values() for n in per))
    configs = {n: {"alias": benchmarks.BENCHMARKS[n].label, "group": benchmarks.BENCHMARKS[n].group,
                   "file": benchmarks.BENCHMARKS[n].file} for n in names}
    return {"results": results, "configs": configs, "config": config, "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "targets": {t.label: {"kind": t.kind, "mlflow_run": t.mlflow_run, "adapter_dir": t.adapter_dir, **t.info}
                        for t in targets}}


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
    paths = {"results": out_dir / "results.json", "md": out_dir / "report.md", "csv": out_dir / "report.csv"}
    write_atomic(paths["results"], json.dumps(data, indent=1))
    write_atomic(paths["md"], report.markdown(table))
    write_atomic(paths["csv"], report.csv_text(table))
    return paths



def log_mlflow(tracker, run_id: str | None, targets: list[Target], data: dict, paths: dict) -> None:
    """Metrics on each target's own run, the base model's on ``run_id``; the files and the table on ``run_id``."""
    for t in targets:
        per = data["results"].get(t.label, {})
        if t.mlflow_run and per:
            tracker.log_metrics(t.mlflow_run, metric_keys("eval", per), 0)
            tracker.set_tags(t.mlflow_run, {runlayout.EVALUATED: "true"})
        elif t.kind == BASE and per and run_id:
            tracker.log_metrics(run_id, metric_keys("eval_base", per), 0)
    if run_id is None:
        return
    table = report.build(data)
    tracker.log_table(run_id, [dict(zip(table.header, r)) for r in table.rows], runlayout.EVAL_TABLE)
    for key in ("results", "md", "csv"):
        tracker.client.log_artifact(run_id, str(paths[key]), runlayout.EVAL_FOLDER)
    tracker.set_tags(run_id, {runlayout.EVAL_DIR: str(Path(paths["results"]).parent)})


def load(tracker, run_id: str) -> dict:
    """The results.json of an evaluated run (its MLflow artifact, else the local eval dir)."""
    try:
        return tracker.load_json(run_id, runlayout.EVAL_RESULTS)
    except Exception:  # noqa: BLE001 - no artifact: try the local eval dir the tag points at
        local = tracker.get_run(run_id).data.tags.get(runlayout.EVAL_DIR)
        if local and (Path(local) / "results.json").is_file():
            return json.loads((Path(local) / "results.json").read_text())
        raise
