"""Compare with a baseline evaluated on its own run (issue 31): the population's evaluation scored no baseline, the
baseline run's own evaluation did; the page reads it, shows its numbers, the differences and the verdict, and
warns when no baseline is scored. Known per-problem verdicts, so every number is worked out by hand below."""

import json
import re

import pytest
import streamlit as st
from mlflow import MlflowClient
from streamlit.testing.v1 import AppTest

from populora.platform.store import runlayout
from test_ui_pages import VIEWS, _ok, texts

# per-problem verdicts: gsm8k and humaneval_plus, 4 problems each
POPULATION = {"T0": ([1, 1, 1, 1], [1, 1, 0, 0]), "T1": ([1, 1, 0, 0], [1, 0, 0, 0]),
              "S0": ([1, 0, 1, 0], [1, 1, 1, 0]), "S1": ([0, 0, 0, 0], [0, 0, 0, 0])}
BASELINE = ([1, 0, 0, 0], [1, 0, 0, 0])
BASE = ([0, 0, 0, 0], [0, 0, 0, 1])


def _target(tmp, label, verdicts) -> dict:
    out = {}
    for bench, vs in zip(("gsm8k", "humaneval_plus"), verdicts):
        path = tmp / f"{label.replace(' ', '_')}-{bench}.jsonl"
        rows = [{"task_id": f"gsm8k/{i}", "correct": bool(v)} if bench == "gsm8k" else
                {"task_id": f"HumanEval/{i}", "base_status": "pass", "plus_status": "pass" if v else "fail"}
                for i, v in enumerate(vs)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out[bench] = {"score": sum(vs) / len(vs), "n": len(vs), "samples_file": str(path)}
    return out


@pytest.fixture(scope="module")
def linked_store(tmp_path_factory):
    import synthetic_store

    tmp = tmp_path_factory.mktemp("cmp_baseline")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    baseline, population = synthetic_store.build(uri, runs=1, members=4, tasks=12, steps=2)
    client = MlflowClient(uri)
    pop = {"results": {m: _target(tmp, m, v) for m, v in POPULATION.items()},
           "targets": {m: {"kind": "member", "alive": "true"} for m in POPULATION}, "config": {}}
    pop["results"]["base model"], pop["targets"]["base model"] = _target(tmp, "base", BASE), {"kind": "base"}
    alone = {"results": {"baseline (B0)": _target(tmp, "B0", BASELINE)},
             "targets": {"baseline (B0)": {"kind": "baseline"}}, "config": {}}
    client.log_text(population, json.dumps(pop), runlayout.eval_results_path())
    client.log_text(baseline, json.dumps(alone), runlayout.eval_results_path())
    return {"uri": uri, "population": population, "baseline": baseline}


def _compare(store, monkeypatch, tmp_path) -> AppTest:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "compare.py"), default_timeout=90)
    at.query_params["run"] = store["population"]
    return _ok(at.run())


def test_baseline_evaluated_on_its_own_run_shows_its_numbers_deltas_and_verdict(linked_store, monkeypatch, tmp_path):
    at = _compare(linked_store, monkeypatch, tmp_path)
    assert at.selectbox(key="cmp_baseline").value == linked_store["baseline"]  # the linked run, picked by itself
    bench = at.dataframe[0].value  # in %
    # population mean: GSM8K (4+2+2+0)/16 = 50, HumanEval+ (2+1+3+0)/16 = 37.5; the baseline 1/4 on each
    assert bench.loc["baseline", ["GSM8K", "HumanEval+"]].tolist() == [25.0, 25.0]
    assert bench.loc["mean - baseline", ["GSM8K", "HumanEval+", "overall"]].tolist() == [25.0, 12.5, 18.75]
    # weakest (cross-fitted): S1 on both halves, 0 everywhere
    assert bench.loc["weakest - baseline", ["GSM8K", "HumanEval+"]].tolist() == [-25.0, -25.0]
    verdict = at.table[0].value
    # best, cross-fitted: S0 is best on half A (problems 0, 2: overall 1.0) and is scored on half B (GSM8K 0, 0);
    # T0 is best on half B (0.75) and is scored on half A (GSM8K 1, 1): GSM8K (1 + 1 + 0 + 0) / 4 = 50
    assert verdict.loc["GSM8K", ["population mean", "weakest member", "best member", "baseline", "base model"]].tolist() \
        == ["50.0", "0.0", "50.0", "25.0", "0.0"]
    assert verdict.loc["GSM8K", "mean - baseline"].startswith("+25.0 [")
    assert verdict.loc["overall", "mean - baseline"].startswith("+18.8 [")
    assert verdict.loc["HumanEval+", "weakest - baseline"].startswith("-25.0 [")
    # higher on both, but 4 problems each: nothing survives Holm's correction; one seed: these adapters, not the method
    assert ("Comparing these adapters on these problems (one training seed per arm, not the method), population mean "
            "beats the baseline on 0 of 2 benchmarks (Holm-adjusted p < 0.05: 0 above, 0 below; "
            "higher on 2 before adjustment)") in texts(at)
    assert "this describes these adapters on these problems, not the method" in texts(at)
    assert "IQM (%)" in at.table[1].value.columns and at.table[1].value.loc["population mean", "P(> baseline)"].startswith("1.00 [")
    assert not [w for w in at.warning if "No baseline scored" in w.value]


def test_no_baseline_scored_is_a_visible_warning(linked_store, monkeypatch, tmp_path):
    at = _compare(linked_store, monkeypatch, tmp_path)
    at.selectbox(key="cmp_baseline").select_index(0).run()  # "(none)"
    warnings = [w.value for w in _ok(at).warning if "No baseline scored" in w.value]
    assert warnings and "populora train --config <preset> --baseline" in warnings[0]
    assert "baseline" not in at.dataframe[0].value.index


def test_report_reads_the_baseline_from_its_own_run_and_prints_the_verdict(linked_store, monkeypatch, tmp_path, capsys):
    """`populora report --run` of the population: the same baseline row and verdict as the page, and both runs'
    per-adapter compute side by side (the synthetic runs' ledgers: 4 members vs 1, made up, so not matched)."""
    from populora.evaluation.cli import report_main

    monkeypatch.setenv("MLFLOW_TRACKING_URI", linked_store["uri"])
    assert report_main(["--run", linked_store["population"], "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # the report wraps its prose at report.WIDTH
    head = next(x for x in out.splitlines() if x.startswith("scores in %"))
    cols = re.split(r"\s{2,}", head.strip())
    gsm8k = dict(zip(cols, re.split(r"\s{2,}", next(x for x in out.splitlines() if x.startswith("GSM8K ")).strip())))
    assert [gsm8k[c] for c in ("mean", "weakest", "best", "baseline", "base")] == ["50.0", "0.0", "50.0", "25.0", "0.0"], out
    assert gsm8k["mean - baseline [95%]"].startswith("+25.0 ["), out
    assert sum(x.startswith("verdict: ") for x in out.splitlines()) == 1, out
    assert "a claim about the method needs >= 2 seeds per arm" in flat and "smallest difference this design detects" in flat
    assert "\ncompute: " not in out  # the synthetic runs log no ledger: no compute line (the part below logs one)
    assert "verdict" in (tmp_path / "report.md").read_text()
    # ledgers 1.30x apart (the walk's 237 vs 308): the one compute figure (evaluation/compute.py) says "not
    # compute-matched" and the ratio; advice to use the matching rule only where it was not used; a pair launched
    # together (one populora.pair) realised the gap, and the log says so as the Compare page does
    client = MlflowClient(linked_store["uri"])
    for run, tokens in ((linked_store["population"], 237.0), (linked_store["baseline"], 308.0)):
        client.log_metric(run, "compute/per_adapter/generated_tokens", tokens)
        client.log_metric(run, "compute/per_adapter/trained_tokens", tokens)
    for pair, words in ((None, "compute: not compute-matched: the baseline spent 1.30x the population's per-adapter compute"),
                        ("pair-1", "so this is realised spend")):
        for run in (linked_store["population"], linked_store["baseline"]) if pair else ():
            client.set_tag(run, runlayout.PAIR, pair)
        assert report_main(["--run", linked_store["population"], "--out", str(tmp_path)]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert words in out and ("train the baseline with the matched rule" in out) == (pair is None), out
        assert "compute ledgers, population vs baseline: generated tokens per adapter 237 vs 308" in out, out


def test_compare_and_the_report_say_what_a_baseline_of_a_crashed_population_was_matched_to(linked_store, monkeypatch,
                                                                                           tmp_path, capsys):
    """A pair whose population crashed: the baseline's ``populora.budget_matched`` (training/compute/budget.py) is said
    after the one compute figure's ratio on Compare's ledger panel and in the report, and the panel says the
    baseline was trained to the ledger."""
    from populora.evaluation.cli import report_main

    client = MlflowClient(linked_store["uri"])
    note = "matched to the population's spend at its last logged step 3 of 4 (the population crashed: no heartbeat for 10 min)"
    for run, tokens in ((linked_store["population"], 450.0), (linked_store["baseline"], 455.0)):
        client.log_metric(run, "compute/per_adapter/generated_tokens", tokens)
        client.log_metric(run, "compute/per_adapter/trained_tokens", tokens)
        client.set_tag(run, runlayout.PAIR, "pair-crash")
    client.set_tag(linked_store["baseline"], runlayout.BUDGET, "budget reached: 910 tokens per adapter of 900")
    client.set_tag(linked_store["baseline"], runlayout.BUDGET_MATCHED, note)
    at = _compare(linked_store, monkeypatch, tmp_path)
    words = "compute-matched: the baseline spent 1.01x the population's per-adapter compute (910 vs 900 generated + trained tokens; FLOPs 1.01x); " + note
    assert words in [c.value for c in at.caption], [c.value for c in at.caption]
    assert "the baseline trained to the population's per-adapter ledger (budget.population)" in texts(at)
    assert report_main(["--run", linked_store["population"], "--out", str(tmp_path)]) == 0
    assert " ".join(capsys.readouterr().out.split()).count(f"compute: {words}") == 1  # one compute line
