"""``populora eval``: score a run's adapters (members, its baseline, the base model) on the benchmarks.

Each (adapter, benchmark) result is written atomically to ``<run_dir>/eval/<adapter>__<benchmark>.json`` and
skipped when it exists, so a killed evaluation resumes without redoing finished pairs. Scores go to each member's
MLflow child run as ``eval/<benchmark>/accuracy``; the whole table to the parent run (``eval/results.json``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from populora.evaluation import benchmarks, math_suite

BASE = "base"


@dataclass
class Target:
    label: str                 # member id, "B0@baseline", or "base"
    adapter_dir: str | None    # None = the bare base model
    mlflow_run: str | None     # where its scores are logged
    kind: str                  # member | baseline | base


def targets(tracker, run_id: str, members: str, baseline: str | None, include_base: bool) -> list[Target]:
    children = tracker.children(run_id)
    by_id = {c.data.tags.get("populora.member_id"): c for c in children}
    if members in ("alive", "all"):
        chosen = [m for m, c in by_id.items() if members == "all" or c.data.tags.get("populora.alive") == "true"]
    else:
        chosen = [m.strip() for m in members.split(",") if m.strip()]
        unknown = [m for m in chosen if m not in by_id]
        if unknown:
            raise benchmarks.DataError(f"unknown member(s) {unknown} in run {run_id}; valid: {', '.join(sorted(by_id))}")
    out = [Target(m, by_id[m].data.tags.get("populora.adapter_dir"), by_id[m].info.run_id, "member") for m in sorted(chosen)]
    baseline = baseline or tracker.get_run(run_id).data.tags.get("populora.baseline_run") or None
    if baseline:
        for c in tracker.children(baseline):
            out.append(Target(f"{c.data.tags.get('populora.member_id')}@baseline", c.data.tags.get("populora.adapter_dir"), c.info.run_id, "baseline"))
    if include_base:
        out.append(Target(BASE, None, None, "base"))
    return out


def _write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def evaluate_targets(backend, targets_: list[Target], names: list[str], data_dir: Path, out_dir: Path,
                     limit: int | None, max_new_tokens: int, progress=print) -> dict[str, dict]:
    """Scores per target label and benchmark; finished pairs are read back, not recomputed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scores: dict[str, dict] = {}
    for t in targets_:
        adapter = None
        for n in names:
            path = out_dir / f"{t.label}__{n}.json"
            if path.is_file():
                scores.setdefault(t.label, {})[n] = json.loads(path.read_text())
                progress(f"{t.label:16} {n:14} done earlier: {scores[t.label][n]['accuracy']:.3f}")
                continue
            if adapter is None and t.adapter_dir:
                adapter = _load(backend, t)
            result = math_suite.evaluate(backend, adapter, [n], data_dir, out_dir, limit, max_new_tokens)[n]
            result.update(target=t.label, kind=t.kind, limit=limit, max_new_tokens=max_new_tokens, decoding="greedy")
            _write_atomic(path, result)
            scores.setdefault(t.label, {})[n] = result
            progress(f"{t.label:16} {n:14} accuracy {result['accuracy']:.3f} (n={result['n']})")
        if adapter is not None:
            backend.remove_adapter(adapter)
    return scores


def _load(backend, t: Target) -> str:
    if not t.adapter_dir or not Path(t.adapter_dir, "adapter_config.json").is_file():
        raise benchmarks.DataError(f"{t.label}: adapter dir {t.adapter_dir!r} is missing (was the run finished?)")
    name = "eval_" + t.label.replace("@", "_")
    backend.add_adapter(name, from_dir=t.adapter_dir)
    return name


def log_scores(tracker, run_id: str, targets_: list[Target], scores: dict[str, dict]) -> None:
    for t in targets_:
        metrics = {f"eval/{n}/accuracy": s["accuracy"] for n, s in scores.get(t.label, {}).items()}
        if t.mlflow_run and metrics:
            tracker.log_metrics(t.mlflow_run, metrics, 0)
        elif t.kind == "base" and metrics:
            tracker.log_metrics(run_id, {f"eval/base/{k.split('/', 1)[1]}": v for k, v in metrics.items()}, 0)
    tracker.log_json(run_id, {"results": scores}, "eval/results.json")
