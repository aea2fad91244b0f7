"""Bootstrap intervals and paired tests against cases with a known answer."""

import numpy as np
import pytest

from populora.evaluation import stats


def test_interval_of_a_mean_matches_the_normal_theory_interval():
    # n = 2000 draws: the bootstrap percentile interval of the mean is the normal interval mean +- 1.96 sd/sqrt(n)
    x = np.random.default_rng(1).normal(0.3, 1.0, size=2000)
    est = stats.estimate([x])
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x))
    assert est.mean == pytest.approx(x.mean())
    assert est.ci95[0] == pytest.approx(x.mean() - half, abs=0.1 * half)
    assert est.ci95[1] == pytest.approx(x.mean() + half, abs=0.1 * half)


def test_binary_scores_interval_matches_the_wald_interval():
    # 120 of 400 problems solved: p = 0.3, Wald half-width 1.96 sqrt(p(1-p)/n) = 0.0449
    x = np.zeros(400)
    x[:120] = 1
    est = stats.estimate([x])
    assert est.mean == pytest.approx(0.3)
    assert est.ci95[0] == pytest.approx(0.3 - 0.0449, abs=0.006)
    assert est.ci95[1] == pytest.approx(0.3 + 0.0449, abs=0.006)


def test_paired_comparison_finds_a_real_difference_and_not_a_null_one():
    rng = np.random.default_rng(2)
    problem_difficulty = rng.normal(size=500)  # shared by both arms: pairing removes it
    a = problem_difficulty + 0.2 + rng.normal(0, 0.5, 500)
    b = problem_difficulty + rng.normal(0, 0.5, 500)
    c = stats.compare("a vs b", [a], [b])
    assert c.delta == pytest.approx(np.mean(a - b))
    diff = a - b  # the known answer: the paired-t interval of the mean difference (n = 500, so z ~ t)
    half = 1.96 * diff.std(ddof=1) / np.sqrt(len(diff))
    assert c.ci95[0] == pytest.approx(diff.mean() - half, abs=0.1 * half)
    assert c.ci95[1] == pytest.approx(diff.mean() + half, abs=0.1 * half)
    assert c.p_value < 0.001
    # unpaired, the shared problem difficulty (sd 1) would swamp a 0.2 difference: pairing is what finds it
    assert half < 0.5 * 1.96 * np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    assert not c.includes_zero and "excludes 0" in c.words()
    # the same arm against a copy with its sign-symmetric noise: the interval includes 0, p is large
    d = rng.normal(0, 1, 500)
    d -= d.mean()
    null = stats.compare("null", [b + d], [b])
    assert null.includes_zero and null.p_value > 0.5 and "includes 0" in null.words()


def test_two_level_bootstrap_with_one_seed_agrees_with_scipy():
    rng = np.random.default_rng(3)
    strata = [rng.binomial(1, 0.4, size=(1, 300)).astype(float), rng.binomial(1, 0.7, size=(1, 200)).astype(float)]
    ci_scipy, _ = stats.bootstrap_distribution(strata)
    dist = stats._two_level(strata, 4000, np.random.default_rng(0))
    assert np.quantile(dist, 0.025) == pytest.approx(ci_scipy[0], abs=0.01)
    assert np.quantile(dist, 0.975) == pytest.approx(ci_scipy[1], abs=0.01)
    assert stats.point(strata) == pytest.approx((strata[0].mean() + strata[1].mean()) / 2)


def test_seed_spread_widens_the_interval():
    # two seeds whose scores differ by 20 points: the two-level interval must be wider than either seed's alone
    rng = np.random.default_rng(4)
    seeds = np.stack([rng.binomial(1, 0.3, 400), rng.binomial(1, 0.5, 400)]).astype(float)
    both = stats.estimate([seeds])
    one = stats.estimate([seeds[:1]])
    assert both.mean == pytest.approx(seeds.mean())
    assert (both.ci95[1] - both.ci95[0]) > 1.5 * (one.ci95[1] - one.ci95[0])


def test_degenerate_and_bad_inputs():
    same = stats.compare("same", [np.ones(5)], [np.ones(5)])
    assert same.delta == 0 and same.ci95 == (0.0, 0.0) and same.p_value == 1.0
    one_problem = stats.estimate([np.array([[1.0], [0.0]])])  # one problem, two seeds: numpy path
    assert one_problem.mean == 0.5 and one_problem.ci95[0] <= 0.5 <= one_problem.ci95[1]
    with pytest.raises(ValueError, match="same shapes"):
        stats.compare("x", [np.ones(3)], [np.ones(4)])
    with pytest.raises(ValueError, match="same seeds"):
        stats.point([np.ones((1, 3)), np.ones((2, 3))])


def test_weighted_average_of_strata():
    # AZR's total = (code avg + math avg) / 2: with one code and two math benchmarks the weights are 1/2, 1/4, 1/4
    rng = np.random.default_rng(5)
    code, m1, m2 = (rng.binomial(1, p, size=(1, n)).astype(float) for p, n in ((0.6, 400), (0.2, 300), (0.4, 300)))
    w = [0.5, 0.25, 0.25]
    est = stats.estimate([code, m1, m2], weights=w)
    assert est.mean == pytest.approx(0.5 * code.mean() + 0.25 * (m1.mean() + m2.mean()))
    # the known answer: the variance of a weighted sum of independent means
    half = 1.96 * np.sqrt(sum(wi ** 2 * x.var(ddof=1) / x.size for wi, x in zip(w, (code, m1, m2))))
    assert est.ci95[0] == pytest.approx(est.mean - half, abs=0.1 * half)
    assert est.ci95[1] == pytest.approx(est.mean + half, abs=0.1 * half)
    dist = stats._two_level([code, m1, m2], 4000, np.random.default_rng(0), np.array(w))  # numpy path agrees
    assert np.quantile(dist, 0.025) == pytest.approx(est.ci95[0], abs=0.01)
    assert stats.point([code, m1, m2]) == pytest.approx((code.mean() + m1.mean() + m2.mean()) / 3)
    with pytest.raises(ValueError, match="one non-negative weight per stratum"):
        stats.point([code, m1], weights=[1.0])
