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
from populora.evaluation import benchmarks as B
from populora.evaluation import protocol as P
from populora.evaluation.generation import GenConfig
from populora.evaluation.runner import Runner
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
