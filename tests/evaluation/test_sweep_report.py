"""The statistics report of evaluated runs, from per-problem verdicts in samples files (no model, no MLflow)."""

import json

import numpy as np
import pytest

from populora.evaluation.harness import benchmarks
from populora.evaluation.statistics import sweep_report as R
from populora.evaluation.summary import population_summary


def _samples(tmp, name, verdicts, kind="math"):
    path = tmp / f"{name}.jsonl"
    rows = []
    for i, ok in enumerate(verdicts):
        if kind == "evalplus":
            rows.append({"task_id": f"HumanEval/{i}", "base_status": "pass", "plus_status": "pass" if ok else "fail"})
        else:
            rows.append({"task_id": f"gsm8k/{i}", "correct": bool(ok)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _results(tmp, tag, members: dict, baseline=None):
    """A results.json (results.build layout) whose members solve the given problems of humaneval_plus and gsm8k."""
    res, targets = {}, {}
    for label, (code, math) in {**members, **({"baseline (B0)": baseline} if baseline else {})}.items():
        res[label] = {"humaneval_plus": {"score": float(np.mean(code)), "samples_file": _samples(tmp, f"{tag}{label}c", code, "evalplus")},
                      "gsm8k": {"score": float(np.mean(math)), "samples_file": _samples(tmp, f"{tag}{label}m", math)}}
        targets[label] = {"kind": "baseline" if label.startswith("baseline") else "member", "alive": "true"}
    return {"results": res, "targets": targets}


def test_run_arms_population_mean_weakest_best_per_problem(tmp_path):
    data = _results(tmp_path, "r", {"T0": ([1, 1, 0, 0], [1, 0]), "S0": ([0, 0, 0, 0], [0, 0])}, ([1, 0, 0, 0], [1, 1]))
    arms = R.run_arms(data)
    assert arms["population mean"]["humaneval_plus"] == {"HumanEval/0": 0.5, "HumanEval/1": 0.5, "HumanEval/2": 0.0, "HumanEval/3": 0.0}
    assert arms["weakest"]["gsm8k"] == {"gsm8k/0": 0.0, "gsm8k/1": 0.0}
    assert arms["best"]["gsm8k"] == {"gsm8k/0": 1.0, "gsm8k/1": 0.0}
    assert arms["baseline"]["gsm8k"] == {"gsm8k/0": 1.0, "gsm8k/1": 1.0}
    single = R.single_run(arms)
    assert [c["name"] for c in single["comparisons"]] == ["run: population mean vs baseline", "run: weakest member vs baseline"]
    mean_vs = single["comparisons"][0]
    # overall = unweighted mean of the two benchmarks: pop (0.25 + 0.25) / 2, baseline (0.25 + 1) / 2
    assert mean_vs["delta"] == pytest.approx(0.25 - 0.625)


def test_sweep_report_rows_and_paired_comparisons():
    # the null comparison below is one draw of a 5% test (its rate is test_calibration's); with rng 0 its three
    # per-seed differences happen to agree (p = 0.044), with rng 1 they do not
    rng = np.random.default_rng(1)
    problems = {"humaneval_plus": [f"HumanEval/{i}" for i in range(60)], "gsm8k": [f"gsm8k/{i}" for i in range(80)]}

    def arm(p):
        return {b: {q: float(rng.random() < p) for q in qs} for b, qs in problems.items()}

    def seed_arms(p):
        a = arm(p)
        return {"population mean": a, "weakest": arm(p - 0.1), "best": arm(p + 0.1)}

    configs = {"baseline": {s: seed_arms(0.3) for s in range(3)},
               "population.students=1 population.teachers=1": {s: seed_arms(0.3) for s in range(3)},
               "population.students=4 population.teachers=4": {s: seed_arms(0.8) for s in range(3)}}
    report = R.build(configs, [("population.students=4 population.teachers=4", "population.students=1 population.teachers=1")])
    assert [r["config"] for r in report["configs"]] == [{"population.single_agent": True},
                                                        {"population.students": 1, "population.teachers": 1},
                                                        {"population.students": 4, "population.teachers": 4}]
    for r in report["configs"]:
        assert r["seeds"] == [0, 1, 2] and r["overall"]["ci95"][0] <= r["overall"]["mean"] <= r["overall"]["ci95"][1]
        assert set(r["population mean"]) == {"humaneval_plus", "gsm8k", "code avg", "math avg", "overall"}
    by = {c["name"]: c for c in report["comparisons"]}
    assert len(by) == 5
    big = by["population.students=4 population.teachers=4: population mean vs baseline"]
    # 3 seeds per arm: a claim about the method, the seed-level t with 2 degrees of freedom (a 50-point gain)
    assert big["delta"] > 0.3 and not big["includes_zero"] and big["p_value"] < 0.01 and big["level"] == "method"
    assert big["seeds"] == 3 and "a difference of the method" in big["words"] and big["mde"] > 0
    same = by["population.students=1 population.teachers=1: population mean vs baseline"]
    assert abs(same["delta"]) < 0.1 and same["includes_zero"] and same["p_value"] > 0.05
    assert "no difference this data can tell from noise" in same["words"] and "this design detects >=" in same["words"]
    # the two primaries (each configuration's overall population mean vs baseline) are Holm-adjusted together
    assert big["p_adjusted"] == pytest.approx(min(1.0, 2 * big["p_value"]) if big["p_value"] < same["p_value"] else big["p_adjusted"])
    verdict = report["verdicts"]["population.students=4 population.teachers=4"]
    assert verdict["level"] == "method" and verdict["seeds"] == [0, 1, 2] and verdict["mde"]["seeds"] == 3
    # one family per comparison (families.py), the same wherever it is printed: the primary adjusted among the
    # two configurations in the verdict too (and its MDE priced at 0.05 / 2); weakest member overall in the
    # configuration's family of every other comparison, in the list of comparisons as in the verdict
    overall = next(r for r in verdict["rows"] if r["name"] == "overall")
    assert overall["mean - baseline"]["p_adjusted"] == big["p_adjusted"] and verdict["mde"]["alpha_overall"] == 0.025
    weakest = by["population.students=4 population.teachers=4: weakest member vs baseline"]
    assert weakest["p_value"] == pytest.approx(overall["weakest - baseline"]["p_value"])
    assert weakest["p_adjusted"] == overall["weakest - baseline"]["p_adjusted"] and verdict["family"] == 9
    assert weakest["mde"] is None  # the primary's MDE is not the weakest member's
    assert big["p_adjusted"] == pytest.approx(2 * big["p_value"])  # the smaller of two primaries: Holm's x 2
    assert f"Holm-adjusted over the configurations p={big['p_adjusted']:.2g}" in verdict["words"]
    assert verdict["words"].startswith("population mean beats the baseline on ")
    assert "3 training seeds per arm: a claim about the method" in verdict["words"]
    agg = report["aggregates"]
    assert agg["benchmarks"] == ["humaneval_plus", "gsm8k"]
    assert agg["probability_of_improvement"]["population.students=4 population.teachers=4"]["value"] == 1.0
    assert "population.students=4 population.teachers=4 vs population.students=1 population.teachers=1: population mean" in by
    table = R.text(report)
    assert "overall" in table and "baseline" in table and "95%" in table
    assert "| baseline | 3 |" in R.markdown(report)
    assert "rliable (Agarwal et al. 2021)" in table and "P(population.students=4 population.teachers=4 > baseline) = 1.00" in table


def test_run_arms_weakest_and_best_are_cross_fitted(tmp_path):
    # half A of 4 problems = ids 0, 2; half B = 1, 3. On half A, S0 is weakest (0 solved) and T0 best (2); on
    # half B, T0 is weakest (0) and S0 best (2). The weakest arm scores half B with S0 and half A with T0.
    data = _results(tmp_path, "x", {"T0": ([1, 0, 1, 0], [1, 0]), "S0": ([0, 1, 0, 1], [1, 0])})
    arms = R.run_arms(data)
    code = {f"HumanEval/{i}": v for i, v in enumerate([1.0, 1.0, 1.0, 1.0])}
    assert arms["weakest"]["humaneval_plus"] == code  # selected on the same problems both would score 0.5
    assert arms["best"]["humaneval_plus"] == {k: 0.0 for k in code}


def test_run_arms_with_one_problem_each_fall_back_to_the_biased_pick_ties_to_the_first(tmp_path):
    # one problem per benchmark: nothing to cross-fit on. Overall (mean over the 2 benchmarks): T0 0.5, S0 0.0,
    # S1 0.0, T1 1.0, S2 1.0; weakest and best go to the first listed of the tied (``min`` / ``max`` keep the first)
    data = _results(tmp_path, "one", {"T0": ([1], [0]), "S0": ([0], [0]), "S1": ([0], [0]), "T1": ([1], [1]),
                                       "S2": ([1], [1])})
    arms = R.run_arms(data)
    assert arms["weakest"] == {"humaneval_plus": {"HumanEval/0": 0.0}, "gsm8k": {"gsm8k/0": 0.0}}
    assert arms["best"] == {"humaneval_plus": {"HumanEval/0": 1.0}, "gsm8k": {"gsm8k/0": 1.0}}
    ends = population_summary({m: {} for m in data["results"]}, rank={"T0": 0.5, "S0": 0.0, "S1": 0.0, "T1": 1.0, "S2": 1.0})
    assert (ends.picks, ends.ties) == ({"weakest": ["S0"], "best": ["T1"]}, {"weakest": ["S1"], "best": ["S2"]})


def test_arms_on_different_problem_sets_are_refused_not_intersected(tmp_path):
    full = R.run_arms(_results(tmp_path, "f", {"T0": ([1, 0, 1, 0], [1, 0]), "S0": ([0, 0, 0, 1], [1, 1])}))
    limited = R.run_arms(_results(tmp_path, "l", {"T0": ([1, 0], [1, 0]), "S0": ([0, 0], [1, 1])}))
    with pytest.raises(R.ReportError, match=r"different problem sets: humaneval_plus \(a seed 0 n=4, b seed 0 n=2\)"):
        R.build({"a": {0: full}, "b": {0: limited}}, [("a", "b")])
    with pytest.raises(R.ReportError, match=r"humaneval_plus \(run seed 0 n=4, run seed 1 n=2\)"):
        R.build({"run": {0: full, 1: limited}})
    # members of one run evaluated on different problems: refused too
    mixed = _results(tmp_path, "m", {"T0": ([1, 0, 1, 0], [1, 0]), "S0": ([0, 0], [1, 1])})
    with pytest.raises(R.ReportError, match=r"different problems of humaneval_plus \(T0: n=4, S0: n=2\)"):
        R.run_arms(mixed)


def test_rows_carry_azr_averages_beside_ours():
    rng = np.random.default_rng(1)
    problems = {"humaneval_plus": 40, "aime24": 30, "gsm8k": 50}
    arm = {b: {f"{b}/{i}": float(rng.random() < 0.5) for i in range(n)} for b, n in problems.items()}
    report = R.build({"run": {0: {"population mean": arm, "weakest": arm, "best": arm}}})
    row = report["configs"][0]["population mean"]
    mean = {b: np.mean(list(arm[b].values())) for b in problems}
    assert row["math avg"]["mean"] == pytest.approx((mean["aime24"] + mean["gsm8k"]) / 2)  # ours: incl. GSM8K
    assert row["math avg (AZR)"]["mean"] == pytest.approx(mean["aime24"])                   # AZR's: without
    assert row["total (AZR)"]["mean"] == pytest.approx((mean["humaneval_plus"] + mean["aime24"]) / 2)
    assert row["overall"]["mean"] == pytest.approx(np.mean(list(mean.values())))
    assert "total (AZR)" in R.text(report) and "AZR's math avg leaves out GSM8K" in R.markdown(report)


def test_the_averages_heads_say_how_many_benchmarks_were_scored():
    cell = {"mean": 0.5, "ci95": [0.4, 0.6]}
    four = {"configs": [{"label": "run", "seeds": [0, 1, 2], "population mean": {
        **{b: cell for b in ("humaneval_plus", "mbpp_plus", "aime24", "gsm8k")}, "overall": cell}}]}
    heads = R._heads(four)
    assert "overall (mean of 4)" in heads and "math avg (2 of 7 incl. GSM8K)" in heads
    assert "math avg (AZR: 1 of 6)" in heads and "overall (mean of 10)" not in heads
    every = {"configs": [{"label": "run", "seeds": [0], "population mean": {
        **{b: cell for b in benchmarks.BENCHMARKS}, "overall": cell}}]}
    assert R._heads(every) == list(R.TEXT_COLUMNS.values())


def _sampled_world(seeds: int, samples: int = 8):
    """A world of four members and a baseline on three benchmarks, each problem scored as the mean of ``samples``
    draws at a temperature (its config says so), and the baseline's own run (its one adapter alone)."""
    from dataclasses import replace

    from populora.evaluation.statistics import calibration_worlds as W
    from populora.evaluation.summary import Results
    m = replace(W.SAMPLED, samples=samples, seeds=seeds)
    n = {"gsm8k": 120, "humaneval_plus": 60, "aime24": 30}
    runs, _ = W.world(np.random.default_rng(11), m, n)
    alone = []
    for r in runs:
        raw = {"results": {"B0": r.raw["results"]["B0"]}, "targets": {"B0": {"kind": "baseline"}}, "config": r.config}
        own = Results.from_dict(raw)
        own._tables = {"B0": r.tables()["B0"]}
        alone.append(own)
    return runs, alone


def _sweep(runs, alone, keep_scoring: bool = True) -> dict:
    """The sweep report as ``gather`` reads the runs (``sweep_seed``); ``keep_scoring`` False: as before issue 68,
    without how they were scored."""
    def seed(r, baseline):
        arms = R.sweep_seed(r, baseline)
        return arms if keep_scoring else {k: v for k, v in arms.items() if k != R.SCORED}
    configs = {"run": {s: seed(r, False) for s, r in enumerate(runs)},
               "baseline": {s: seed(r, True) for s, r in enumerate(alone)}}
    return R.build(configs, with_aggregates=False)


def test_a_sweep_scored_with_8_samples_per_problem_prints_the_mde_the_runs_report_prints():
    """Issue 68: ``config_verdict`` priced a sweep's MDE without its samples and members (defaults 1 and 4), so
    8 samples' measured per-problem noise was read as one sample's and the printed MDE fell (1.75 -> 1.13 pts
    overall). One seed of 8 samples per problem: the sweep report prints the MDE ``verdict.build`` prints for
    the same run (the run's own report, Compare), figure for figure and word for word; read without the
    samples it would not."""
    from populora.evaluation.statistics import verdict
    runs, alone = _sampled_world(seeds=1)
    scores = [v for t in runs[0].tables().values() for b in t.values() for v in b.values()]
    assert set(np.round(np.array(scores) * 8, 9)) <= set(range(9)) and len(set(scores)) > 2  # k / 8 per problem
    own = verdict.build(runs[0], with_aggregates=False)["mde"]
    printed = _sweep(runs, alone)["verdicts"]["run"]["mde"]
    assert own["samples"] == printed["samples"] == 8
    for key in ("overall", "per_benchmark", "needs", "sigma", "shared", "words"):
        assert printed[key] == own[key], key
    assert "8 samples per problem" in printed["words"]
    greedy = _sweep(runs, alone, keep_scoring=False)["verdicts"]["run"]["mde"]
    assert greedy["samples"] == 1 and greedy["overall"] != own["overall"]


def test_a_sweep_of_3_seeds_prices_the_samples_it_scored():
    """Three seeds, 8 samples per problem: the per-problem noise measured from the seeds is 8 samples' mean, so
    its slope (how far a logit of seed effect moves the benchmark) is read x 8 (``power.slope``); read as one
    sample's, the seed term and the MDE fell below what the design detects."""
    runs, alone = _sampled_world(seeds=3)
    printed = _sweep(runs, alone)["verdicts"]["run"]["mde"]
    greedy = _sweep(runs, alone, keep_scoring=False)["verdicts"]["run"]["mde"]
    assert printed["samples"] == 8 and greedy["samples"] == 1
    assert printed["overall"] > greedy["overall"]
