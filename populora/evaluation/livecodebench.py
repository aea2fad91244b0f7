"""LiveCodeBench (public tests), problems 2024-08..2025-01, graded in the platform's sandbox.

Our copy has only the public tests (about 2.6 per problem, not LCB's hidden ones), so the score is more lenient
than the official one: it is labelled "LiveCodeBench (public tests)" wherever it is shown.

Two test styles, as in LCB's own runner: ``stdin`` (a program reads stdin, its stdout is compared line by line,
numbers with a tolerance) and ``functional`` (LeetCode style: ``Solution().<method>(*args)`` with one JSON
argument per input line, the return value compared as JSON).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np

from populora.evaluation import benchmarks
from populora.evaluation.generation import GenConfig, chat_prompt, complete_detail

NAME = "livecodebench"
LABEL = "LiveCodeBench (public tests)"
# LCB's own imports for generated code (lcb_runner/evaluation/testing_util.py), so "List" etc. resolve.
PRELUDE = ("from typing import *\nimport collections, heapq, math, itertools, bisect, functools, string, re, sys\n"
           "from collections import *\nfrom functools import *\nfrom itertools import *\nfrom heapq import *\n"
           "from bisect import *\nfrom math import *\nsys.setrecursionlimit(1 << 16)\n")
SYSTEM_STDIN = ("Read the inputs from stdin, solve the problem and write the answer to stdout. "
                "Enclose your code within delimiters as follows.\n```python\n# YOUR CODE HERE\n```")
SYSTEM_CALL = "Use the following starter code and enclose your code within delimiters.\n```python\n{starter}\n```"
FUNCTIONAL_HARNESS = """
import json as _json, sys as _sys
_args = [_json.loads(_l) for _l in _sys.stdin.read().split("\\n") if _l.strip()]
_out = getattr(Solution(), {method!r})(*_args)
print(_json.dumps(_out))
"""


def tests(record: dict) -> list[dict]:
    raw = record["tests"]
    return raw if isinstance(raw, list) else ast.literal_eval(raw)


def problems(data_dir: Path, limit: int | None = None) -> list[dict]:
    return benchmarks.read_records(data_dir, NAME, limit)


def prompt(backend, record: dict) -> str:
    """LCB's code-generation prompt: the problem, then the stdin or the starter-code instruction."""
    starter = record.get("starter_code") or ""
    how = SYSTEM_CALL.format(starter=starter.rstrip()) if starter.strip() else SYSTEM_STDIN
    user = f"### Question:\n{record['problem'].strip()}\n\n### Format: {how}\n\n### Answer: (use the provided format with backticks)"
    return chat_prompt(backend, user, prefill="```python\n")


def extract_code(completion: str) -> str:
    """The program in a completion generated after the prefilled ```python fence: everything up to the closing
    fence (or the end, when the budget ran out). '' when there is nothing, which scores 0."""
    end = completion.find("```")
    return (completion if end < 0 else completion[:end]).strip()


def method_name(starter: str) -> str | None:
    names = re.findall(r"def\s+(\w+)\s*\(", starter)
    return names[-1] if names else None


def same_output(got: str, want: str) -> bool:
    """LCB's stdin comparison: line by line after stripping, tokens equal or numerically close (1e-6)."""
    g = [ln.strip() for ln in got.strip().splitlines()]
    w = [ln.strip() for ln in want.strip().splitlines()]
    if g == w:
        return True
    if len(g) != len(w):
        return False
    for a, b in zip(g, w):
        ta, tb = a.split(), b.split()
        if ta == tb:
            continue
        try:
            if len(ta) != len(tb) or not np.allclose([float(x) for x in ta], [float(x) for x in tb], rtol=0, atol=1e-6):
                return False
        except ValueError:
            return False
    return True


def same_value(got: str, want: str) -> bool:
    """LCB's functional comparison: the printed JSON value equals the expected one (tuples read as lists)."""
    try:
        return json.loads(got.strip().splitlines()[-1]) == json.loads(want)
    except (ValueError, IndexError):
        return False


def programs(record: dict, code: str) -> list[tuple[str, str, str, str]]:
    """(program, stdin, expected, style) for each public test; [] when the code cannot be run at all."""
    out = []
    method = method_name(record.get("starter_code") or "")
    for t in tests(record):
        if t["testtype"] == "functional":
            if method is None:
                continue
            out.append((PRELUDE + code + FUNCTIONAL_HARNESS.format(method=method), t["input"], t["output"], "functional"))
        else:
            out.append((PRELUDE + code, t["input"], t["output"], "stdin"))
    return out


def grade(sandbox, record: dict, completion: str, timeout_s: float = 6.0) -> bool:
    """True iff the extracted program passes every public test of ``record`` in the sandbox."""
    code = extract_code(completion)
    runs = programs(record, code) if code else []
    if not runs:
        return False
    for program, stdin, want, style in runs:  # stop at the first failure, as LCB does
        r = sandbox.run(program, stdin=stdin, timeout_s=timeout_s)
        ok = r.status == "ok" and (same_value(r.stdout, want) if style == "functional" else same_output(r.stdout, want))
        if not ok:
            return False
    return True


def score(records: list[dict], completions: list[list[str]], sandbox=None, timeout_s: float = 6.0) -> dict:
    """pass@1 (mean over n samples per problem) with per-sample verdicts."""
    from concurrent.futures import ThreadPoolExecutor

    from populora.platform.sandbox import get_sandbox

    sb = sandbox or get_sandbox()
    jobs = [(i, c) for i, cs in enumerate(completions) for c in cs]
    with ThreadPoolExecutor(max(1, sb.n_workers)) as pool:  # the sandbox is thread-safe; workers run in parallel
        verdicts = list(pool.map(lambda job: grade(sb, records[job[0]], job[1], timeout_s), jobs))
    per = np.zeros(len(records))
    for (i, _), ok in zip(jobs, verdicts):
        per[i] += ok / len(completions[i])
    stderr = float(per.std(ddof=1) / np.sqrt(len(per))) if len(per) > 1 else None
    return {"metrics": {"pass_at_1": float(per.mean()) if len(per) else 0.0, "pass_at_1_stderr": stderr},
            "verdicts": verdicts}


def evaluate(backend, adapter: str | None, data_dir: Path, gen: GenConfig, limit: int | None, progress=None,
             sandbox=None) -> dict:
    from populora.evaluation.evalplus_suite import truncated_rate

    records = problems(data_dir, limit)
    outs, cut = complete_detail(backend, adapter, [prompt(backend, r) for r in records], gen, progress=progress)
    scored = score(records, outs, sandbox)
    flat = [(i, c, k) for i, (cs, ks) in enumerate(zip(outs, cut)) for c, k in zip(cs, ks)]
    samples = [{"task_id": f"lcb/{i}", "completion": c, "passed": ok, "truncated": k}
               for (i, c, k), ok in zip(flat, scored["verdicts"])]
    metrics = {**scored["metrics"], "truncated_rate": truncated_rate(samples)}
    return {"metrics": metrics, "primary": "pass_at_1", "n": len(records), "samples": samples}
