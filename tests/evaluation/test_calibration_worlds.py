"""The report-level calibration's parts against known answers, fast (the full table: ``populora bench stats``,
``--small-n``): the other generative models' laws and truths, the words it reads, its checks, and a few fixed-seed
worlds run through ``verdict.build`` / ``sweep_report.build`` whose claims hold their level."""

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

from populora.evaluation import calibration_worlds as W
from populora.evaluation import power, stats


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
