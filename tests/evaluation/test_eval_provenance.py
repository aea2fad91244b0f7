"""``populora eval`` end to end on the oracle backend: what results.json records (protocol, limit, budgets,
truncation, versions, data checksums), lm-eval's schema beside it, and ``--regrade`` re-scoring saved samples."""

from __future__ import annotations

import json

import pytest

from oracle_backend import OracleBackend
from populora.evaluation.harness import benchmarks as B
from populora.evaluation import cli, evaluate

ROOT = B.data_dir()
pytestmark = pytest.mark.skipif(not (ROOT / B.CHECKSUMS).is_file(), reason=f"no benchmark data at {ROOT}")
NAMES = ["humaneval_plus", "amc23", "gsm8k"]


@pytest.fixture
def oracle_eval(tmp_path, monkeypatch):
    backend = OracleBackend(ROOT, NAMES, base_mode="truncated")
    monkeypatch.setattr(evaluate, "backend_factory", lambda *a, **k: (lambda: backend))
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8}')
    out = tmp_path / "eval"
    args = ["--adapter", str(tmp_path / "reference"), "--backend", "peft", "--limit", "2",
            "--benchmarks", ",".join(NAMES), "--out", str(out)]
    return args, out, backend


def test_results_record_protocol_limit_budgets_truncation_and_versions(oracle_eval):
    args, out, backend = oracle_eval
    assert cli.eval_main(args + ["--set", "budgets={gsm8k: 300}"]) == 0
    data = json.loads((out / "results.json").read_text())
    cfg = data["config"]
    assert cfg["protocol"]["name"] == "quick"  # the embedded model's default
    assert cfg["protocol"]["budgets"]["gsm8k"] == 300 and cfg["protocol"]["budgets"]["amc23"] == 512
    assert cfg["protocol"]["overridden"] == ["budgets.gsm8k"]
    assert cfg["limit"] == 2 and cfg["batched"] is True
    assert cfg["versions"]["math-verify"] and cfg["versions"]["evalplus"] == "0.3.1"
    assert cfg["data_sha256"]["amc23"] == B.expected_checksums(ROOT)[B.BENCHMARKS["amc23"].file]
    assert {c["max_new_tokens"] for c in backend.calls} == {300, 512}
    ref, base = data["results"]["reference"], data["results"]["base model"]
    assert {n: ref[n]["score"] for n in NAMES} == {n: 1.0 for n in NAMES}
    assert {n: base[n]["score"] for n in NAMES} == {n: 0.0 for n in NAMES}
    assert ref["gsm8k"]["truncated_rate"] == 0.0 and ref["gsm8k"]["max_new_tokens"] == 300
    assert ref["humaneval_plus"]["pair_config"]["evalplus_time_limits"] == {"min_time_limit": 1.0, "gt_time_limit_factor": 4.0}
    lm = json.loads((out / "results_lm_eval.json").read_text())
    assert lm["results"]["reference/amc23"]["accuracy,none"] == 1.0
    assert lm["n-samples"]["reference/amc23"] == {"original": 40, "effective": 2}
    assert lm["higher_is_better"]["reference/amc23"]["accuracy"] is True
    assert lm["higher_is_better"]["reference/amc23"]["truncated_rate"] is False
    assert base["gsm8k"]["truncated_rate"] == 1.0


def test_report_shows_protocol_limit_and_truncation(oracle_eval, capsys):
    args, out, _ = oracle_eval
    assert cli.eval_main(args) == 0
    capsys.readouterr()
    assert cli.report_main(["--results", str(out / "results.json")]) == 0
    text = " ".join((capsys.readouterr().out + (out / "report.md").read_text()).split())  # the printed report wraps
    assert "(--limit 2: the first 2 of each benchmark, not comparable with full-benchmark scores)" in text
    assert "protocol quick: 512 new tokens: HumanEval+" in text and "EvalPlus time limits 1.0 s / 4.0x" in text
    assert "completions cut by the token budget (raise budgets.<benchmark>): base model HumanEval+ 100%" in text


def test_regrade_rescores_saved_samples_without_a_model(oracle_eval):
    """Samples graded by the old text match (a gold of 27.0 answered 27 scored 0) are corrected by --regrade."""
    args, out, _ = oracle_eval
    assert cli.eval_main(args) == 0
    samples = out / "samples" / "reference" / "amc23.jsonl"
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    for r in rows:  # what the old grader left: the answer written as an integer, marked wrong
        r["completion"] = r["completion"].replace(".0}", "}")
        r["correct"] = False
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pair = out / "pairs" / "reference" / "amc23.json"
    stale = json.loads(pair.read_text())
    stale["metrics"]["accuracy"] = stale["score"] = 0.0
    pair.write_text(json.dumps(stale))

    def no_model():
        raise AssertionError("--regrade must not load a model")
    evaluate.backend_factory = lambda *a, **k: no_model  # noqa: the fixture's monkeypatch restores it
    assert cli.eval_main(args + ["--regrade"]) == 0
    data = json.loads((out / "results.json").read_text())
    assert data["results"]["reference"]["amc23"]["score"] == 1.0
    assert data["results"]["base model"]["amc23"]["score"] == 0.0
    assert "regraded" in data["results"]["reference"]["amc23"]["pair_config"]
    assert all(json.loads(line)["correct"] for line in samples.read_text().splitlines())
