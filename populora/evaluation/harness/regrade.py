"""``populora eval --regrade``: score saved generations again with today's graders, without a model.

Results made before a grader was fixed (batched math graded by text match, LiveCodeBench compared with a
tolerance) are corrected from what each pair kept: ``samples/<target>/<benchmark>.jsonl`` (every completion, the
math gold answer, the EvalPlus solution). Each pair keeps the generation settings it was made with and records
``regraded`` (when, with which package versions); its metrics are replaced. A pair with no samples file is left
as it is and named.
"""

from __future__ import annotations

import json
import time

import numpy as np

from populora.evaluation.harness import benchmarks, evalplus_suite, livecodebench, math_grading
from populora.evaluation.statistics.stats import mean_stderr
from populora.platform.files import write_atomic


def _math(samples: list[dict], template: str) -> dict:
    verdicts = [math_grading.grade_verdict(s["completion"], str(s["target"]), template) for s in samples]
    for s, v in zip(samples, verdicts):
        s.update(correct=v.correct, grading_fallback=v.fallback)
    per = np.array([float(v.correct) for v in verdicts])
    return {"accuracy": float(per.mean()) if len(per) else 0.0, "accuracy_stderr": mean_stderr(per),
            "grading_fallback": float(np.mean([v.fallback for v in verdicts])) if verdicts else 0.0}


def _evalplus(runner, name: str, samples: list[dict]) -> dict:
    probs = evalplus_suite.problems(name, runner.data_dir, runner.limit)
    scored = evalplus_suite.score_samples(name, probs, samples, runner.data_dir, sandbox=runner._sandbox(name),
                                          protocol=runner.protocol)
    for s, st in zip([s for s in samples if s["task_id"] in probs], scored["statuses"]):
        s.update(base_status=st["base_status"], plus_status=st["plus_status"])
    return scored["metrics"]


def _lcb(runner, samples: list[dict]) -> dict:
    records = livecodebench.problems(runner.data_dir, runner.limit)
    by_problem: dict[int, list[dict]] = {}
    for s in samples:
        by_problem.setdefault(int(s["task_id"].split("/")[-1]), []).append(s)
    order = sorted(by_problem)
    scored = livecodebench.score([records[i] for i in order], [[s["completion"] for s in by_problem[i]] for i in order])
    for s, ok in zip([s for i in order for s in by_problem[i]], scored["verdicts"]):
        s["passed"] = ok
    return scored["metrics"]


def run(runner, targets, names: list[str]) -> dict[str, dict[str, dict]]:
    """{target: {benchmark: pair}} with every stored pair re-scored; pairs not found are reported and skipped."""
    scores: dict[str, dict[str, dict]] = {}
    for t in targets:
        for name in names:
            path = runner.pair_path(t, name)
            if not path.is_file():
                runner.log(f"{t.label:>14} | {benchmarks.BENCHMARKS[name].label:<28} no stored result: not regraded")
                continue
            pair = json.loads(path.read_text())
            samples_path = path.parents[2] / "samples" / path.parent.name / f"{name}.jsonl"
            if not samples_path.is_file():
                runner.log(f"{t.label:>14} | {benchmarks.BENCHMARKS[name].label:<28} no samples file: left as it was")
                scores.setdefault(t.label, {})[name] = pair
                continue
            samples = [json.loads(line) for line in samples_path.read_text().splitlines() if line.strip()]
            if name in evalplus_suite.DATASETS:
                metrics = _evalplus(runner, name, samples)
            elif name == livecodebench.NAME:
                metrics = _lcb(runner, samples)
            else:
                metrics = _math(samples, pair.get("config", {}).get("template", "chat"))
            old = pair["metrics"].get(pair["primary"])
            pair["metrics"].update(metrics)
            pair["score"] = pair["metrics"][pair["primary"]]
            pair["config"] = {**pair.get("config", {}), "regraded": {"date": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                                                    "versions": runner.packages}}
            write_atomic(samples_path, "".join(json.dumps(s) + "\n" for s in samples))
            write_atomic(path, json.dumps(pair, indent=1))
            runner.log(f"{t.label:>14} | {benchmarks.BENCHMARKS[name].label:<28} regraded: {old} -> {pair['score']:.3f}")
            scores.setdefault(t.label, {})[name] = pair
    if runner.sandbox is not None:
        runner.sandbox.close()
        runner.sandbox = None
    return scores
