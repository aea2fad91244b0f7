"""HumanEval+ and MBPP+ through EvalPlus: its prompts, its sanitiser and its own evaluator (base and plus tests).

EvalPlus reads HUMANEVAL_OVERRIDE_PATH / MBPP_OVERRIDE_PATH when ``evalplus.data`` is first imported, so
``use_local_data`` sets them before that import (and re-points the module constants if it already happened):
nothing is downloaded, the files come from our checked data dir.

Scoring follows ``evalplus.evaluate`` exactly: what ``check_correctness`` does per sample, "base" = passes the
original tests, "plus" = passes the original and the extra tests, pass@k with EvalPlus's unbiased estimator.
The difference: a solution runs in OUR sandbox (chroot, namespaces, seccomp; see docs/sandbox.md), not in a
``multiprocessing`` child guarded only by EvalPlus's ``reliability_guard``. Inside the sandboxed child, EvalPlus's
own ``unsafe_execute`` runs the inputs and compares the outputs (its oracles, tolerances and per-input time limits,
its guard too), and the trainer turns the child's (stat, progress, details) into a status as ``untrusted_check``
does, so statuses stay EvalPlus's. As in EvalPlus, the verdict is computed next to the solution: a solution
written to forge it could (it cannot reach anything outside its sandbox); benchmark scores are not an RL reward.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import pickle
import sys
import threading
from pathlib import Path

import numpy as np

from populora.evaluation.harness import benchmarks
from populora.evaluation.harness.generation import GenConfig, chat_prompt, complete_detail, ensure_offline, truncated_rate
from populora.evaluation.statistics.stats import mean_stderr
from populora.platform.sandbox import ExecRequest, Sandbox
from populora.platform.sandbox.values import parse_literal

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
    """EvalPlus's problems of ``name`` (file order), the first ``limit`` of them when given (read-only: shared).

    Read once per process and file version (``benchmarks.per_file_version``): EvalPlus parses the whole file at
    every call (1.7 s of CPU for HumanEval+), and an evaluation asks twice per target (its problems, then the ground
    truth's key). The loader runs under that helper's lock, which also keeps ``use_local_data``'s environment and
    module constants from interleaving between threads."""

    def load() -> dict[str, dict]:
        use_local_data(data_dir)
        from evalplus.data import get_human_eval_plus, get_mbpp_plus

        return get_human_eval_plus() if DATASETS[name][0] == "humaneval" else get_mbpp_plus()

    probs = benchmarks.per_file_version(data_dir / benchmarks.BENCHMARKS[name].file, f"evalplus:{name}", load)
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
    # One thread at a time, once per process: batched evaluation asks from a thread per target, and
    # redirect_stdout swaps the process-wide sys.stdout; two overlapping swaps restore in the wrong order and leave
    # stdout pointing at stderr for good (the report that follows then prints nowhere the caller reads).
    with _GROUND_TRUTH_LOCK:
        if key not in _GROUND_TRUTH:
            with contextlib.redirect_stdout(sys.stderr):  # EvalPlus prints progress; our stdout is for tables and JSON
                _GROUND_TRUTH[key] = get_groundtruth(probs, key, special)
        return _GROUND_TRUTH[key]


_GROUND_TRUTH: dict[str, dict] = {}
_GROUND_TRUTH_LOCK = threading.Lock()


def time_limits(protocol=None) -> tuple[float, float]:
    """EvalPlus's per-test time limit is max(min_time_limit, gt_time_limit_factor x the canonical solution's
    time): the protocol's (azr: 10 s and 8x, as AZR runs EvalPlus; quick: EvalPlus's defaults, 1 s and 4x), else
    EvalPlus's defaults. POPULORA_EVALPLUS_MIN_TIME_LIMIT / POPULORA_EVALPLUS_TIME_FACTOR override both (they are
    recorded with the results like any other setting)."""
    from evalplus.eval import DEFAULT_GT_TIME_LIMIT_FACTOR, DEFAULT_MIN_TIME_LIMIT

    default = ((protocol.evalplus_min_time_limit, protocol.evalplus_time_factor) if protocol is not None
               else (DEFAULT_MIN_TIME_LIMIT, DEFAULT_GT_TIME_LIMIT_FACTOR))
    try:
        return (float(os.environ.get("POPULORA_EVALPLUS_MIN_TIME_LIMIT", default[0])),
                float(os.environ.get("POPULORA_EVALPLUS_TIME_FACTOR", default[1])))
    except ValueError as err:
        raise ValueError(f"POPULORA_EVALPLUS_MIN_TIME_LIMIT / POPULORA_EVALPLUS_TIME_FACTOR must be numbers: {err}") from err


def make_sandbox(parallel: int | None = None):
    """The sandbox EvalPlus solutions run in: a pool of ``parallel`` workers (default: half the CPUs). One per
    evaluation, shared by every target of a batched run (a pool per target would oversubscribe the CPU under
    wall-clock time limits, and correct solutions would time out differently per target)."""
    return Sandbox(workers=parallel or max(1, (os.cpu_count() or 2) // 2), memory_mb=memory_mb(),
                   max_output_bytes=4096, preload=PRELOAD)


# What the sandbox workers import for the harness and for solutions (a chrooted program can import nothing
# else): EvalPlus's evaluator and what its guard touches, numpy, and the stdlib modules solutions use.
PRELOAD = ("numpy", "evalplus.eval", "evalplus.eval.utils", "evalplus.eval._special_oracle", "subprocess",
           "shutil", "faulthandler", "platform", "tempfile", "builtins", "pickle", "base64", "hashlib", "time",
           "datetime", "calendar", "queue", "array", "cmath")

# Runs in the sandboxed child. EvalPlus's unsafe_execute, unchanged, with three of its helpers adapted: the
# sandbox already gives an empty scratch cwd (create_tempdir), and already set the rlimits (EvalPlus's memory
# limit among them, measured by the trainer: the child has no /proc), which seccomp forbids changing again (so
# the guard's setrlimit calls become no-ops; everything else of the guard applies).
HARNESS = """
import base64, contextlib, pickle, resource, sys, types
import evalplus.eval as ev
job = pickle.loads(base64.b64decode(sys.stdin.read()))
guard = ev.reliability_guard
def sandboxed_guard(maximum_memory_bytes=None):
    keep, resource.setrlimit = resource.setrlimit, (lambda *a: None)
    try:
        guard(maximum_memory_bytes)
    finally:
        resource.setrlimit = keep
ev.create_tempdir, ev.reliability_guard = contextlib.nullcontext, sandboxed_guard
ev.query_maximum_memory_bytes = lambda: job["max_memory"]
stat, progress, details = types.SimpleNamespace(value=ev._UNKNOWN), types.SimpleNamespace(value=0), [False] * len(job["inputs"])
ev.unsafe_execute(job["dataset"], job["entry_point"], job["solution"], job["inputs"], job["expected"],
                  job["time_limits"], job["atol"], True, stat, details, progress)
outcome = [stat.value, progress.value, [bool(d) for d in details[:progress.value]]]
def f():
    return outcome
"""
_UNPICKLE_S = 0.5  # the child reads its inputs itself (EvalPlus's child gets them by fork): a little more wall time


def _request(dataset: str, problem: dict, solution: str, which: str, expected: dict, limits: dict):
    """The sandbox request of one ``untrusted_check`` (``which``: "base" or "plus"), and its number of inputs."""
    inputs = problem[f"{which}_input"]
    time_limits = [max(limits["min_time_limit"], limits["gt_time_limit_factor"] * t)
                   for t in expected[f"{which}_time"]]
    timeout = min(float(os.getenv("EVALPLUS_TIMEOUT_PER_TASK", 60)), sum(time_limits)) + 1
    job = {"dataset": dataset, "entry_point": problem["entry_point"], "solution": solution, "inputs": inputs,
           "expected": expected[which], "time_limits": time_limits, "atol": problem["atol"],
           "max_memory": _max_memory()}
    stdin = base64.b64encode(pickle.dumps(job)).decode()
    return ExecRequest(HARNESS, stdin=stdin, call="", timeout_s=timeout + 1 + _UNPICKLE_S), len(inputs)


def _status(result, n_inputs: int) -> str:
    """``untrusted_check``'s status from the child's outcome: unknown (the child died, hung or never reported) is
    a timeout; a pass needs a passing detail for every input."""
    from evalplus.eval import _mapping, FAIL, PASS, TIMEOUT

    try:
        stat, progress, details = parse_literal(result.value) if result.status == "ok" else (None, 0, [])
    except (ValueError, TypeError, SyntaxError):
        stat, details = None, []
    status = _mapping.get(stat) or TIMEOUT
    if status == PASS and (len(details) != n_inputs or not all(details)):
        status = FAIL
    return status


def _max_memory() -> int | None:
    """EvalPlus's memory limit in bytes (EVALPLUS_MAX_MEMORY_BYTES, default 4 GB, capped at the machine's RAM)."""
    from evalplus.eval import query_maximum_memory_bytes

    return query_maximum_memory_bytes()


def memory_mb() -> int:
    """The sandbox's address-space limit for solutions: EvalPlus's, in MB (none: 1 TB)."""
    limit = _max_memory()
    return (limit >> 20) if limit else 1 << 20


def score_samples(name: str, probs: dict[str, dict], samples: list[dict], data_dir: Path,
                  parallel: int | None = None, min_time_limit: float | None = None,
                  gt_time_limit_factor: float | None = None, sandbox=None, protocol=None) -> dict:
    """Statuses per sample and pass@k (base, plus) for samples [{task_id, solution}], as evalplus.evaluate, with
    every solution run in the sandbox (``sandbox``, or a pool of ``parallel`` workers made for the call).
    Time limits: :func:`time_limits` unless given."""
    from evalplus.eval import PASS, estimate_pass_at_k

    default_min, default_factor = time_limits(protocol)
    limits = {"min_time_limit": default_min if min_time_limit is None else min_time_limit,
              "gt_time_limit_factor": default_factor if gt_time_limit_factor is None else gt_time_limit_factor}

    dataset = DATASETS[name][0]
    expected = expected_outputs(name, probs, data_dir)
    work = [s for s in samples if s["task_id"] in probs]
    jobs = [_request(dataset, probs[s["task_id"]], s["solution"], which, expected[s["task_id"]], limits)
            for s in work for which in ("base", "plus")]
    own = sandbox is None
    sb = sandbox or make_sandbox(parallel)
    try:
        results = sb.execute_many([req for req, _ in jobs])
    finally:
        if own:
            sb.close()
    codes = [_status(r, n) for r, (_, n) in zip(results, jobs)]
    statuses = [{"task_id": s["task_id"], "base_status": codes[2 * i], "plus_status": codes[2 * i + 1]}
                for i, s in enumerate(work)]
    return {"metrics": _pass_at_k(probs, statuses, PASS, estimate_pass_at_k), "statuses": statuses, "time_limits": limits}


def _pass_at_k(probs: dict, statuses: list[dict], PASS: str, estimate_pass_at_k) -> dict:
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
        metrics[f"{key}_stderr"] = mean_stderr(per)
    return metrics


def evaluate(backend, adapter: str | None, name: str, data_dir: Path, gen: GenConfig, limit: int | None,
             progress=None, protocol=None, sandbox=None) -> dict:
    """Generate with ``adapter`` and score with EvalPlus; returns metrics (base, plus = pass@1, the share of
    truncated completions) and samples. ``sandbox``: a shared one (see :func:`make_sandbox`), else one for the call."""
    probs = problems(name, data_dir, limit)
    prompts = [prompt(backend, p) for p in probs.values()]
    outs, cut = complete_detail(backend, adapter, prompts, gen, progress=progress)
    samples = [{"task_id": t, "completion": c, "solution": solution(probs[t], c), "truncated": k}
               for t, cs, ks in zip(probs, outs, cut) for c, k in zip(cs, ks)]
    scored = score_samples(name, probs, samples, data_dir, sandbox=sandbox, protocol=protocol)
    for s, st in zip(samples, scored["statuses"]):
        s.update(base_status=st["base_status"], plus_status=st["plus_status"])
    metrics = {**scored["metrics"], "truncated_rate": truncated_rate(samples)}
    return {"metrics": metrics, "primary": "plus", "n": len(probs), "samples": samples,
            "time_limits": scored["time_limits"]}

