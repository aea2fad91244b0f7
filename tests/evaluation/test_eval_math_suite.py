"""The math suite through lm-eval: our shipped task YAMLs load from ``--include_path``, our backend LM feeds
lm-eval, and reference answers fed back through the whole lm-eval pipeline score 1 (wrong ones 0)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from populora.evaluation.harness import benchmarks as B
from populora.evaluation.harness import math_grading as G
from populora.evaluation.harness import math_suite
from populora.evaluation.harness.generation import GenConfig
from populora.platform.backends import Generation

ROOT = B.data_dir()
pytestmark = pytest.mark.skipif(not (ROOT / B.CHECKSUMS).is_file(), reason=f"no benchmark data at {ROOT}")


class OracleBackend:
    """Stands in for PeftBackend: answers each question with its gold answer (or a wrong one), and records calls."""

    def __init__(self, benchmark: str, wrong: bool = False):
        self.answers = {G.question(benchmark, r).strip(): G.gold_answer(benchmark, r) for r in B.read_records(ROOT, benchmark)}
        self.wrong, self.calls = wrong, []

    def encode_chat(self, messages, prefill=""):
        return f"<user>{messages[0]['content']}</user><assistant>{prefill}"

    def generate(self, prompts, adapters, max_new_tokens, temperature=1.0, top_p=1.0, seed=None, stop=(), batch_size=16):
        self.calls.append({"adapters": adapters, "max_new_tokens": max_new_tokens, "temperature": temperature})
        out = []
        for p in prompts:
            gold = next(a for q, a in self.answers.items() if q in p)
            out.append(Generation(p, f"Reasoning.\nThe final answer is \\boxed{{{'7919' if self.wrong else gold}}}.", [], []))
        return out


def test_shipped_tasks_are_found_by_lm_eval():
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(math_suite.TASKS_DIR), include_defaults=False)
    names = {f"populora_{b}" for b in B.GROUPS["math"]}
    assert names <= set(tm.all_tasks) and "populora_math" in tm.all_tasks  # the tag runs the whole suite


@pytest.mark.parametrize("name", ["gsm8k", "aime24", "olympiadbench"])
def test_gold_answers_through_lm_eval_score_one(tmp_path, name):
    backend = OracleBackend(name)
    gen = GenConfig(max_new_tokens=77)
    r = math_suite.evaluate(backend, "S0", name, ROOT, tmp_path, gen, limit=5)
    assert r["metrics"]["accuracy"] == 1.0 and r["n"] == 5 and len(r["samples"]) == 5
    assert all(c == {"adapters": ["S0"] * len(c["adapters"]), "max_new_tokens": 77, "temperature": 0.0} for c in backend.calls)
    wrong = math_suite.evaluate(OracleBackend(name, wrong=True), None, name, ROOT, tmp_path, gen, limit=5)
    assert wrong["metrics"]["accuracy"] == 0.0 and wrong["metrics"]["accuracy_stderr"] == 0.0


def test_loglikelihood_is_refused_clearly():
    from populora.evaluation.harness.lm_eval_model import BackendLM

    lm = BackendLM(OracleBackend("amc23"), None, GenConfig())
    with pytest.raises(NotImplementedError, match="generative only"):
        lm.loglikelihood([])


def test_exported_tasks_run_with_the_lm_eval_cli(tmp_path):
    out = tmp_path / "tasks"
    from populora.evaluation.cli import eval_main

    assert eval_main(["--export-tasks", str(out)]) == 0
    text = (out / "populora_gsm8k.yaml").read_text()
    assert str(ROOT.resolve() / "gsm8k" / "test.jsonl") in text and "../shared" not in text
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.run([sys.executable, "-m", "lm_eval", "--model", "dummy", "--include_path", str(out), "--tasks",
                           "populora_gsm8k,populora_amc23", "--limit", "2"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "populora_gsm8k" in proc.stdout and "exact_match" in proc.stdout


def test_grading_is_the_same_in_the_main_thread_and_in_a_worker_thread():
    """Gold answers as given and harmlessly rewritten (27 <-> 27.0, \\frac <-> \\dfrac, \\left( \\right)), first
    40 items of every math benchmark: the same verdicts in the main thread and in a worker thread (batched
    evaluation grades there), all correct, none by a fallback. On the old grader the worker thread fell back to
    text match: AMC23's rewritten golds scored 0/40 there."""
    import threading

    from oracle_backend import rewrite_gold

    cases = []
    for name in B.GROUPS["math"]:
        for r in B.read_records(ROOT, name, 40):
            gold = G.gold_answer(name, r)
            cases += [(name, f"So \\boxed{{{form}}}.", gold) for form in (gold, rewrite_gold(gold))]
    assert sum(rewrite_gold(g) != g for _, _, g in cases) > 150  # the rewrites are real

    main = [G.grade_verdict(out, gold) for _, out, gold in cases]
    threaded: list = []
    worker = threading.Thread(target=lambda: threaded.extend(G.grade_verdict(out, gold) for _, out, gold in cases))
    worker.start()
    worker.join()
    assert threaded == main
    wrong = [(name, out, gold, v) for (name, out, gold), v in zip(cases, main) if not v.correct or v.fallback]
    assert not wrong, wrong[:5]


def test_grading_timeout_is_bounded_and_counted():
    """A grading call over its time limit is cut, counted and wrong (never a hang, never a silent pass)."""
    from populora.evaluation.harness import grading_pool

    pool = grading_pool.BoundedPool("time:sleep", workers=1, timeout_s=0.5)
    try:
        assert pool.call(5) == (grading_pool.TIMEOUT, None) and pool.timeouts == 1
        assert pool.call(0) == ("ok", None)  # a fresh worker took the killed one's place
        assert pool.call("x")[0] == "error"  # an exception in the worker is reported, the worker lives on
    finally:
        pool.close()


def test_grading_in_a_ray_actor_gives_the_main_threads_verdicts(local_ray):
    """Evaluation scaled out on Ray grades in an actor's worker thread: same verdicts as the main thread."""
    ray = local_ray
    from oracle_backend import rewrite_gold

    cases = []
    for name in ("amc23", "math500", "olympiadbench"):
        for r in B.read_records(ROOT, name, 8):
            gold = G.gold_answer(name, r)
            cases += [(f"\\boxed{{{rewrite_gold(gold)}}}", gold), ("\\boxed{-7919.5}", gold)]

    @ray.remote(num_cpus=0.5)
    class Grader:
        def grade(self, batch):
            return [tuple(G.grade_verdict(out, gold)) for out, gold in batch]

    grader = Grader.remote()
    try:
        in_ray = ray.get(grader.grade.remote(cases), timeout=600)
    finally:
        ray.kill(grader)
    main = [tuple(G.grade_verdict(out, gold)) for out, gold in cases]
    assert [tuple(v) for v in in_ray] == main
    assert [v[0] for v in main] == [True, False] * (len(cases) // 2)


def test_lm_eval_git_hash_is_quiet_outside_a_checkout(tmp_path, monkeypatch, capfd):
    """lm-eval asks git for the working dir's commit with git's stderr open: outside a checkout every benchmark
    printed 'fatal: not a git repository' into the logs. Ours answers the same, quietly."""
    import subprocess

    from lm_eval.loggers.utils import get_commit_from_path

    from populora.evaluation.harness.math_suite import quiet_git_hash

    monkeypatch.chdir(tmp_path)
    assert quiet_git_hash() is None and get_commit_from_path(str(tmp_path)) is None
    assert "fatal" not in capfd.readouterr().err
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    want = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, check=True).stdout.strip()
    assert quiet_git_hash() == want


def test_a_benchmark_run_skips_lm_evals_environment_report(tmp_path, monkeypatch):
    """lm-eval's env report ran torch's collect_env (``python -m pip list`` and system probes, ~3 s of CPU) in
    every ``simple_evaluate``, one per benchmark and adapter; ours keeps the versions and never calls it."""
    import torch.utils.collect_env

    monkeypatch.setattr(torch.utils.collect_env, "get_pretty_env_info", lambda: pytest.fail("collect_env ran"))
    r = math_suite.evaluate(OracleBackend("gsm8k"), "S0", "gsm8k", ROOT, tmp_path, GenConfig(max_new_tokens=77), limit=1)
    assert r["metrics"]["accuracy"] == 1.0
    storage = {}
    math_suite.versions_only_env_info(storage)
    assert storage["transformers_version"] and "pretty_env_info" not in storage
