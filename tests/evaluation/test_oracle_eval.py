"""Every benchmark end to end against known answers (the oracle backend): references score 100 %, harmless
rewrites of them 100 %, wrong answers 0 %, completions cut by the budget 0 % with a truncation rate of 1, and
the scores are identical batched (every target at once, each scored in its own thread) and one at a time.

Before the grading fix, batched math was graded by text match in the worker threads (math-verify's signal
timeouts raise outside the main thread): the rewritten answers (27 for 27.0, \\dfrac for \\frac) scored 0 on
AIME24/25, AMC23 and GSM8K batched, 100 one at a time. These tests fail on that code."""

from __future__ import annotations

import json

import pytest

from oracle_backend import MODES, OracleBackend
from populora.evaluation.harness import benchmarks as B
from populora.evaluation.harness import protocol as P
from populora.evaluation.harness.generation import GenConfig
from populora.evaluation.harness.runner import Runner
from populora.evaluation.targets import BASE, MEMBER, Target

ROOT = B.data_dir()
pytestmark = pytest.mark.skipif(not (ROOT / B.CHECKSUMS).is_file(), reason=f"no benchmark data at {ROOT}")
LIMIT = 2
EXPECTED = {"reference": 1.0, "rewritten": 1.0, "wrong": 0.0, "truncated": 0.0}


def _targets(tmp_path) -> list[Target]:
    out = []
    for mode in ("reference", "rewritten", "wrong"):
        (tmp_path / "adapters" / mode).mkdir(parents=True)
        out.append(Target(mode, MEMBER, str(tmp_path / "adapters" / mode)))
    return out + [Target("truncated", BASE, None)]  # the bare base model answers in mode "truncated"


def _run(tmp_path, names, batched: bool, protocol: str) -> tuple[dict, OracleBackend]:
    backend = OracleBackend(ROOT, names, base_mode="truncated")
    proto = P.resolve(protocol, None, max_new_tokens=64)
    runner = Runner(lambda: backend, ROOT, tmp_path / ("batched" if batched else "sequential"), GenConfig(), LIMIT,
                    {"base": "oracle"}, log=lambda m: None, batched=batched, protocol=proto)
    return runner.run(_targets(tmp_path / ("b" if batched else "s")), names), backend


def _table(scores: dict) -> dict:
    return {(t, b): (r["score"], r["metrics"]["truncated_rate"]) for t, per in scores.items() for b, r in per.items()}


@pytest.mark.slow
def test_every_benchmark_scores_known_answers_exactly_in_both_modes(tmp_path):
    names = list(B.BENCHMARKS)
    batched, backend = _run(tmp_path, names, batched=True, protocol="quick")
    sequential, _ = _run(tmp_path, names, batched=False, protocol="quick")
    assert any(len(set(c["adapters"])) == 4 for c in backend.calls), "batched mode merged no targets"
    for scores in (batched, sequential):
        assert set(scores) == set(MODES)
        for mode in MODES:
            for name in names:
                r = scores[mode][name]
                failed = [json.loads(line) for line in open(r["samples_file"])]
                assert r["score"] == EXPECTED[mode], (mode, name, r["score"], failed)
                assert r["n"] == LIMIT
                assert r["metrics"]["truncated_rate"] == (1.0 if mode == "truncated" else 0.0), (mode, name)
                if B.BENCHMARKS[name].group == "math":
                    assert r["metrics"]["grading_fallback"] == 0.0, (mode, name)
    assert _table(batched) == _table(sequential)


@pytest.mark.slow
def test_math_under_the_azr_protocol_reads_the_answer_block(tmp_path):
    """AZR's template (no chat markup) and AZR's answer extraction, batched and not: same exact scores."""
    names = B.GROUPS["math"]
    batched, backend = _run(tmp_path, names, batched=True, protocol="azr")
    sequential, _ = _run(tmp_path, names, batched=False, protocol="azr")
    assert _table(batched) == _table(sequential)
    assert {(m, n): batched[m][n]["score"] for m in MODES for n in names} == {(m, n): EXPECTED[m] for m in MODES for n in names}
    pair = json.loads((tmp_path / "batched" / "pairs" / "reference" / "aime24.json").read_text())
    assert pair["config"]["protocol"] == "azr" and pair["config"]["template"] == "azr"
    assert pair["config"]["generation"]["max_new_tokens"] == 64 and pair["config"]["batched"] is True


@pytest.mark.slow
def test_sampled_evaluation_averages_pass_at_1_within_each_problem(tmp_path):
    """Sampled evaluation (4 samples at temperature 0.8) on a math (lm-eval), an EvalPlus and the LiveCodeBench
    suite: the oracle answers 3 of 4 samples right on item 0 and 1 of 4 on item 1, so pass@1 is exactly 0.75 and
    0.25 per problem, 0.5 per benchmark, with the standard error of those two per-problem scores (0.25) and, as
    the one-sample reference, sqrt(0.5 x 0.5 / 1) = 0.5. Cheap: 2 items, 3 benchmarks."""
    from oracle_backend import SAMPLED

    from populora.evaluation import per_problem, report, results

    names = ["gsm8k", "humaneval_plus", "livecodebench"]
    backend = OracleBackend(ROOT, names, base_mode="wrong", right_of={n: [3, 1] for n in names})
    gen = GenConfig(temperature=0.8, n_samples=4)
    proto = P.resolve("quick", None, max_new_tokens=64, samples=4, temperature=0.8)
    runner = Runner(lambda: backend, ROOT, tmp_path / "out", gen, LIMIT, {"base": "oracle"}, log=lambda m: None,
                    protocol=proto)
    (tmp_path / "adapters" / SAMPLED).mkdir(parents=True)
    (tmp_path / "adapters" / "reference").mkdir(parents=True)
    targets = [Target(SAMPLED, MEMBER, str(tmp_path / "adapters" / SAMPLED)),
               Target("reference", MEMBER, str(tmp_path / "adapters" / "reference"))]
    scores = runner.run(targets, names)
    assert all(c["temperature"] == 0.8 for c in backend.calls)
    for name in names:
        r = scores[SAMPLED][name]
        per = per_problem.problem_scores(r["samples_file"])
        assert sorted(per.values()) == [0.25, 0.75], (name, per)
        first = min(per)  # ids sort in file order for these two items (gsm8k/0, HumanEval/0, lcb/0)
        assert per[first] == 0.75, (name, per)
        assert sum(1 for _ in open(r["samples_file"])) == 2 * 4
        assert r["score"] == 0.5 and r["n"] == LIMIT, (name, r["score"])
        assert r["metrics"][f"{r['primary']}_stderr"] == pytest.approx(0.25, abs=1e-12)
        assert r["metrics"]["stderr_one_sample"] == pytest.approx(0.5, abs=1e-12)
        assert scores["reference"][name]["score"] == 1.0
        assert r["config"]["generation"]["n_samples"] == 4
    data = results.build(targets, scores, {**runner.config, "limit": LIMIT})
    assert data["config"]["protocol"]["samples"] == 4 and data["config"]["protocol"]["temperature"] == 0.8
    notes = report.sampling_notes(report.Results.of(data))
    assert "4 samples per problem at temperature 0.8" in notes[0] and "GSM8K SE 25.0 -> 12.5 pts" in notes[0], notes
