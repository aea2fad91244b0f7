"""The verdict (evaluation/statistics/verdict.py) on a results.json with known per-problem verdicts: the arms' scores equal
`populora report`'s table, the paired p-values equal scipy's exact paired permutation test of the same problems
(16 problems or fewer: the sign-flip test; the bootstrap's agreement with scipy's is test_stats.py's), the line in
words counts what the rows say, and a baseline evaluated on its own run is read as the population's baseline."""

import json

import numpy as np
import pytest
from scipy import stats as sps

from populora.evaluation import report
from populora.evaluation.statistics import stats, verdict

# per-problem verdicts (one sample each): gsm8k 8 problems, humaneval_plus 4
KNOWN = {
    "T0": {"gsm8k": [1, 1, 0, 1, 0, 1, 1, 0], "humaneval_plus": [1, 0, 1, 1]},
    "S0": {"gsm8k": [1, 0, 0, 1, 0, 0, 1, 0], "humaneval_plus": [0, 0, 1, 1]},
    "baseline (B0)": {"gsm8k": [0, 1, 0, 0, 0, 0, 1, 0], "humaneval_plus": [0, 0, 1, 0]},
    "base model": {"gsm8k": [0, 0, 0, 0, 0, 0, 0, 0], "humaneval_plus": [0, 0, 0, 1]},
}
KINDS = {"T0": "member", "S0": "member", "baseline (B0)": "baseline", "base model": "base"}


def _results(tmp_path, labels=tuple(KNOWN)) -> dict:
    out = {"results": {}, "targets": {}, "config": {}}
    for label in labels:
        out["targets"][label] = {"kind": KINDS[label]}
        out["results"][label] = {}
        for b, verdicts in KNOWN[label].items():
            path = tmp_path / f"{label.replace(' ', '_')}_{b}.jsonl"
            key = "plus_status" if b == "humaneval_plus" else "passed"
            lines = [{"task_id": f"{b}/{i}", **({"base_status": "pass", key: "pass" if v else "fail"} if key == "plus_status"
                                                else {key: bool(v)})} for i, v in enumerate(verdicts)]
            path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
            out["results"][label][b] = {"score": float(np.mean(verdicts)), "n": len(verdicts), "samples_file": str(path)}
    return out


def test_arms_match_the_report_table_and_p_values_are_never_below_scipys_paired_permutation_test(tmp_path):
    results = _results(tmp_path)
    v = verdict.build(results)
    rows = {r["name"]: r for r in v["rows"]}
    table = report.build(results)
    by_label = {r[0]: r for r in table.rows}
    col = {h: i for i, h in enumerate(table.header)}
    for name, label in (("gsm8k", "GSM8K"), ("humaneval_plus", "HumanEval+")):
        assert rows[name]["population mean"] == pytest.approx(by_label["population mean"][col[label]])
        assert rows[name]["baseline"] == pytest.approx(by_label["baseline (B0)"][col[label]])
        assert rows[name]["base model"] == pytest.approx(by_label["base model"][col[label]])
    assert rows["overall"]["population mean"] == pytest.approx(by_label["population mean"][col[report.COLUMNS["overall"]]])
    # gsm8k: mean member per problem minus the baseline, 8 problems: scipy's exact paired permutation test
    mean = np.mean([KNOWN["T0"]["gsm8k"], KNOWN["S0"]["gsm8k"]], axis=0)
    base = np.array(KNOWN["baseline (B0)"]["gsm8k"], dtype=float)
    ref = sps.permutation_test((mean - base,), np.mean, permutation_type="samples", n_resamples=np.inf)
    c = rows["gsm8k"]["mean - baseline"]
    assert c["delta"] == pytest.approx(mean.mean() - base.mean())
    # never below the exact test's p (8 problems), and the interval is the MOVER one, extended to 0 if p >= 0.05
    mover = stats.intervals.Difference([mean], [base], np.ones(1))
    assert c["p_value"] == pytest.approx(max(ref.pvalue, mover.p_value()))
    lo, hi = mover.interval()
    assert c["ci95"] == pytest.approx([min(lo, 0), max(hi, 0)] if c["p_value"] >= 0.05 else [lo, hi])


def test_words_count_the_holm_adjusted_rows_and_say_what_one_seed_speaks_for(tmp_path):
    v = verdict.build(_results(tmp_path))
    per = [r for r in v["rows"] if r["name"] in ("gsm8k", "humaneval_plus")]
    beats = sum(r["mean - baseline"]["delta"] > 0 for r in per)
    assert beats == 2  # gsm8k 0.4375 vs 0.25, humaneval+ 0.5 vs 0.25
    # the family: every comparison but overall mean - baseline (2 deltas x 2 benchmarks, code / math avg, weakest overall)
    cells = [r[d] for r in v["rows"] for d in ("mean - baseline", "weakest - baseline")
             if d in r and (r["name"], d) != ("overall", "mean - baseline")]
    assert v["family"] == len(cells) == 9
    assert [c["p_adjusted"] for c in cells] == pytest.approx(stats.holm([c["p_value"] for c in cells]))
    wins = sum(r["mean - baseline"]["p_adjusted"] < 0.05 and r["mean - baseline"]["delta"] > 0 for r in per)
    assert wins == 0  # 4 and 8 problems: nothing survives Holm over 9 comparisons
    # one seed: the sentence that names what the population beats says it compares these adapters on these problems
    assert v["words"].startswith("comparing these adapters on these problems (one training seed per arm, not the "
                                 f"method), population mean beats the baseline on {wins} of 2 benchmarks (Holm-adjusted "
                                 f"p < 0.05: 0 above, 0 below; higher on {beats} before adjustment)")
    assert "these adapters on these problems, not the method" in v["words"]
    assert "a claim about the method needs >= 2 seeds per arm" in v["words"]
    assert v["seeds_needed"] >= 2 and f"({v['seeds_needed']} per arm would detect" in v["words"]
    assert v["mde"]["level"] == "adapters" and "Smallest difference this design detects: >= " in v["words"]
    # rliable's aggregates over the two benchmarks (HumanEval+ 62.5 vs 25, GSM8K 50 vs 25), intervals over problems
    agg = v["aggregates"]
    assert agg["iqm"]["population mean"]["value"] == pytest.approx((0.625 + 0.5) / 2)  # two scores: nothing trimmed
    assert agg["probability_of_improvement"]["population mean"]["value"] == 1.0      # higher on both
    lo, hi = agg["iqm"]["population mean"]["ci95"]
    assert lo < 0.5625 < hi and "IQM 56.2" in verdict.text(v) and "P(population mean > baseline) = 1.00" in verdict.text(v)


def test_a_baseline_evaluated_on_its_own_run_is_the_populations_baseline(tmp_path):
    full = _results(tmp_path)
    pop = _results(tmp_path, ("T0", "S0", "base model"))
    alone = _results(tmp_path, ("baseline (B0)",))
    assert verdict.build(pop)["words"].startswith("no baseline scored")
    merged = verdict.with_baseline(pop, alone)
    assert verdict.build(merged)["rows"] == verdict.build(full)["rows"]
    # results made before targets had kinds: the baseline run's one adapter is a "member" there
    alone["targets"]["baseline (B0)"]["kind"] = "member"
    assert verdict.build(verdict.with_baseline(pop, alone))["rows"] == verdict.build(full)["rows"]


def test_different_problems_are_refused(tmp_path):
    pop = _results(tmp_path, ("T0", "S0"))
    alone = _results(tmp_path, ("baseline (B0)",))
    alone["results"]["baseline (B0)"]["gsm8k"]["samples_file"] = str(tmp_path / "short.jsonl")
    (tmp_path / "short.jsonl").write_text(json.dumps({"task_id": "gsm8k/0", "passed": True}) + "\n")
    with pytest.raises(ValueError, match="different problem sets"):
        verdict.build(verdict.with_baseline(pop, alone))


def test_a_limit_3_report_prints_the_mde_the_launch_form_would_and_says_what_cannot_be_detected(tmp_path, monkeypatch):
    """``--limit 3``, one seed, four members: the report's MDE is ``power.planned``'s for the same design (the
    problems scored, the family the report adjusts in), and with 3 problems nothing is detectable: no figure,
    the problems that would detect it in words (#52: it printed ">= 0.8 pts" from 3 problems)."""
    from populora.evaluation.statistics import power

    known = {f"M{i}": {"gsm8k": [1, i % 2, 0], "humaneval_plus": [1, 0, i % 2]} for i in range(4)}
    known["baseline (B0)"] = {"gsm8k": [0, 1, 0], "humaneval_plus": [0, 0, 1]}
    monkeypatch.setitem(globals(), "KNOWN", known)
    monkeypatch.setitem(KINDS, "baseline (B0)", "baseline")
    for i in range(4):
        monkeypatch.setitem(KINDS, f"M{i}", "member")
    v = verdict.build(_results(tmp_path, tuple(known)))
    rows = {r["name"]: r for r in v["rows"]}
    scores = {b: (rows[b]["population mean"] + rows[b]["baseline"]) / 2 for b in ("gsm8k", "humaneval_plus")}
    before = power.planned(1, spec="gsm8k,humaneval_plus", limit=3, scores=scores)
    assert v["n"] == {"humaneval_plus": 3, "gsm8k": 3} and v["family"] == 9
    for key in ("overall", "per_benchmark", "needs", "alpha_per_benchmark", "words"):
        assert v["mde"][key] == before[key], key
    assert v["mde"]["overall"] is None and all(x is None for x in v["mde"]["per_benchmark"].values())
    assert "nothing overall at 80% power (needs >= " in v["words"] and "problems per benchmark" in v["words"]
    assert rows["gsm8k"]["mean - baseline"]["mde"] is None and rows["gsm8k"]["weakest - baseline"]["mde"] is None
