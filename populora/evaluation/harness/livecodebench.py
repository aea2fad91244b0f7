"""LiveCodeBench 2408-2501 (public tests): problems 2024-08..2025-01, graded in the platform's sandbox as LCB grades.

Our copy has only the public tests (about 2.6 per problem, not LCB's hidden ones), so the score is more lenient
than the official one; AZR evaluates release_v5 (880 problems, 2023-05..2025-01, public and hidden tests). It is
labelled "LiveCodeBench 2408-2501 (public tests)" (``benchmarks.BENCHMARKS``) wherever it is shown.

Grading follows LCB's ``lcb_runner/evaluation/testing_util.py`` (LiveCodeBench/LiveCodeBench @28fef95, read for
issue 23): the same import prelude (``import_string``) before the program, and its two test styles:
``stdin`` (``grade_stdio``: the program reads stdin; its stdout and the expected output are compared line by line
after stripping, each line equal as a string or else its whitespace-separated tokens equal as ``Decimal``
exactly, with no tolerance) and ``functional`` (``grade_call_based``: LeetCode style, ``Solution().<method>(*args)``
with one JSON argument per input line, a tuple result read as a list, compared with ``==`` to the JSON-decoded
expected value, inside the program as LCB does). LCB runs the stdin program wrapped in a function with a mocked
stdin; we run it as ``__main__`` with a real stdin (the same effect as LCB stripping ``if __name__ == ...``).
"""

from __future__ import annotations

import ast
import re
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import numpy as np

from populora.evaluation.harness import benchmarks
from populora.evaluation.harness.generation import GenConfig, chat_prompt, complete_detail, truncated_rate
from populora.evaluation.statistics.stats import mean_stderr
from populora.platform.sandbox import get_sandbox

NAME = "livecodebench"
LABEL = benchmarks.BENCHMARKS[NAME].label
# LCB's ``import_string`` (testing_util.py), line for line, so code that uses deepcopy, Counter, List, ... without
# importing them runs as it does under LCB. Left out: "from datetime import *" and "import datetime", the only
# ones the sandbox cannot import: its child is chrooted into an empty dir, so only the modules the worker
# pre-imports resolve (``populora/platform/sandbox/worker.py``, PRELOAD), and datetime is not among them. A
# program that uses datetime (or timedelta) without importing it fails here as one that imports it would.
PRELUDE = ("from string import *\nfrom re import *\nfrom collections import *\nfrom heapq import *\n"
           "from bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\nfrom statistics import *\n"
           "from itertools import *\nfrom functools import *\nfrom operator import *\nfrom io import *\nfrom sys import *\n"
           "from json import *\nfrom builtins import *\nfrom typing import *\nimport string\nimport re\nimport collections\n"
           "import heapq\nimport bisect\nimport copy\nimport math\nimport random\nimport statistics\nimport itertools\n"
           "import functools\nimport operator\nimport io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n")
SYSTEM_STDIN = ("Read the inputs from stdin, solve the problem and write the answer to stdout. "
                "Enclose your code within delimiters as follows.\n```python\n# YOUR CODE HERE\n```")
SYSTEM_CALL = "Use the following starter code and enclose your code within delimiters.\n```python\n{starter}\n```"
VERDICT = "__populora_lcb_verdict__"  # the functional harness's last line: VERDICT True|False
# grade_call_based: inputs = [json.loads(line) for line in input.split("\n")]; a tuple result becomes a list;
# passed = prediction == json.loads(output). The comparison runs in the program, so it is Python's == on the
# returned value itself (a dict with int keys does not equal the JSON's string keys, as in LCB).
FUNCTIONAL_HARNESS = """
import json as _json, sys as _sys
_args = [_json.loads(_l) for _l in _sys.stdin.read().split("\\n")]
_out = {function}(*_args)
if isinstance(_out, tuple):
    _out = list(_out)
print("\\n{verdict}", _out == _json.loads({expected!r}))
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


def stripped_lines(text: str) -> list[str]:
    """LCB's ``get_stripped_lines``: strip the whole text, split on newlines, strip each line.

    >>> stripped_lines(" 1 2 \\r\\n3\\n\\n")
    ['1 2', '3']
    """
    return [line.strip() for line in text.strip().split("\n")]


def decimals(line: str) -> list[Decimal] | None:
    """LCB's ``convert_line_to_decimals``: every whitespace-separated token as a Decimal; None if one is not a
    number."""
    try:
        return [Decimal(token) for token in line.split()]
    except ArithmeticError:  # decimal.InvalidOperation: not a number
        return None


def same_output(got: str, want: str) -> bool:
    """LCB's stdin comparison (``grade_stdio``): the same number of stripped lines, each equal as a string or else
    its tokens equal as Decimals, exactly: "1.0" equals "1" and "1e3" equals "1000", but "0.3333333" is not
    "0.33333333", and integers above 2**53 that differ stay different (LCB's comment: np.isclose would call
    50000000000000000 and 50000000000000001 equal).

    >>> same_output("1.0  2\\n", "1 2"), same_output("0.3333333", "0.33333333")
    (True, False)
    >>> same_output("9007199254740993", "9007199254740992")
    False
    """
    g, w = stripped_lines(got), stripped_lines(want)
    if len(g) != len(w):
        return False
    for a, b in zip(g, w):
        if a == b:
            continue
        da, db = decimals(a), decimals(b)
        try:
            if da is None or db is None or da != db:
                return False
        except ArithmeticError:  # a signalling NaN cannot be compared (LCB would raise): not the answer
            return False
    return True


def functional_passed(stdout: str) -> bool:
    """The functional harness's verdict: its last line says whether the return value == the expected one."""
    lines = [line for line in stdout.strip().split("\n") if line.strip()]
    return bool(lines) and lines[-1].strip() == f"{VERDICT} True"


def programs(record: dict, code: str) -> list[tuple[str, str, str, str]]:
    """(program, stdin, expected, style) for each public test; [] when the code cannot be run at all."""
    out = []
    method = method_name(record.get("starter_code") or "")
    for t in tests(record):
        if t["testtype"] == "functional":
            if method is None:
                continue
            # as LCB's compile_code: an instance of Solution if the code defines one, else the module's function
            function = f"Solution().{method}" if "class Solution" in code else f"globals()[{method!r}]"
            harness = FUNCTIONAL_HARNESS.format(function=function, verdict=VERDICT, expected=t["output"])
            out.append((PRELUDE + code + harness, t["input"], t["output"], "functional"))
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
        ok = r.status == "ok" and (functional_passed(r.stdout) if style == "functional" else same_output(r.stdout, want))
        if not ok:
            return False
    return True


def score(records: list[dict], completions: list[list[str]], sandbox=None, timeout_s: float = 6.0) -> dict:
    """pass@1 (mean over n samples per problem) with per-sample verdicts."""
    sb = sandbox or get_sandbox()
    jobs = [(i, c) for i, cs in enumerate(completions) for c in cs]
    with ThreadPoolExecutor(max(1, sb.n_workers)) as pool:  # the sandbox is thread-safe; workers run in parallel
        verdicts = list(pool.map(lambda job: grade(sb, records[job[0]], job[1], timeout_s), jobs))
    per = np.zeros(len(records))
    for (i, _), ok in zip(jobs, verdicts):
        per[i] += ok / len(completions[i])
    return {"metrics": {"pass_at_1": float(per.mean()) if len(per) else 0.0, "pass_at_1_stderr": mean_stderr(per)},
            "verdicts": verdicts}


def evaluate(backend, adapter: str | None, data_dir: Path, gen: GenConfig, limit: int | None, progress=None,
             sandbox=None) -> dict:
    records = problems(data_dir, limit)
    outs, cut = complete_detail(backend, adapter, [prompt(backend, r) for r in records], gen, progress=progress)
    scored = score(records, outs, sandbox)
    flat = [(i, c, k) for i, (cs, ks) in enumerate(zip(outs, cut)) for c, k in zip(cs, ks)]
    samples = [{"task_id": f"lcb/{i}", "completion": c, "passed": ok, "truncated": k}
               for (i, c, k), ok in zip(flat, scored["verdicts"])]
    metrics = {**scored["metrics"], "truncated_rate": truncated_rate(samples)}
    return {"metrics": metrics, "primary": "pass_at_1", "n": len(records), "samples": samples}
