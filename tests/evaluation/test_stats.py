"""Bootstrap intervals and paired tests against cases with a known answer."""

import numpy as np
import pytest
from scipy import stats as sps

from populora.evaluation.statistics import stats


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
    assert not c.includes_zero and "higher: these adapters on these problems" in c.words()
    # the same arm against a copy with its sign-symmetric noise: the interval includes 0, p is large
    d = rng.normal(0, 1, 500)
    d -= d.mean()
    null = stats.compare("null", [b + d], [b])
    assert null.includes_zero and null.p_value > 0.5 and "no difference this data can tell from noise" in null.words()


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
    # identical arms: no problem where they disagree, so each direction's share of disagreeing problems is 0 of n,
    # whose Wilson upper end is z^2 / (n + z^2) (the rule of three's kin), never the bootstrap's [0, 0]
    z2 = 1.959963984540054 ** 2
    for n in (20, 5):
        same = stats.compare("same", [np.ones(n)], [np.ones(n)])
        assert same.delta == 0 and same.p_value == 1.0
        assert same.ci95 == pytest.approx((-z2 / (n + z2), z2 / (n + z2)))
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


def test_seed_variance_is_the_crossed_random_effects_variance_of_the_mean():
    # x[s, i] = seed_s + problem_i + noise: the variance of the grand mean over many draws is known,
    # var(seed)/S + var(problem)/P + var(noise)/(S P); the estimate averages to it
    rng = np.random.default_rng(4)
    n_seeds, n_problems, sd_seed, sd_problem, sd_noise = 4, 50, 0.05, 0.2, 0.3
    truth = sd_seed ** 2 / n_seeds + sd_problem ** 2 / n_problems + sd_noise ** 2 / (n_seeds * n_problems)
    estimates, means = [], []
    for _ in range(400):
        x = (rng.normal(0, sd_seed, (n_seeds, 1)) + rng.normal(0, sd_problem, (1, n_problems))
             + rng.normal(0, sd_noise, (n_seeds, n_problems)))
        m, v, df = stats.seed_variance([x])
        estimates.append(v)
        means.append(m)
        assert df >= n_seeds - 1
    assert np.mean(estimates) == pytest.approx(truth, rel=0.1)
    assert np.var(means) == pytest.approx(truth, rel=0.2)


def test_seed_compare_is_the_paired_t_over_seeds_when_nothing_differs_by_problem():
    # per-seed differences 0.1, 0.3, 0.2 on every problem: no problem term; the seed-level t with 2 df
    a = np.array([[0.6] * 5, [0.8] * 5, [0.7] * 5])
    b = np.full((3, 5), 0.5)
    c = stats.seed_compare("a - b", [a], [b])
    d = np.array([0.1, 0.3, 0.2])
    half = 4.302652729911275 * d.std(ddof=1) / np.sqrt(3)  # t(0.975, 2)
    assert c.delta == pytest.approx(0.2) and c.ci95 == pytest.approx((0.2 - half, 0.2 + half))
    assert c.level == stats.METHOD and c.seeds == 3
    with pytest.raises(ValueError, match=">= 2 seeds"):
        stats.seed_compare("one seed", [a[:1]], [b[:1]])


def test_seed_compare_floors_tied_per_seed_differences_instead_of_calling_them_certain():
    # 30 problems, 3 seeds; in each seed a solves 4 problems b does not and b 3 that a does not, and both solve
    # the last 5 (other problems in every seed): the per-seed differences tie at +1/30 (seed term 0, up to
    # rounding), well inside the noise. The plain t gave p ~ 0, past Holm's first step (0.05 / 20); the floor (the
    # 1% quantile of the seed term's law at the residual noise) keeps it above that step.
    a, b = np.zeros((3, 30)), np.zeros((3, 30))
    for s in range(3):
        a[s, 7 * s:7 * s + 4] = 1.0
        b[s, 7 * s + 4:7 * s + 7] = 1.0
    a[:, 25:], b[:, 25:] = 1.0, 1.0  # b: 24 successes in 90 cells, >= intervals.FEW
    d = a - b
    assert np.allclose(d.mean(axis=1), 1 / 30) and d.mean(axis=1).var() < 1e-20  # a tie, up to rounding
    assert not stats._few([a], [b])
    c = stats.seed_compare("tie", [a], [b])
    noise = stats._mean_squares(d)[1] / d.size
    half = stats.sps.t.ppf(0.975, 2) * np.sqrt(noise * stats.sps.chi2.ppf(stats.FLOOR_QUANTILE, 2) / 2)
    assert c.delta == pytest.approx(1 / 30) and c.ci95 == pytest.approx((1 / 30 - half, 1 / 30 + half))
    assert c.p_value > 0.05 / 20
    # without the 5 problems both solve, b has 9 successes (< FEW): the seed term is floored at the noise level's
    # expectation, the variance the per-seed differences have with no seed effect at all
    a[:, 25:], b[:, 25:] = 0.0, 0.0
    assert stats._few([a], [b])
    c = stats.seed_compare("tie, few successes", [a], [b])
    half = stats.sps.t.ppf(0.975, 2) * np.sqrt(stats._mean_squares(a - b)[1] / d.size)
    assert c.ci95 == pytest.approx((1 / 30 - half, 1 / 30 + half)) and c.p_value > 0.05


def test_seed_compare_is_the_seed_level_t_without_the_problem_term():
    # problems differ a lot in how much a beats b (a problem term): the difference's interval is the plain t on
    # the per-seed differences all the same (the benchmark's problems are fixed); an arm's score keeps the term
    rng = np.random.default_rng(6)
    per_problem = rng.normal(0.05, 0.3, 200)
    b = rng.normal(0, 0.2, (3, 200))
    a = b + per_problem + rng.normal(0, 0.05, (3, 1)) + rng.normal(0, 0.2, (3, 200))
    c = stats.seed_compare("a - b", [a], [b])
    d = (a - b).mean(axis=1)
    half = stats.sps.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3)
    assert c.ci95 == pytest.approx((d.mean() - half, d.mean() + half))
    _, v_arm, _ = stats.seed_variance([a - b])  # the same data as a score: seed term + problem term
    assert v_arm > d.var(ddof=1) / 3 + 0.5 * per_problem.var() / 200


def test_one_seed_on_few_problems_never_beats_the_exact_sign_flip_test():
    # one problem, a solves it and b does not: the bootstrap said p = 2 / (B + 1), significant; the flips say 1
    one = stats.compare("one problem", [np.array([[1.0]])], [np.array([[0.0]])])
    assert one.p_value == 1.0 and not one.significant and one.ci95[0] <= 0 < 1 == one.ci95[1]
    # twelve problems: the p-value is at least scipy's exact paired permutation test (all 2^12 sign flips), and
    # the interval includes 0 exactly when p >= 0.05
    rng = np.random.default_rng(8)
    for _ in range(20):
        a, b = rng.binomial(1, 0.8, 12).astype(float), rng.binomial(1, rng.uniform(0.1, 0.8), 12).astype(float)
        c = stats.compare("twelve", [a], [b])
        ref = stats.sps.permutation_test((a - b,), np.mean, permutation_type="samples", n_resamples=np.inf)
        assert c.p_value >= ref.pvalue - 1e-12
        assert c.includes_zero == (c.p_value >= 0.05), (c, ref.pvalue)
    # five of five and six of six: no exact test rejects at 5 (2 / 32), six it does (2 / 64), and so does this
    assert not stats.compare("five", [np.ones(5)], [np.zeros(5)]).significant
    assert stats.compare("six", [np.ones(6)], [np.zeros(6)]).significant


def test_one_seed_p_value_inverts_the_mover_interval():
    # 17 problems: no sign flips; p is the level at which the interval's lower end reaches 0
    a, b = np.zeros(40), np.zeros(40)
    a[:28], b[4:20] = 1, 1  # 28 and 16 of 40; a alone solves 16, b alone 4
    d = stats.intervals.Difference([a], [b], np.ones(1))
    p = d.p_value()
    assert 0 < p < 0.05
    assert d.interval(1 - p * 0.999)[0] < 0 < d.interval(1 - p * 1.001)[0]  # wider at a higher level
    c = stats.compare("forty", [a], [b])
    assert c.p_value == pytest.approx(p) and c.ci95 == pytest.approx(d.interval(0.95))


def test_holm_matches_its_definition():
    p = [0.01, 0.04, 0.03, 0.005, 0.2]
    # sorted: 0.005 x5 = 0.025, 0.01 x4 = 0.04, 0.03 x3 = 0.09, 0.04 x2 = 0.08 -> 0.09 (monotone), 0.2 x1 -> 0.2
    assert stats.holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.025, 0.2])
    assert stats.holm([]) == []


def test_one_seed_words_speak_for_the_adapters_only():
    c = stats.Comparison("mean - baseline", 0.05, (0.01, 0.09), 0.01, stats.ADAPTERS, 1)
    assert "these adapters on these problems, not the method" in c.words()
    c.p_adjusted = 0.2
    assert not c.significant and "no difference this data can tell from noise" in c.words()


def _score_coverage(share: float, n_seeds: int = 3, n_problems: int = 30, worlds: int = 3000) -> float:
    """Coverage of ``seed_estimate``'s t interval (values off [0, 1]) of the true mean 0 when seeds carry
    ``share`` of the mean's variance and problems the rest (x[s, i] = seed_s + problem_i + a little noise)."""
    rng = np.random.default_rng([52, n_seeds, int(share * 100)])
    var = 1e-3
    sd_seed, sd_problem = np.sqrt(share * var * n_seeds), np.sqrt((1 - share) * var * n_problems)
    hits = 0
    for _ in range(worlds):
        x = (rng.normal(0, sd_seed, (n_seeds, 1)) + rng.normal(0, sd_problem, (1, n_problems))
             + rng.normal(0, 1e-3, (n_seeds, n_problems)) - 5.0)  # off [0, 1]: the t path
        lo, hi = stats.seed_estimate([x]).ci95
        hits += lo <= -5.0 <= hi
    return hits / worlds


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_a_multi_seed_score_covers_whatever_share_of_its_variance_the_seeds_carry(share):
    # 3 seeds: the seed term is measured on 2 degrees of freedom; where it dominates, a small reading used to
    # give Satterthwaite large degrees of freedom (0.92 at a share of 0.9). MC error at 3000 worlds: 0.004
    assert 0.935 <= _score_coverage(share) <= 0.975


def test_the_seed_terms_bound_in_the_degrees_of_freedom_is_what_keeps_the_coverage(monkeypatch):
    # the same worlds with the seed term as read (bound 1: chi2(2)'s quantile at 2 is the mean): under-covers
    monkeypatch.setattr(stats, "DF_QUANTILE", float(sps.chi2.cdf(2, 2)))
    assert _score_coverage(0.9) < 0.93
