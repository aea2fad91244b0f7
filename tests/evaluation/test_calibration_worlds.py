"""The report-level calibration's parts against known answers, fast (the full table: ``populora bench stats``,
``--small-n``): the other generative models' laws and truths, the words it reads, its checks, and a few fixed-seed
worlds run through ``verdict.build`` / ``sweep_report.build`` whose claims hold their level."""

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

from populora.evaluation.statistics import calibration_worlds as W
from populora.evaluation.statistics import power, stats


def test_the_difficulty_laws_have_their_stated_means_and_the_seed_laws_their_sd():
    q = (np.arange(20000) + 0.5) / 20000
    beta = W.Model("b", spread=4.0)
    assert W.quantiles(beta, "gsm8k", q).mean() == pytest.approx(power.BASE_SCORE["gsm8k"], abs=1e-3)
    mix = W.Model("m", "mixture", impossible=0.3)
    p = W.quantiles(mix, "math500", q)
    assert np.mean(p <= 1e-4) == pytest.approx(0.3, abs=1e-3)        # 30% nobody solves
    assert p.mean() == pytest.approx(power.BASE_SCORE["math500"], abs=2e-3)  # the solvable part carries the mean
    ln = W.Model("l", "logitnormal", spread=1.5)
    lp = np.log(W.quantiles(ln, "aime24", q) / (1 - W.quantiles(ln, "aime24", q)))
    assert lp.std() == pytest.approx(1.5, abs=0.02)
    rng = np.random.default_rng(0)
    for m in (W.Model("t", sigma=0.2, tails=3.0), W.Model("t shared", sigma=0.2, tails=3.0, shared=1.0),
              W.Model("half", sigma=0.2, shared=0.5)):
        u = W.seed_effects(rng, m, 40000, 3)
        assert u.std() == pytest.approx(0.2, rel=0.05)
        corr = np.corrcoef(u[:, 0], u[:, 1])[0, 1]
        assert corr == pytest.approx(m.shared, abs=0.03)              # the shared share is the correlation
    assert sps.kurtosis(W.seed_effects(rng, W.Model("t", tails=3.0), 40000, 1).ravel()) > 2  # heavy tails


def test_expected_scores_are_the_laws_means():
    m = W.Model("b", spread=1.0, sigma=0.0)
    assert W.expected(m, "gsm8k", 0.0) == pytest.approx(power.BASE_SCORE["gsm8k"], abs=2e-3)
    # over a symmetric seed law the mean moves toward 1/2 (the logistic is convex below it, concave above)
    wide = replace(m, sigma=1.0)
    assert W.expected(m, "aime24", 0.0) < W.expected(wide, "aime24", 0.0)
    assert W.expected(wide, "gsm8k", 0.0) < W.expected(m, "gsm8k", 0.0)


def test_the_words_it_reads():
    one = ("population mean beats the baseline on 2 of 10 benchmarks (Holm-adjusted p < 0.05: 2 above, 0 below; "
           "higher on 6 before adjustment); overall: +1.0 pts. One training seed per arm: this describes these "
           "adapters on these problems, not the method.")
    assert W._words_claims(one, 1) == {"headline names a win": True, "method claim made": True}
    fixed = one.replace("beats the baseline on 2 of 10 benchmarks", "beats the baseline on 2 of 10 benchmarks "
                        "(these adapters on these problems)")
    assert W._words_claims(fixed, 1)["method claim made"] is False
    assert W._words_claims(one.replace("on 2 of", "on 0 of"), 3) == {"headline names a win": False}


def test_checks_read_rates_from_above_and_coverage_both_ways_or_from_below_on_small_n():
    claims = {"fires overall": {"rate": 0.07, "mc_error": 0.01}, "covers overall": {"rate": 0.99, "mc_error": 0.01},
              "family fires": {"rate": 0.2, "mc_error": 0.01}, "_sigma": 0.2}
    table = {"regimes": {"r": {"seeds=3": claims, "seeds=1": dict(claims)}}}
    got = {(c["seeds"], c["claim"]): c["ok"] for c in W.checks(table)}
    assert got[("seeds=3", "fires overall")] is False and got[("seeds=3", "covers overall")] is False
    assert ("seeds=1", "family fires") not in got  # one seed with a seed effect: the adapters do differ
    small = {(c["seeds"], c["claim"]): c["ok"] for c in W.checks(table, small_n=True)}
    assert small[("seeds=3", "covers overall")] is True  # over-coverage is the price of no zero width at n = 3


def test_a_few_heavy_tailed_shared_worlds_through_the_report_hold_their_level():
    """Three seeds per arm, heavy-tailed seed effects shared by the benchmarks, 30 problems each: the report's
    primary comparison, Holm family and headline stay near 5% and its intervals cover (a smoke-sized sample:
    30 worlds of 20 problems a benchmark, 2 Monte Carlo errors; the full table: ``populora bench stats``)."""
    n = {b: 20 for b in power.BASE_SCORE}
    m = W.Model("t3 shared", sigma=0.2, shared=1.0, tails=3.0, seeds=3)
    summary, mdes = W.run_model(m, n, 30, seed=3)
    for claim in ("fires overall", "family fires", "headline names a win"):
        assert summary[claim]["rate"] <= 0.05 + 2 * summary[claim]["mc_error"], (claim, summary[claim])
    for claim in ("covers overall", "score covers (mean of benchmarks)", "covers (mean of benchmarks)"):
        assert summary[claim]["rate"] >= 0.95 - 2 * summary[claim]["mc_error"], (claim, summary[claim])
    assert all(x is None or x > 0 for x in mdes)


def test_the_table_does_not_depend_on_the_number_of_worker_processes():
    """Each regime draws from its own fixed seed: ``--jobs 2`` gives the serial table, exactly."""
    kw = dict(sizes=(3,), accuracies=(0.03,), seed_counts=((1, 0.0), (3, 0.2)))
    assert W.small_n(10, 5, jobs=2, **kw) == W.small_n(10, 5, jobs=1, **kw)


def test_an_unsolved_benchmark_over_several_seeds_counts_its_problems_not_its_cells():
    """30 problems nobody solved on 5 seeds: the same problems five times, not 150 trials. Wilson at n = 30,
    0 to z^2 / (30 + z^2) = 11.3% (at 150 cells it read 0 to 2.5%, under the 3% such a benchmark often has: the
    small-n calibration's multi-seed score coverage 0.85-0.90 at accuracy 0.03)."""
    z = sps.norm.isf(0.025)
    est = stats.seed_estimate([np.zeros((5, 30))])
    assert est.ci95[0] == 0.0 and est.ci95[1] == pytest.approx(z * z / (30 + z * z), rel=1e-9)
    # with >= 10 successes and failures the cells count (the variance decides): narrower than the problems alone
    x = (np.random.default_rng(0).random((5, 30)) < 0.4).astype(float)
    lo, hi = stats.seed_estimate([x]).ci95
    assert lo < x.mean() < hi and hi - lo > 0


@pytest.mark.parametrize("claim,nominal", [("fires overall", 0.05), ("covers overall", 0.95)])
def test_chance_outside_is_the_binomial_share_the_checks_themselves_put_outside(claim, nominal):
    # every estimate k / R a table of R worlds can hold, judged by ``checks`` as printed, weighted by its
    # binomial probability at the nominal value: the count chance_outside promises
    reps = 200
    k = np.arange(reps + 1)
    outside = []
    for hat in k / reps:
        c = {"rate": float(hat), "mc_error": W.mc_error(float(hat), reps, nominal)}
        table = {"replicates": reps, "regimes": {"r": {"seeds=3": {claim: c, "_sigma": 0.2}}}}
        outside.append(not W.checks(table)[0]["ok"])
    expected = float(sps.binom.pmf(k, reps, nominal)[np.array(outside)].sum())
    got = W.chance_outside(W.checks({"replicates": reps, "regimes": {"r": {"seeds=3": {
        claim: {"rate": nominal, "mc_error": 0.01}, "_sigma": 0.2}}}}))
    assert got == pytest.approx(expected, abs=1e-12)
    assert (0.10 < got < 0.20) if claim == "fires overall" else (got < 0.10)  # a rate at 5%: ~16% outside


def _table_of(rng, nominal_checks: int, reps: int, planted: float | None = None) -> list[dict]:
    """Checks of rates drawn at exactly their nominal 5% over ``reps`` worlds each (and one at ``planted``)."""
    rates = list(rng.binomial(reps, W.ALPHA, nominal_checks) / reps) + ([rng.binomial(reps, planted) / reps] if planted else [])
    return [{"regime": f"r{i}", "seeds": "seeds=3", "claim": "fires overall", "rate": float(r), "nominal": W.ALPHA,
             "mc_error": W.mc_error(float(r), reps, W.ALPHA), "replicates": reps} for i, r in enumerate(rates)]


def test_holms_evidence_over_a_table_at_nominal_fires_at_most_5pct_while_the_1_mc_error_rule_fires_in_most():
    """148 rates exactly at 5% over 200 worlds each (the full table's size): the per-check rule puts some outside
    in nearly every table; Holm's adjusted p names one in at most 5% of tables (its guarantee; 600 tables, MC
    error 0.009), and a rate planted at 12% over 400 worlds among them is named in >= 95% (100 tables)."""
    rng = np.random.default_rng(52)
    named, outside, found = 0, 0, 0
    tables = 600
    for _ in range(tables):
        checks_ = _table_of(rng, 148, 200)
        named += any(e["p_adjusted"] < W.ALPHA for e in W.evidence(checks_))
        outside += any(not W.within("rate", c["rate"], c["mc_error"], c["nominal"]) for c in checks_)
    for _ in range(100):
        ev = W.evidence(_table_of(rng, 147, 400, planted=0.12))
        found += any(e["regime"] == "r147" and e["p_adjusted"] < W.ALPHA for e in ev)
    print(f"Holm names a check in {named / tables:.3f} of tables at nominal; the planted rate in {found / 100:.2f}")
    assert named / tables <= 0.05 + 0.009, named / tables
    assert outside / tables > 0.99  # what "every check within 1 MC error" asks of an exact calibration
    assert found / 100 >= 0.95, found / 100


@pytest.mark.parametrize("claim,small_n", [("fires overall", False), ("power at the printed MDE", False),
                                           ("covers overall", False), ("covers overall", True),
                                           ("score covers (mean of benchmarks)", False)])
def test_a_violation_p_lies_in_0_1_falls_as_the_estimate_moves_past_its_bound_and_is_large_inside(claim, small_n):
    nominal = {"rate": 0.05, "power": 0.80, "coverage": 0.95}[W.kind_of(claim)]
    reps = 400
    grid = np.linspace(0.0, 1.0, 201)
    ps = [W.violation_p({"claim": claim, "rate": float(r), "nominal": nominal, "replicates": reps,
                         "mc_error": W.mc_error(float(r), reps, nominal)}, small_n) for r in grid]
    assert all(0.0 <= p <= 1.0 for p in ps)
    kind = W.kind_of(claim)
    if kind == "rate":  # worse = higher
        assert all(a >= b - 1e-12 for a, b in zip(ps, ps[1:])) and ps[int(0.05 * 200)] > 0.4 and ps[int(0.15 * 200)] < 1e-6
    elif kind == "power":  # worse = lower
        assert all(a <= b + 1e-12 for a, b in zip(ps, ps[1:])) and ps[160] > 0.4 and ps[120] < 1e-6
    else:
        assert ps[190] > 0.2  # 0.95, inside the window
        assert ps[170] < 1e-3  # 0.85, below it
        assert (ps[200] > 0.5) if small_n else (ps[200] < 0.01)  # 1.00: over-coverage counts unless --small-n


def test_a_check_outside_is_drawn_again_from_an_independent_stream_and_judged_by_the_same_rule():
    """``populora bench stats --recheck K``: a check outside its bound is judged again on K x its worlds of the same
    regime (model and sizes as the table kept them), drawn from the table's seed + RECHECK_STREAM, by ``checks``'
    own rule on that estimate alone; checks inside are not drawn again, and a regime with two checks outside is
    drawn once."""
    kw = dict(sizes=(3,), accuracies=(0.03,), seed_counts=((3, 0.2),))
    table = W.small_n(12, 5, **kw)
    found = W.checks(table, small_n=True)
    assert all(c["ok"] for c in found)  # 3 problems at 3%: every check holds (the full table: --small-n)
    pretend = [dict(c, ok=c["claim"] not in ("fires overall", "covers overall")) for c in found]
    again = W.recheck(table, pretend, factor=2, seed=5, small_n=True)
    assert [(r["claim"], r["replicates"]) for r in again] == [("fires overall", 24), ("covers overall", 24)]
    regime, seeds = again[0]["regime"], again[0]["seeds"]
    kept = table["regimes"][regime][seeds]
    m = W.Model(**kept["_model"])
    assert (m.seeds, m.accuracy, m.sigma, m.shared) == (3, 0.03, 0.2, 1.0)
    assert kept["_sizes"] == {b: 3 for b in power.BASE_SCORE}
    fresh, _ = W.run_model(m, kept["_sizes"], 24, 5 + W.RECHECK_STREAM)
    for r in again:
        first = next(c for c in found if c["claim"] == r["claim"])
        assert r["first_rate"] == first["rate"] and r["rate"] == fresh[r["claim"]]["rate"]
        assert r["ok"] == W.within(W.kind_of(r["claim"]), r["rate"], r["mc_error"], r["nominal"], small_n=True)
    assert W.recheck(table, found, factor=2, seed=5, small_n=True) == []  # nothing outside: nothing drawn


def test_a_power_check_outside_is_drawn_again_at_the_printed_mde_of_its_model():
    n = {b: 4 for b in power.BASE_SCORE}
    m = replace(W.POWER_MODELS[0], seeds=3)
    first = W.power_at_printed(m, n, 10, 2)
    table = {"replicates": 10, "sizes": n, "regimes": {}, "power": [first]}
    check = dict(W.checks(table)[0], ok=False)
    (again,) = W.recheck(table, [check], factor=1, seed=2)
    fresh = W.power_at_printed(m, n, 10, 2 + W.RECHECK_STREAM)
    assert (again["claim"], again["seeds"], again["rate"]) == ("power at the printed MDE", "seeds=3", fresh["rate"])


@pytest.mark.parametrize("replicates", [200, 400])
def test_an_exact_claim_is_outside_both_the_table_and_its_recheck_about_2pct_of_the_time(replicates):
    """The recheck's promise in numbers: a rate at exactly 5% (or power at exactly 80%: claims that sit on their
    bound; a coverage of 0.95 sits inside its window) is outside 1 MC error in 13-16% of tables, and on an
    independent recheck of 5x the worlds as well in ~2% (the product)."""
    assert W.chance_outside([{"claim": "covers overall", "nominal": 0.95, "replicates": replicates}]) < 0.01
    for claim, nominal in (("fires overall", 0.05), ("power at the printed MDE", 0.80)):
        first = W.chance_outside([{"claim": claim, "nominal": nominal, "replicates": replicates}])
        second = W.chance_outside([{"claim": claim, "nominal": nominal, "replicates": W.RECHECK * replicates}])
        assert 0.10 < first < 0.20 and 0.10 < second < 0.20, (claim, first, second)
        assert 0.01 < first * second < 0.03


def test_the_order_check_finds_a_remembered_answer_keyed_without_the_noise(monkeypatch):
    """``bench stats``' order check (exact, no Monte Carlo): every design priced alone, in one order and in the
    reverse answers alike; with ``_needs``' key before issue 68 (``design_key`` without ``Design.noise``) designs
    that differ only in their noise answer otherwise, and the check says so, judged exact and taken as evidence."""
    n = {"gsm8k": 400, "aime24": 300}
    good = W.order_check(n)
    assert (good["count"], good["differ"]) == (15, 0)
    original = power.design_key
    monkeypatch.setattr(power, "design_key", lambda d: original(d)[:-1])  # the noise left out of the key
    bad = W.order_check(n)
    assert bad["differ"] > 0
    (check,) = W.checks({"replicates": 10, "regimes": {}, "exact": [bad]})
    assert check["claim"] == W.ORDER_CLAIM and not check["ok"] and W.kind_of(check["claim"]) == "exact"
    assert W.violation_p(check) == 0.0 and W.evidence([check])[0]["p_adjusted"] == 0.0
    (fine,) = W.checks({"replicates": 10, "regimes": {}, "exact": [good]})
    assert fine["ok"] and W.violation_p(fine) == 1.0
    assert W.recheck({"replicates": 10, "regimes": {}}, [check]) == []  # nothing of chance to draw again


def test_the_sampled_agreement_check_finds_a_sweep_priced_without_its_samples(monkeypatch):
    """``bench stats``' exact check of issue 68's third mend: one seed of 8 samples per problem, the sweep
    report's MDE is the run's own report's in every world; with the sweep reading no samples (as before: 1 per
    problem) it is not."""
    from populora.evaluation.statistics import sweep_report
    n = {"gsm8k": 60, "humaneval_plus": 40}
    assert W.sampled_agreement(n, worlds=2)["differ"] == 0
    monkeypatch.setattr(sweep_report, "_scored_of", lambda *a: {})
    bad = W.sampled_agreement(n, worlds=2)
    assert bad["differ"] == 2 and not W.checks({"regimes": {}, "exact": [bad]})[0]["ok"]
