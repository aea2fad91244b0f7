"""HumanEval+ and MBPP+ through EvalPlus: its prompts, its sanitiser and its own evaluator (base and plus tests).

EvalPlus reads HUMANEVAL_OVERRIDE_PATH / MBPP_OVERRIDE_PATH when ``evalplus.data`` is first imported, so
``use_local_data`` sets them before that import (and re-points the module constants if it already happened):
nothing is downloaded, the files come from our checked data dir.

Scoring follows ``evalplus.evaluate`` exactly: ``check_correctness`` per sample, "base" = passes the original
tests, "plus" = passes the original and the extra tests, pass@k with EvalPlus's unbiased estimator.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from populora.evaluation import benchmarks
from populora.evaluation.generation import GenConfig, chat_prompt, complete, ensure_offline

DATASETS = {"humaneval_plus": ("humaneval", "HUMANEVAL_OVERRIDE_PATH"), "mbpp_plus": ("mbpp", "MBPP_OVERRIDE_PATH")}
# EvalPlus's own instruct-model prompt (evalplus/codegen.py), so scores are comparable with its leaderboard.
INSTRUCTION = "Please provide a self-contained Python script that solves the following problem in a markdown code block:"
RESPONSE = "Below is a Python script with a self-contained function that solves the problem and passes corresponding tests:"


def use_local_data(data_dir: Path) -> None:
    """Point EvalPlus at our files (never its download cache)."""
    ensure_offline()
    paths = {env: str((data_dir / benchmarks.BENCHMARKS[name].file).resolve()) for name, (_, env) in DATASETS.items()}
    os.environ.update(paths)
    import evalplus.data.humaneval as he
    import evalplus.data.mbpp as mb

    # the constants were read from the environment at import time; a second data dir in one process needs this
    he.HUMANEVAL_OVERRIDE_PATH = paths["HUMANEVAL_OVERRIDE_PATH"]
    mb.MBPP_OVERRIDE_PATH = paths["MBPP_OVERRIDE_PATH"]


def problems(name: str, data_dir: Path, limit: int | None = None) -> dict[str, dict]:
    """EvalPlus's problems of ``name`` (file order), the first ``limit`` of them when given."""
    use_local_data(data_dir)
    from evalplus.data import get_human_eval_plus, get_mbpp_plus

    probs = get_human_eval_plus() if DATASETS[name][0] == "humaneval" else get_mbpp_plus()
    ids = list(probs)[:limit] if limit else list(probs)
    return {t: probs[t] for t in ids}


def prompt(backend, problem: dict) -> str:
    """EvalPlus's instruct prompt in our chat template, the response prefix prefilled up to the code fence."""
    user = f"{INSTRUCTION}\n```\n{problem['prompt'].strip()}\n```\n"
    return chat_prompt(backend, user, prefill=f"{RESPONSE}\n```python\n")


def solution(problem: dict, completion: str) -> str:
    """The code EvalPlus would test: its sanitiser on the prefilled fence + the completion ('' if no code)."""
    from evalplus.sanitize import sanitize

    try:
        return sanitize("```python\n" + completion, problem["entry_point"])
    except Exception:  # noqa: BLE001 - unparsable junk from a weak model is a failed sample, not a crash
        return ""


def expected_outputs(name: str, probs: dict[str, dict], data_dir: Path) -> dict[str, dict]:
    """Ground-truth outputs of the canonical solutions, cached by EvalPlus (keyed by dataset hash; a slice
    gets its own key so it never poisons the full dataset's cache entry)."""
    from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS
    from evalplus.evaluate import get_groundtruth

    path = data_dir / benchmarks.BENCHMARKS[name].file
    key = hashlib.md5(path.read_bytes()).hexdigest()  # EvalPlus's own dataset hash
    full = problems(name, data_dir)
    if list(probs) != list(full):
        key += "-slice-" + hashlib.md5(",".join(probs).encode()).hexdigest()[:12]
    special = MBPP_OUTPUT_NOT_NONE_TASKS if DATASETS[name][0] == "mbpp" else []
    with contextlib.redirect_stdout(sys.stderr):  # EvalPlus prints progress; our stdout is for tables and JSON
        return get_groundtruth(probs, key, special)


def time_limits() -> tuple[float, float]:
    """EvalPlus's per-test time limit is max(min_time_limit, gt_time_limit_factor x the canonical solution's
    time): defaults 1 s and 4x (its own). On a loaded machine a correct solution can hit it: raise both with
    POPULORA_EVALPLUS_MIN_TIME_LIMIT / POPULORA_EVALPLUS_TIME_FACTOR (evalplus.evaluate's --min_time_limit and
    --gt_time_limit_factor), and use the same values for every adapter you compare."""
    from evalplus.eval import DEFAULT_GT_TIME_LIMIT_FACTOR, DEFAULT_MIN_TIME_LIMIT

    try:
        return (float(os.environ.get("POPULORA_EVALPLUS_MIN_TIME_LIMIT", DEFAULT_MIN_TIME_LIMIT)),
                float(os.environ.get("POPULORA_EVALPLUS_TIME_FACTOR", DEFAULT_GT_TIME_LIMIT_FACTOR)))
    except ValueError as err:
        raise ValueError(f"POPULORA_EVALPLUS_MIN_TIME_LIMIT / POPULORA_EVALPLUS_TIME_FACTOR must be numbers: {err}") from err


def score_samples(name: str, probs: dict[str, dict], samples: list[dict], data_dir: Path,
                  parallel: int | None = None, min_time_limit: float | None = None,
                  gt_time_limit_factor: float | None = None) -> dict:
    """Statuses per sample and pass@k (base, plus) for samples [{task_id, solution}], as evalplus.evaluate.
    Time limits: :func:`time_limits` unless given."""
    from evalplus.eval import PASS, estimate_pass_at_k
    from evalplus.evaluate import check_correctness

    default_min, default_factor = time_limits()
    limits = {"min_time_limit": default_min if min_time_limit is None else min_time_limit,
              "gt_time_limit_factor": default_factor if gt_time_limit_factor is None else gt_time_limit_factor}

    dataset = DATASETS[name][0]
    expected = expected_outputs(name, probs, data_dir)
    work = [s for s in samples if s["task_id"] in probs]

    def check(s):  # each check runs the solution in its own EvalPlus child process; threads only wait
        r = check_correctness(dataset, 0, probs[s["task_id"]], s["solution"], expected[s["task_id"]], fast_check=True,
                              **limits)
        return {"task_id": s["task_id"], "base_status": r["base"][0], "plus_status": r["plus"][0]}

    with ThreadPoolExecutor(parallel or max(1, (os.cpu_count() or 2) // 2)) as pool:
        statuses = list(pool.map(check, work))
    per_task: dict[str, list[dict]] = {t: [] for t in probs}
    for st in statuses:
        per_task[st["task_id"]].append(st)
    total = np.array([len(v) for v in per_task.values()])
    base = np.array([sum(r["base_status"] == PASS for r in v) for v in per_task.values()])
    plus = np.array([sum(r["base_status"] == r["plus_status"] == PASS for r in v) for v in per_task.values()])
    metrics = {}
    for k in (1, 10, 100):
        if total.min() >= k:
            suffix = "" if k == 1 else f"_pass_at_{k}"  # MLflow metric names allow no "@"
            metrics["base" + suffix] = float(estimate_pass_at_k(total, base, k).mean())
            metrics["plus" + suffix] = float(estimate_pass_at_k(total, plus, k).mean())
    for key in ("base", "plus"):  # binomial stderr of the per-task pass@1, as lm-eval reports for a mean
        per = (base if key == "base" else plus) / np.maximum(total, 1)
        metrics[f"{key}_stderr"] = float(per.std(ddof=1) / np.sqrt(len(per))) if len(per) > 1 else None
    return {"metrics": metrics, "statuses": statuses}


def evaluate(backend, adapter: str | None, name: str, data_dir: Path, gen: GenConfig, limit: int | None,
             progress=None) -> dict:
    """Generate with ``adapter`` and score with EvalPlus; returns metrics (base, plus = pass@1) and samples."""
    probs = problems(name, data_dir, limit)
    prompts = [prompt(backend, p) for p in probs.values()]
    outs = complete(backend, adapter, prompts, gen, progress=progress)
    samples = [{"task_id": t, "completion": c, "solution": solution(probs[t], c)}
               for t, cs in zip(probs, outs) for c in cs]
    scored = score_samples(name, probs, samples, data_dir)
    for s, st in zip(samples, scored["statuses"]):
        s.update(base_status=st["base_status"], plus_status=st["plus_status"])
    return {"metrics": scored["metrics"], "primary": "plus", "n": len(probs), "samples": samples}
