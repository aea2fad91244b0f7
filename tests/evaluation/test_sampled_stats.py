"""Sampled evaluation's statistics against known truth (cheap: numpy draws and 800 small bootstraps, a few seconds): N samples per problem averaged
within the problem (the problem stays the bootstrap's unit) give an interval that covers the true pass@1 at its
nominal 95% and is narrower than one sample's (greedy's, at the same accuracy) by the factor Miller (2024) gives,
sqrt((var_between + var_within / N) / (var_between + var_within)); ``stats.one_sample_stderr`` is the one-sample
standard error; ``power.Design(samples=N)`` prices the per-problem noise of a difference as the draws have it."""

from __future__ import annotations

import numpy as np

from populora.evaluation.statistics import power, stats

A = B = 0.5            # p_i ~ Beta(0.5, 0.5): true pass@1 0.5, var_between = var_within = 0.125
TRUTH = A / (A + B)
VAR_BETWEEN = A * B / ((A + B) ** 2 * (A + B + 1))
VAR_WITHIN = TRUTH - (VAR_BETWEEN + TRUTH ** 2)      # E p (1 - p)
PROBLEMS, SAMPLES, REPLICATES = 60, 8, 400


def test_within_problem_average_covers_and_narrows_as_the_variance_says():
    rng = np.random.default_rng(20261126)
    covered = {1: [], SAMPLES: []}
    widths = {1: [], SAMPLES: []}
    one_sample_se = []
    for r in range(REPLICATES):
        p = rng.beta(A, B, PROBLEMS)
        draws = rng.random((PROBLEMS, SAMPLES)) < p[:, None]
        for n in (1, SAMPLES):
            per = draws[:, :n].mean(axis=1)              # pass@1 averaged within each problem
            ci = stats.estimate([per], seed=r, n_resamples=1000).ci95
            covered[n].append(ci[0] <= TRUTH <= ci[1])
            widths[n].append(ci[1] - ci[0])
        per = draws.mean(axis=1)
        one_sample_se.append(stats.one_sample_stderr(per.mean(), PROBLEMS) / stats.mean_stderr(draws[:, 0]))
    mc = np.sqrt(0.95 * 0.05 / REPLICATES)               # Monte Carlo error of a coverage rate: 0.011
    for n in (1, SAMPLES):
        # a percentile bootstrap of 60 problems under-covers a little (~0.94): within 3 MC errors of 0.95
        assert abs(np.mean(covered[n]) - 0.95) <= 3 * mc, (n, np.mean(covered[n]))
    ratio = np.asarray(widths[SAMPLES]) / np.asarray(widths[1])
    expected = np.sqrt((VAR_BETWEEN + VAR_WITHIN / SAMPLES) / (VAR_BETWEEN + VAR_WITHIN))   # 0.75
    assert abs(ratio.mean() - expected) <= 3 * ratio.std(ddof=1) / np.sqrt(REPLICATES) + 0.01, (ratio.mean(), expected)
    # the one-sample SE computed from the N-sample pass@1 matches the SE of the first sample alone
    assert abs(np.mean(one_sample_se) - 1) <= 3 * np.std(one_sample_se, ddof=1) / np.sqrt(REPLICATES) + 0.01


def test_design_samples_prices_the_noise_of_a_sampled_difference():
    """One seed, no seed effect: the variance of (population mean of M members - baseline) on a benchmark with N
    samples per problem is what ``power.Design(samples=N)`` assumes: sum p(1 - p) (1/M + 1) / N / P^2."""
    rng = np.random.default_rng(7)
    p = {"gsm8k": power.beta_p({"gsm8k": 0.6}, {"gsm8k": 200})["gsm8k"]}
    design = power.Design(p, seeds=1, samples=SAMPLES, sigma=0.0)
    noise, _ = power._variances(design, {"gsm8k": 1.0})
    reps = 4000
    q = p["gsm8k"]
    members = rng.binomial(SAMPLES, q, (reps, power.MEMBERS, len(q))) / SAMPLES
    baseline = rng.binomial(SAMPLES, q, (reps, len(q))) / SAMPLES
    diff = members.mean(axis=1).mean(axis=1) - baseline.mean(axis=1)
    # the relative Monte Carlo error of a variance over R draws is sqrt(2 / (R - 1)): 2.2% here
    assert abs(diff.var(ddof=1) / noise - 1) <= 3 * np.sqrt(2 / (reps - 1)), diff.var(ddof=1) / noise
