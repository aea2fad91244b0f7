"""Faithfulness of the code benchmarks (issue 5, item 6), on slices so CI stays fast: EvalPlus's canonical
solutions pass through our pipeline (prompt -> sanitiser -> EvalPlus's evaluator), our pass@1 equals what
``evalplus.evaluate`` itself reports on the same samples file, and LiveCodeBench (public tests) grades known
solutions right and junk wrong in the sandbox."""

import json
import os
import subprocess
import sys

import pytest

from populora.evaluation.harness import benchmarks as B
from populora.evaluation.harness import evalplus_suite as E
from populora.evaluation.harness import livecodebench as L

ROOT = B.data_dir()
pytestmark = pytest.mark.skipif(not (ROOT / B.CHECKSUMS).is_file(), reason=f"no benchmark data at {ROOT}")
SLICE = 20
# These tests check what is scored, not how fast CI's machine is: EvalPlus's default per-test time limit (1 s, or
# 4x the canonical solution's time) fails correct solutions when a shared 2-core box is loaded, so both our
# pipeline and evalplus.evaluate get the same generous limits.
LIMITS = {"min_time_limit": 10.0, "gt_time_limit_factor": 20.0}


@pytest.mark.parametrize("name", list(E.DATASETS))
def test_canonical_solutions_pass_through_our_pipeline(name):
    probs = E.problems(name, ROOT, SLICE)
    # what a model would write after the prefilled ```python fence: the full function, then the closing fence
    samples = [{"task_id": t, "solution": E.solution(p, p["prompt"] + p["canonical_solution"] + "\n```\nDone.")}
               for t, p in probs.items()]
    m = E.score_samples(name, probs, samples, ROOT, **LIMITS)["metrics"]
    assert m["base"] >= 0.99 and m["plus"] >= 0.99, m


def _mixed_samples(probs):
    """Right, wrong-on-some-inputs, crashing and empty solutions, so statuses differ across tasks."""
    out = []
    for i, (t, p) in enumerate(probs.items()):
        right = p["prompt"] + p["canonical_solution"]
        wrong = right + f"\n\n_orig = {p['entry_point']}\ndef {p['entry_point']}(*a, **k):\n    r = _orig(*a, **k)\n" \
                        f"    return r if len(repr(a)) % 2 else None\n"
        out.append({"task_id": t, "solution": [right, wrong, "def broken(:", ""][i % 4]})
    return out


def _run_evalplus(tmp_path, name, probs, samples):
    """Start ``python -m evalplus.evaluate`` on our samples; it needs a sample for every problem, so it gets a
    dataset file of just our slice. Returns (process, its results file)."""
    dataset, env = E.DATASETS[name]
    lines = (ROOT / B.BENCHMARKS[name].file).read_text().splitlines()
    slice_file = tmp_path / f"{name}_slice.jsonl"
    slice_file.write_text("\n".join(ln for ln in lines if json.loads(ln)["task_id"] in probs) + "\n")
    samples_file = tmp_path / f"{name}_samples.jsonl"
    samples_file.write_text("".join(json.dumps(s) + "\n" for s in samples))
    proc = subprocess.Popen([sys.executable, "-m", "evalplus.evaluate", "--dataset", dataset, "--samples", str(samples_file),
                             "--parallel", "2", "--min_time_limit", str(LIMITS["min_time_limit"]),
                             "--gt_time_limit_factor", str(LIMITS["gt_time_limit_factor"])], env={**os.environ, env: str(slice_file), "HF_DATASETS_OFFLINE": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, tmp_path / f"{name}_samples_eval_results.json"


def test_our_pass_at_1_equals_evalplus_evaluate(tmp_path):
    runs = {}
    for name in E.DATASETS:  # both at once: evalplus.evaluate idles ~20 s in its stuck-job watchdog before exiting
        probs = E.problems(name, ROOT, 8)
        samples = _mixed_samples(probs)
        runs[name] = (probs, samples, *_run_evalplus(tmp_path, name, probs, samples))
    for name, (probs, samples, proc, results_file) in runs.items():
        ours = E.score_samples(name, probs, samples, ROOT, **LIMITS)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        theirs = json.loads(results_file.read_text())["eval"]
        for st in ours["statuses"]:
            ref = theirs[st["task_id"]][0]
            assert (st["base_status"], st["plus_status"]) == (ref["base_status"], ref["plus_status"]), st["task_id"]
        base = sum(r[0]["base_status"] == "pass" for r in theirs.values()) / len(theirs)
        plus = sum(r[0]["base_status"] == r[0]["plus_status"] == "pass" for r in theirs.values()) / len(theirs)
        assert (ours["metrics"]["base"], ours["metrics"]["plus"]) == pytest.approx((base, plus)), name
        assert 0 < plus < 1, name  # the slice really mixes passing and failing samples
        assert f"pass@1:\t{plus:.3f}" in out, name  # and EvalPlus printed the same number


def test_output_without_code_scores_zero():
    probs = E.problems("humaneval_plus", ROOT, 2)
    samples = [{"task_id": t, "solution": E.solution(p, text)}
               for (t, p), text in zip(probs.items(), ["I am not sure how to do this.", ""])]
    assert E.score_samples("humaneval_plus", probs, samples, ROOT)["metrics"]["plus"] == 0.0


STDIN_SOLUTION = "n=int(input())\na=list(map(int,input().split()))\nprint(a.index(sorted(a)[-2])+1)\n```\nThat is all."
CALL_SOLUTION = """class Solution:
    def shortestDistanceAfterQueries(self, n: int, queries: List[List[int]]) -> List[int]:
        adj, res = [[i + 1] for i in range(n)], []
        for u, v in queries:
            adj[u].append(v)
            dist, dq = [0] + [n] * (n - 1), deque([0])
            while dq:
                x = dq.popleft()
                for y in adj[x]:
                    if y < n and dist[y] > dist[x] + 1:
                        dist[y] = dist[x] + 1
                        dq.append(y)
            res.append(dist[n - 1])
        return res
```"""


def test_livecodebench_grades_both_styles_in_the_sandbox():
    from populora.platform.sandbox import Sandbox

    records = L.problems(ROOT)
    stdin = records[0]
    call = next(r for r in records if "shortestDistanceAfterQueries" in r["starter_code"])
    assert {t["testtype"] for t in L.tests(stdin)} == {"stdin"} and {t["testtype"] for t in L.tests(call)} == {"functional"}
    with Sandbox(workers=2) as sb:
        r = L.score([stdin, call, stdin, call, stdin], [[STDIN_SOLUTION], [CALL_SOLUTION], ["print(0)"], [""],
                                                        ["while True: pass"]], sandbox=sb, timeout_s=1.0)
    assert r["verdicts"] == [True, True, False, False, False]
    assert r["metrics"]["pass_at_1"] == pytest.approx(0.4)
    assert L.LABEL == "LiveCodeBench 2408-2501 (public tests)" == B.BENCHMARKS["livecodebench"].label


# LCB's import_string, verbatim from lcb_runner/evaluation/testing_util.py (LiveCodeBench/LiveCodeBench @28fef95)
LCB_IMPORT_STRING = "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\nfrom heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\nfrom statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\nimport string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\nimport math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport operator\nimport io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n"  # noqa: E501


def test_prelude_is_lcbs_import_string_but_datetime():
    # datetime is the one module of LCB's prelude the sandbox cannot import (not in worker.PRELOAD, chroot)
    lcb = [line for line in LCB_IMPORT_STRING.splitlines() if "datetime" not in line]
    assert L.PRELUDE.splitlines() == lcb


def test_stdout_comparison_is_lcbs_exact_decimal_rule():
    """grade_stdio: stripped lines; equal strings, else tokens equal as Decimal, exactly (no tolerance)."""
    assert L.same_output("1 2\n3\n", "1 2\n3") and L.same_output("  1   2 \r\n3", "1 2\n3")
    assert L.same_output("1.0 2.50\n", "1 2.5") and L.same_output("1e3", "1000")  # Decimal equality
    assert not L.same_output("0.3333333\n", "0.33333333")  # np.allclose(atol=1e-6) called this equal
    assert not L.same_output("9007199254740993", "9007199254740992")  # 2**53 + 1: equal as floats
    assert not L.same_output("50000000000000001", "50000000000000000")  # LCB's own example
    assert not L.same_output("1 2\n", "1 3\n") and not L.same_output("", "1") and not L.same_output("1\n2", "1")
    assert not L.same_output("Yes", "yes") and L.same_output("nan", "nan ")  # equal strings pass before any Decimal
    assert not L.same_output("nan", "NaN")  # as Decimals, NaN equals nothing
    assert not L.same_output("1 2", "1 2 0") and not L.same_output("sNaN", "1") and not L.same_output("NaN", "1")


def test_lcb_prelude_and_functional_comparison_in_the_sandbox():
    from populora.platform.sandbox import Sandbox

    stdin_record = {"starter_code": "", "tests": [{"testtype": "stdin", "input": "3\n", "output": "[1, 2, 3]\n"}]}

    def call_record(output):
        return {"starter_code": "class Solution:\n    def f(self, n: int) -> List[int]:\n",
                "tests": [{"testtype": "functional", "input": "3", "output": output}]}

    deepcopy = "n = int(input())\nx = deepcopy(list(range(1, n + 1)))\nprint(x)\n```"  # deepcopy: LCB's prelude
    as_tuple = "class Solution:\n    def f(self, n):\n        return tuple(range(1, n + 1))\n```"
    int_keys = "class Solution:\n    def f(self, n):\n        return {1: n}\n```"
    chatty = "class Solution:\n    def f(self, n):\n        print('True', end='')\n        return n\n```"
    with Sandbox(workers=1) as sb:
        assert L.grade(sb, stdin_record, deepcopy)
        assert L.grade(sb, call_record("[1, 2, 3]"), as_tuple)  # a tuple result reads as a list, as in LCB
        assert not L.grade(sb, call_record('{"1": 3}'), int_keys)  # Python ==: {1: 3} != {"1": 3}, as in LCB
        assert L.grade(sb, call_record("3"), chatty) and not L.grade(sb, call_record("4"), chatty)


def test_ground_truth_from_many_threads_leaves_stdout_alone(monkeypatch):
    """Batched evaluation asks for EvalPlus's expected outputs from a thread per target. Computing them swaps the
    process-wide sys.stdout (EvalPlus prints progress there); overlapping swaps used to restore in the wrong
    order and leave stdout on stderr for good, so the report printed after a batched eval went nowhere."""
    import threading
    import time

    import evalplus.evaluate

    calls = []

    def slow_groundtruth(problems, hashcode, tasks_only_output_not_none):  # EvalPlus's signature
        calls.append(hashcode)
        print("Computing expected output...")  # as evalplus.evaluate.get_groundtruth does, on stdout
        time.sleep(0.2)  # long enough for the other threads to arrive while this one is inside
        return {tid: {} for tid in problems}

    monkeypatch.setattr(evalplus.evaluate, "get_groundtruth", slow_groundtruth)
    monkeypatch.setattr(E, "_GROUND_TRUTH", {}, raising=False)
    probs = E.problems("humaneval_plus", ROOT, 3)
    before = sys.stdout
    got = []
    threads = [threading.Thread(target=lambda: got.append(E.expected_outputs("humaneval_plus", probs, ROOT)))
               for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sys.stdout is before
    assert len(got) == 4 and all(set(g) == set(probs) for g in got)
    assert len(calls) == 1  # computed once per process, the other threads read it


def test_evalplus_problems_are_read_once_per_file(tmp_path, monkeypatch):
    """EvalPlus parses the whole file at each call (1.7 s for HumanEval+), and an evaluation asked twice per target:
    the problems are read once per process and file, again when the file changes (its size or mtime)."""
    import shutil

    import evalplus.data

    calls = []
    real = evalplus.data.get_mbpp_plus
    monkeypatch.setattr(evalplus.data, "get_mbpp_plus", lambda *a, **k: calls.append(1) or real(*a, **k))
    file = B.BENCHMARKS["mbpp_plus"].file
    (tmp_path / file).parent.mkdir(parents=True)
    shutil.copy(ROOT / file, tmp_path / file)
    first = E.problems("mbpp_plus", tmp_path, 3)
    assert E.problems("mbpp_plus", tmp_path) and E.problems("mbpp_plus", tmp_path, 3) == first and len(calls) == 1
    os.utime(tmp_path / file, ns=(0, 0))  # a changed file: read again
    assert E.problems("mbpp_plus", tmp_path, 3) == first and len(calls) == 2
