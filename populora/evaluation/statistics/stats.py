"""Intervals and paired tests for benchmark scores: is a difference of a point or two more than noise?

The data of one arm (a population's mean member, its weakest member, the baseline) on one benchmark is a
(seeds, problems) array of per-problem scores (pass@1 or accuracy of each problem). Every adapter answers the
same problems, so two arms are compared problem by problem (paired), and seed s of a configuration with seed s
of the other. An average over several benchmarks (code avg, math avg, overall: the unweighted mean of the
benchmark scores, as in ``report.py``; AZR's total, (code avg + math avg) / 2, a weighted one) is stratified:
each benchmark's problems are resampled within it.

Two levels of claim, two intervals. One seed per arm ("these adapters on these problems"): the bootstrap
resamples problems only (``compare``, ``estimate``); it says nothing about the method, since a second training
seed would give other adapters; on 16 problems or fewer its p-value and interval are the exact sign-flip test's
(``sign_flip``). Two or more seeds per arm ("the method"): ``seed_compare`` / ``seed_estimate``, a seed-level t
interval (the variance of the per-seed scores, S-1 degrees of freedom); an arm's score adds the problem term (the
spread of the per-problem scores beyond their noise, from a crossed seeds x problems ANOVA, ``seed_variance``), a
difference floors the seed term at ties instead (``difference_variance``); chosen over the two-level bootstrap
below by the known-truth simulations of ``calibration.py`` (docs/evaluation.md). Across the ten benchmarks x
comparisons, ``holm`` adjusts the p-values (Holm 1979, family-wise rate).

The bootstrap resamples problems (and, with more than one seed, seeds too: a crossed two-level bootstrap; kept
for the calibration's "before" column: it counts the seed x problem noise twice). With one seed this is exactly ``scipy.stats.bootstrap`` with one sample per
benchmark (scipy resamples unpaired samples independently: the stratified bootstrap); with several seeds scipy
has no two-level resampling, so ``_two_level`` does it with numpy. The p-value of a difference is the two-sided
bootstrap p-value: twice the share of resampled differences on the far side of 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from populora.evaluation.statistics import intervals

N_RESAMPLES = 4000
CONFIDENCE = 0.95


@dataclass
class Estimate:
    mean: float
    ci95: tuple[float, float]

    def to_dict(self) -> dict:
        return {"mean": self.mean, "ci95": list(self.ci95)}


ADAPTERS, METHOD = "adapters", "method"  # what a comparison speaks for: these adapters on these problems | the method


@dataclass
class Comparison:
    name: str
    delta: float
    ci95: tuple[float, float]
    p_value: float
    level: str = ADAPTERS          # ADAPTERS (one seed: problems resampled) | METHOD (>= 2 seeds per arm)
    seeds: int = 1                 # seeds per arm the comparison is paired over
    p_adjusted: float | None = None  # Holm-adjusted over the report's family (``holm``); None: not in a family
    mde: float | None = None       # the smallest difference this design detects at 80% power (``power.py``)

    @property
    def includes_zero(self) -> bool:
        return self.ci95[0] <= 0 <= self.ci95[1]

    @property
    def significant(self) -> bool:
        """The difference is claimed: its (Holm-adjusted, when in a family) p-value is below 0.05."""
        return (self.p_value if self.p_adjusted is None else self.p_adjusted) < 1 - CONFIDENCE

    def words(self) -> str:
        """The comparison in one sentence, in points (scores x 100), saying what it speaks for.

        >>> Comparison("mean - baseline", 0.03, (0.01, 0.05), 0.004, METHOD, 3, 0.02).words()
        'mean - baseline: +3.0 pts (95% CI +1.0 to +5.0, p=0.004, Holm-adjusted p=0.02; 3 seeds per arm) - higher: a difference of the method'
        """
        d, lo, hi = (100 * v for v in (self.delta, *self.ci95))
        adj = "" if self.p_adjusted is None else f", Holm-adjusted p={self.p_adjusted:.3g}"
        seeds = f"; {self.seeds} seed{'s' if self.seeds > 1 else ''} per arm"
        text = f"{self.name}: {d:+.1f} pts (95% CI {lo:+.1f} to {hi:+.1f}, p={self.p_value:.3g}{adj}{seeds})"
        mde = "" if self.mde is None else f" (this design detects >= {100 * self.mde:.1f} pts at 80% power)"
        if not self.significant:
            return text + " - no difference this data can tell from noise" + mde
        what = "a difference of the method" if self.level == METHOD else \
            "these adapters on these problems, not the method (one training seed per arm)"
        return text + f" - {'higher' if d > 0 else 'lower'}: {what}"

    def to_dict(self) -> dict:
        return {"name": self.name, "delta": self.delta, "ci95": list(self.ci95), "p_value": self.p_value,
                "p_adjusted": self.p_adjusted, "level": self.level, "seeds": self.seeds, "mde": self.mde,
                "includes_zero": self.includes_zero, "significant": self.significant, "words": self.words()}


def _check(strata: list[np.ndarray]) -> list[np.ndarray]:
    strata = [np.asarray(x, dtype=float) for x in strata]
    strata = [x[None, :] if x.ndim == 1 else x for x in strata]
    if not strata or any(x.ndim != 2 or x.size == 0 for x in strata):
        raise ValueError("each stratum must be a non-empty (seeds, problems) array")
    if len({x.shape[0] for x in strata}) != 1:
        raise ValueError(f"every stratum needs the same seeds, got {[x.shape[0] for x in strata]}")
    return strata


def _weights(strata: list[np.ndarray], weights) -> np.ndarray:
    w = np.ones(len(strata)) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (len(strata),) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"need one non-negative weight per stratum ({len(strata)}), got {weights}")
    return w / w.sum()


def mean_stderr(per) -> float | None:
    """Standard error of the mean of per-problem scores, sd / sqrt(n) (as lm-eval reports it); None for n < 2.

    >>> mean_stderr([1.0, 0.0, 1.0, 0.0])
    0.28867513459481287
    """
    per = np.asarray(per, dtype=float)
    return float(per.std(ddof=1) / np.sqrt(len(per))) if len(per) > 1 else None


def one_sample_stderr(score: float, n_problems: int) -> float | None:
    """The standard error one sample per problem would give at the same pass@1 ``score``: a 0/1 score per problem
    has variance score (1 - score) over problems, whatever splits it between problems and samples, so
    sqrt(score (1 - score) / (n - 1)) (``mean_stderr`` of such a 0/1 vector); greedy at the same accuracy too.
    With N samples per problem the observed standard error is (var_between + var_within / N) / n (Miller 2024):
    the within-problem part is what sampling buys. None for n < 2.

    >>> one_sample_stderr(0.5, 2), round(one_sample_stderr(0.5, 101), 4)
    (0.5, 0.05)
    """
    return float(np.sqrt(score * (1 - score) / (n_problems - 1))) if n_problems > 1 else None


def shrinkage_words(stderr: float | None, one_sample: float | None, samples: int) -> str:
    """What ``samples`` per problem bought, in points.

    >>> shrinkage_words(0.032, 0.041, 8)
    'SE 4.1 -> 3.2 pts with 8 samples per problem'
    """
    if stderr is None or one_sample is None:
        return f"{samples} samples per problem (SE: fewer than 2 problems)"
    return f"SE {100 * one_sample:.1f} -> {100 * stderr:.1f} pts with {samples} samples per problem"


def point(strata: list[np.ndarray], weights=None) -> float:
    """The mean over strata (unweighted, or with ``weights``) of each stratum's mean over seeds and problems.

    >>> point([np.ones(3), np.zeros(5)]), point([np.ones(3), np.zeros(5)], weights=[3, 1])
    (0.5, 0.75)
    """
    strata = _check(strata)
    return float(np.dot(_weights(strata, weights), [x.mean() for x in strata]))


def bootstrap_distribution(strata: list[np.ndarray], n_resamples: int = N_RESAMPLES, seed: int = 0,
                           confidence: float = CONFIDENCE, weights=None) -> tuple[tuple[float, float], np.ndarray]:
    """(95% percentile interval, resampled statistics) of ``point(strata, weights)``."""
    strata = _check(strata)
    w = _weights(strata, weights)
    if strata[0].shape[0] == 1 and all(x.shape[1] > 1 for x in strata):
        return _scipy(strata, n_resamples, seed, confidence, w)
    dist = _two_level(strata, n_resamples, np.random.default_rng(seed), w)
    alpha = (1 - confidence) / 2
    return (float(np.quantile(dist, alpha)), float(np.quantile(dist, 1 - alpha))), dist


def _scipy(strata, n_resamples, seed, confidence, w):
    import warnings

    from scipy import stats

    def statistic(*samples, axis=-1):
        return np.tensordot(w, [s.mean(axis=axis) for s in samples], axes=1)

    with warnings.catch_warnings():  # identical scores (e.g. all 0) give a degenerate interval: fine, it is [x, x]
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap(tuple(x[0] for x in strata), statistic, n_resamples=n_resamples, vectorized=True,
                              paired=False, confidence_level=confidence, method="percentile",
                              random_state=np.random.default_rng(seed))
    low, high = res.confidence_interval
    return (float(low), float(high)), np.asarray(res.bootstrap_distribution)


def _two_level(strata: list[np.ndarray], n: int, rng, w=None, chunk: int = 250) -> np.ndarray:
    """Resample seeds (jointly for all strata: seed s is one training run) then problems within each stratum;
    ``w``: the strata's weights (summing to 1; None: equal)."""
    w = np.full(len(strata), 1 / len(strata)) if w is None else w
    n_seeds = strata[0].shape[0]
    out = np.empty(n)
    for start in range(0, n, chunk):
        b = min(chunk, n - start)
        seeds = rng.integers(n_seeds, size=(b, n_seeds))                      # (b, S)
        total = np.zeros(b)
        for x, wx in zip(strata, w):
            probs = rng.integers(x.shape[1], size=(b, x.shape[1]))            # (b, P)
            total += wx * x[seeds[:, :, None], probs[:, None, :]].mean(axis=(1, 2))  # (b, S, P) -> (b,)
        out[start:start + b] = total
    return out


def estimate(strata: list[np.ndarray], seed: int = 0, weights=None, n_resamples: int = N_RESAMPLES) -> Estimate:
    """Mean and 95% interval of an arm's score (one benchmark: one stratum; an average: several, weighted by
    ``weights`` if given): over problems (one seed), or over seeds and problems (``seed_estimate``). Scores in
    [0, 1] on one seed: Wilson's interval at the effective sample size (``intervals.score``: honest on few
    problems and on all-0 / all-1 data); other values (not a score): the bootstrap over problems."""
    strata = _check(strata)
    if strata[0].shape[0] > 1:
        return seed_estimate(strata, weights)
    if intervals.in_unit(*strata):
        mean, ci, _ = intervals.score(strata, _weights(strata, weights))
        return Estimate(mean, ci)
    ci, _ = bootstrap_distribution(strata, n_resamples=n_resamples, seed=seed, weights=weights)
    return Estimate(point(strata, weights), ci)


def _paired(a: list[np.ndarray], b: list[np.ndarray]) -> list[np.ndarray]:
    a, b = _check(a), _check(b)
    if [x.shape for x in a] != [x.shape for x in b]:
        raise ValueError(f"paired arms need the same shapes, got {[x.shape for x in a]} and {[x.shape for x in b]}")
    return [x - y for x, y in zip(a, b)]


def compare(name: str, a: list[np.ndarray], b: list[np.ndarray], seed: int = 0, weights=None,
            n_resamples: int = N_RESAMPLES) -> Comparison:
    """a - b, paired by problem and seed: ``a[i]`` and ``b[i]`` are the same benchmark's (seeds, problems) arrays
    with rows and columns in the same order; ``weights``: of the benchmarks in an average (AZR's total).
    The bootstrap over problems (and seeds: the crossed two-level one): with one seed a claim about these
    adapters; with several, prefer ``seed_compare`` (the calibrated method-level interval). One seed and at
    most ``SIGN_FLIP_MAX`` problems in all: the exact sign-flip test and its interval (``sign_flip``)."""
    diffs = _paired(a, b)
    a, b = _check(a), _check(b)
    if diffs[0].shape[0] == 1 and intervals.in_unit(*a, *b):
        return _small_n_compare(name, a, b, diffs, weights)
    if diffs[0].shape[0] == 1 and sum(x.shape[1] for x in diffs) <= SIGN_FLIP_MAX:
        p, ci = sign_flip(diffs, weights)
        return Comparison(name, point(diffs, weights), ci, p, ADAPTERS, 1)
    ci, dist = bootstrap_distribution(diffs, n_resamples=n_resamples, seed=seed, weights=weights)
    return Comparison(name, point(diffs, weights), ci, p_value(dist), ADAPTERS, diffs[0].shape[0])


def _small_n_compare(name: str, a, b, diffs, weights, level: str = ADAPTERS) -> Comparison:
    """One seed, scores in [0, 1]: the MOVER interval of ``intervals.Difference`` and the p-value inverting it;
    on ``SIGN_FLIP_MAX`` problems or fewer also the exact sign-flip test: the larger of the two p-values, and an
    interval that excludes 0 where that p does not reject is extended to 0 (so "p < 0.05" and "the interval
    excludes 0" still agree, and a sweep of 5 problems, which no exact test can call significant, is not
    called so by its interval either: MOVER alone would from 4)."""
    w = _weights(diffs, weights)
    d = intervals.Difference([x[0] for x in a], [y[0] for y in b], w)
    ci, p = d.interval(CONFIDENCE), d.p_value()
    if sum(x.shape[1] for x in diffs) <= SIGN_FLIP_MAX:
        p = max(p, sign_flip(diffs, weights, interval=False)[0])
        if p >= 1 - CONFIDENCE:  # the exact test does not reject: neither does the interval
            ci = (min(ci[0], 0.0), max(ci[1], 0.0))
    return Comparison(name, point(diffs, weights), ci, p, level, a[0].shape[0])


SIGN_FLIP_MAX = 16  # problems: all 2^n sign flips (65536 at 16) are enumerated


def sign_flip(diffs: list[np.ndarray], weights=None, confidence: float = CONFIDENCE,
              interval: bool = True) -> tuple[float, tuple[float, float] | None]:
    """(two-sided p, interval) of a one-seed difference on few problems, by the exact sign-flip (permutation)
    test (Fisher 1935; Good 2005, ch. 3): under "these adapters do not differ" each problem's difference is as
    likely negative as positive, so the p-value is the share of all 2^n sign flips whose weighted mean is at
    least as far from 0 as the observed. The bootstrap's p is degenerate there (1 problem, difference +1: every
    resample is +1, p = 2 / (B + 1), "significant"); the smallest exact p is 2 / 2^n, so 5 or fewer problems
    can never be significant. The interval: the differences delta the test does not reject at 1 - ``confidence``
    (differences d - delta flipped; bisection from the mean), within [-1, 1], the range of a difference of
    scores in [0, 1]. ``diffs``: per benchmark a (1, P) array of a - b.

    >>> sign_flip([np.array([[1.0]])])  # one problem, solved by a only: the flips give +1 and -1, p = 1
    (1.0, (-1.0, 1.0))
    >>> sign_flip([np.array([[1.0, 1.0, 1.0]])])[0]  # three of three: 2 of 8 flips as far out
    0.25
    >>> p, (lo, hi) = sign_flip([np.ones((1, 10))])  # ten of ten: 2 / 1024, and the interval excludes 0
    >>> round(p, 5), lo > 0, hi
    (0.00195, True, 1.0)
    """
    diffs = _check(diffs)
    w = _weights(diffs, weights)
    c = np.concatenate([np.full(x.shape[1], wx / x.shape[1]) for x, wx in zip(diffs, w)])   # (n,) each problem's weight
    d = np.concatenate([x[0] for x in diffs])                                                  # (n,)
    if len(d) > SIGN_FLIP_MAX:
        raise ValueError(f"sign_flip enumerates 2^n flips: n <= {SIGN_FLIP_MAX}, got {len(d)}")
    flips = 1 - 2 * ((np.arange(2 ** len(d))[:, None] >> np.arange(len(d))) & 1)            # (2^n, n) of +-1

    def p_at(delta: float) -> float:
        centred = c * (d - delta)
        return float(np.mean(np.abs(flips @ centred) >= abs(centred.sum()) - 1e-12))

    if not interval:  # the p-value alone (the bisection of the interval's ends is 80 more enumerations)
        return p_at(0.0), None
    mean, alpha = float(c @ d), 1 - confidence

    def bound(far: float) -> float:
        if p_at(far) > alpha:
            return far
        near = mean
        for _ in range(40):  # p_at(near) > alpha >= p_at(far)
            mid = (near + far) / 2
            near, far = (mid, far) if p_at(mid) > alpha else (near, mid)
        return near

    return p_at(0.0), (bound(-1.0), bound(1.0))


# ====================================================================== the method: seeds are the unit
DEGENERATE = 1e-18     # a variance of a mean of scores below this (sd 1e-9) is rounding, not a measured 0: no variance
FLOOR_QUANTILE = 0.01  # a difference's seed term is raised to this quantile of its law with no seed effect at all
DF_QUANTILE = 0.25     # a score's seed term enters Satterthwaite's degrees of freedom at its upper 75% bound


def _mean_squares(x: np.ndarray) -> tuple[float, float]:
    """(MS_problem, MS_residual) of one benchmark's (S, P) array, the crossed seeds x problems ANOVA (P >= 2)."""
    n_seeds, n_problems = x.shape
    resid = x - x.mean(axis=1, keepdims=True) - x.mean(axis=0, keepdims=True) + x.mean()
    ms_problem = n_seeds * x.mean(axis=0).var(ddof=1)
    return float(ms_problem), float((resid ** 2).sum() / ((n_seeds - 1) * (n_problems - 1)))


def residual_mean_square(x: np.ndarray) -> float:
    """The residual mean square of one benchmark's (S, P) array (S, P >= 2): the per-cell noise variance."""
    return _mean_squares(np.asarray(x, dtype=float))[1]


def _per_seed(strata: list[np.ndarray], weights) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(strata, weights, per-seed scores (S,): over problems, and over benchmarks with their weights)."""
    strata = _check(strata)
    w = _weights(strata, weights)
    if strata[0].shape[0] < 2:
        raise ValueError("a method-level interval needs >= 2 seeds per arm (one seed speaks for its adapters only)")
    return strata, w, sum(wx * x.mean(axis=1) for x, wx in zip(strata, w))


def seed_variance(strata: list[np.ndarray], weights=None) -> tuple[float, float, float]:
    """(mean, variance of the mean, degrees of freedom) of an arm's ``point(strata, weights)`` over S >= 2 seeds.

    The crossed random-effects model of one benchmark, x[s, i] = mu + seed_s + problem_i + noise_si, gives
    Var(grand mean) = var(seed)/S + var(problem)/P + var(noise)/(S P). The per-seed means (over problems, and
    over benchmarks with their weights) vary by var(seed) + var(noise)/P: their sample variance / S is the seed
    term with S-1 degrees of freedom (it also carries the covariance of benchmarks that share a seed). The
    problem term is each benchmark's (MS_problem - MS_residual) / (S P) (ANOVA mean squares),
    weighted by w^2 (benchmarks' problems are independent), left out when the sum is below 0. An arm's score
    has a large, well-measured problem term: Satterthwaite's degrees of freedom over the signed mean squares
    (seed term, + MS_problem, - MS_residual), with the seed term there at its upper ``DF_QUANTILE`` bound (seed
    term x (S - 1) / chi2(S - 1, 0.25)); the variance itself is the unbiased sum. A difference of two arms:
    ``difference_variance``.

    Why the bound: the seed term is measured on S - 1 degrees of freedom (2 with 3 seeds), the problem term on
    hundreds. Where seeds dominate the variance (a training seed moving every benchmark together), a seed term
    that reads small by chance also reads as a small share, and Satterthwaite's degrees of freedom then come out
    large exactly when the variance is too small: the quantile falls toward 1.96 and the interval under-covers
    (0.90-0.92 at 3 seeds with shared seed effects, ``populora bench stats``; a normal seed term's share of
    0.9: 0.921, 2 seeds 0.874). With the seed term at its 75% upper bound in the degrees of freedom only, the
    same two-component model (the seeds' share of the variance 0.05-0.99, 300,000 draws a share) covers
    0.949-0.964 at 3 seeds, 0.950-0.956 at 5 and 0.942-0.973 at 2: 25% is the largest quantile that keeps 3 and
    5 seeds at 0.95 over every share (30%: 0.946; the 20% bound over-covers to 0.967, the 5% to 0.987, while the
    median, 50%, still covers 0.931; Satterthwaite 1946). The bound was chosen in that model, not in the
    calibration's worlds, which then check it (``populora bench stats``).

    >>> x = np.array([[0.5, 0.7, 0.9], [0.3, 0.5, 0.7]])  # seeds differ by 0.2, problems by 0.2, no noise
    >>> m, v, df = seed_variance([x])
    >>> round(m, 3), round(v, 4), round(df, 2)  # var of seed means 0.02 / 2 + var(problem) 0.04 / 3
    (0.6, 0.0233, 1.28)
    """
    strata, w, per_seed = _per_seed(strata, weights)
    n_seeds = len(per_seed)
    seed_term = per_seed.var(ddof=1) / n_seeds
    problem = []  # (signed variance component, its degrees of freedom)
    for x, wx in zip(strata, w):
        n_problems = x.shape[1]
        if n_problems < 2:
            continue
        ms_problem, ms_resid = _mean_squares(x)
        scale = wx ** 2 / (n_seeds * n_problems)
        problem += [(scale * ms_problem, n_problems - 1), (-scale * ms_resid, (n_seeds - 1) * (n_problems - 1))]
    var = seed_term + sum(t for t, _ in problem)
    if var <= seed_term:  # no problem term beyond the noise: the seed term alone, S - 1 degrees of freedom
        return float(per_seed.mean()), float(seed_term), float(n_seeds - 1)
    bounded = seed_term * (n_seeds - 1) / sps.chi2.ppf(DF_QUANTILE, n_seeds - 1)
    terms = [(bounded, n_seeds - 1), *problem]  # Satterthwaite's, with the seed term at its bound
    df = sum(t for t, _ in terms) ** 2 / sum(t ** 2 / d for t, d in terms)
    return float(per_seed.mean()), float(var), float(df)


def difference_variance(diffs: list[np.ndarray], weights=None,
                        floor_quantile: float | None = FLOOR_QUANTILE) -> tuple[float, float, float]:
    """(mean, variance of the mean, degrees of freedom) of a paired difference of two arms over S >= 2 seeds:
    the seed-level t on the per-seed differences, S - 1 degrees of freedom, its variance floored in its
    degenerate lower tail (``floor_quantile`` None: at the noise level's expectation, ``_few``). ``diffs``: per
    benchmark, the (S, P) array of arm a minus arm b.

    The estimand is the method's difference on these benchmarks' problems (the benchmark is the benchmark): the
    per-seed differences are independent runs with the same problems, so their sample variance / S is the whole
    variance of their mean (var(seed) / S + var(noise) / (S P)), and t on S - 1 degrees of freedom is exact
    for normal per-seed differences. The problem term (``seed_variance``) is left out: under a null it is 0,
    and its clipped noisy estimate made the interval over-cover (0.96-0.98 where 0.95 is promised; the
    calibration, docs/evaluation.md).

    The floor: per-problem scores move in steps (1/30 on a 30-problem benchmark), so three per-seed differences
    can tie (variance exactly 0, p = 0) or nearly, and a t on 2 degrees of freedom then passes Holm's first
    step (alpha / 20): family-wise rate 0.08-0.13 without a floor. Even with no seed effect at all the seed
    term is var(noise) / (S P) x chi2(S - 1) / (S - 1), and the residual mean square of the seeds x problems
    ANOVA estimates var(noise) on (S - 1)(P - 1) degrees of freedom; a seed term below that law's
    ``floor_quantile`` quantile (1%: 0.01 x the noise level with 3 seeds) is not evidence of a precise mean
    but of ties, and is raised to it (a partial form of truncating a variance component at its lower bound,
    Thompson 1962). 1% leaves the typical interval alone (the floor binds in ~1% of null worlds) and brings
    the family-wise rate to 0.027-0.050 (``populora bench stats --replicates 300``); higher floors eat the t's
    legitimate tail, which at Holm's first step with 2 degrees of freedom (|t| > 19.95) lies where the seed term
    is under ~2% of its expectation: family-wise 0.000 at 2% (sigma 0), 0.000-0.013 at 5%.

    >>> tie = np.array([[0.1, 0.0, 0.1, 0.0], [0.0, 0.1, 0.1, 0.0], [0.1, 0.1, 0.0, 0.0]])
    >>> m, v, df = difference_variance([tie])  # three equal per-seed differences 0.05: a seed term of 0
    >>> round(m, 3), v > 0, df
    (0.05, True, 2.0)
    >>> round(v / (_mean_squares(tie)[1] / 12), 3)  # floored at the noise level x chi2(2, 1%) / 2
    0.01
    """
    diffs, w, per_seed = _per_seed(diffs, weights)
    n_seeds = len(per_seed)
    seed_term = per_seed.var(ddof=1) / n_seeds
    noise = sum(wx ** 2 * _mean_squares(x)[1] / x.size for x, wx in zip(diffs, w) if x.shape[1] > 1)
    ratio = 1.0 if floor_quantile is None else sps.chi2.ppf(floor_quantile, n_seeds - 1) / (n_seeds - 1)
    floor = noise * ratio
    return float(per_seed.mean()), float(max(seed_term, floor)), float(n_seeds - 1)


def _few(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Whether either arm of a comparison of scores has too ``intervals.few`` successes or failures over all its
    cells (seeds x problems of every benchmark compared). There the per-seed differences are far from normal
    (mostly a small positive part, now and then one problem's worth the other way: with 3 or 5 seeds the rare
    side is often not seen at all), and their sample variance is then too small more often than the t allows: on
    30 problems at 3% or 97% accuracy the per-benchmark difference covered 0.939-0.942 with the 1% floor. With few
    successes the seed term is floored at the noise level's expectation instead (the variance the per-seed
    differences have with no seed effect at all, from the seeds x problems residual, (S - 1)(P - 1) degrees of
    freedom): a difference of the method is then never read as more precise than its Bernoulli noise allows."""
    for arm in (_check(a), _check(b)):
        if not intervals.in_unit(*arm):
            return False
        if intervals.few(arm):
            return True
    return False


def _t_interval(mean: float, var: float, df: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    half = sps.t.ppf(0.5 + confidence / 2, df) * np.sqrt(var)
    return float(mean - half), float(mean + half)


def seed_estimate(strata: list[np.ndarray], weights=None) -> Estimate:
    """Mean and 95% interval of an arm's score over S >= 2 seeds (``seed_variance``: seeds and problems). Scores
    in [0, 1]: Wilson's interval at the effective sample size of that variance and its degrees of freedom
    (``intervals.score``: the t is symmetric, and on 30 problems at 10% accuracy the score's law is not; the
    Bernoulli floor keeps all-0 data from a zero width); other values: the t."""
    mean, var, df = seed_variance(strata, weights)
    strata = _check(strata)
    if intervals.in_unit(*strata):
        _, ci, _ = intervals.score(strata, _weights(strata, weights), var=var, df=df)
        return Estimate(mean, ci)
    return Estimate(mean, _t_interval(mean, var, df))


def seed_compare(name: str, a: list[np.ndarray], b: list[np.ndarray], weights=None) -> Comparison:
    """a - b of two arms with the same S >= 2 seeds (seed s of one paired with seed s of the other: independent
    runs, so the pairing is only bookkeeping) and the same problems: a claim about the method, with the seed
    variance in its interval (``difference_variance``) and a two-sided t p-value. A variance of 0 (every
    per-seed difference equal, and no noise within the seeds x problems table to floor it with: identical or
    all-0 arms) says nothing of the method's precision: then the seeds' cells are pooled as problems of one
    seed, the MOVER interval of ``intervals.Difference`` (scores in [0, 1]; else p = 0 unless the difference is 0)."""
    diffs = _paired(a, b)
    mean, var, df = difference_variance(diffs, weights, None if _few(a, b) else FLOOR_QUANTILE)
    if var < DEGENERATE:
        a, b = _check(a), _check(b)
        if intervals.in_unit(*a, *b):
            pooled = _small_n_compare(name, [x.reshape(1, -1) for x in a], [y.reshape(1, -1) for y in b],
                                      [x.reshape(1, -1) for x in diffs], weights, METHOD)
            pooled.seeds = diffs[0].shape[0]
            pooled.delta = mean
            return pooled
    p = 1.0 if var <= 0 else float(2 * sps.t.sf(abs(mean) / np.sqrt(var), df))
    if var <= 0 and mean != 0:
        p = 0.0
    ci = _t_interval(mean, var, df)
    if intervals.in_unit(*_check(a), *_check(b)):  # a difference of scores lies in [-1, 1]: so does its interval
        ci = (max(ci[0], -1.0), min(ci[1], 1.0))     # (2 seeds, t on 1 df: -0.75 +- 3.2 otherwise)
    return Comparison(name, mean, ci, p, METHOD, diffs[0].shape[0])


def holm(p_values) -> list[float]:
    """Holm's (1979) step-down adjusted p-values: the family-wise error rate is at most alpha when every
    adjusted p below alpha is claimed, whatever the dependence between the tests (benchmarks that share a
    training seed are correlated).

    >>> holm([0.01, 0.04, 0.03, 0.005])
    [0.03, 0.06, 0.06, 0.02]
    """
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty_like(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return [round(float(v), 12) for v in adjusted]


def p_value(dist: np.ndarray) -> float:
    """Two-sided bootstrap p-value of "the difference is 0": twice the smaller tail's share, counted as
    (k + 1) / (B + 1) (Davison & Hinkley 1997): never 0, since B resamples cannot tell a p below 1 / (B + 1);
    a p of 0 would pass any Holm step (the calibration's one-seed family fired 8% at a nominal 5% without it).

    >>> p_value(np.array([0.1, 0.2, 0.3, -0.1]))  # 1 of 4 at or below 0: 2 x 2/5
    0.8
    >>> p_value(np.zeros(10)), round(p_value(np.ones(999)), 4)
    (1.0, 0.002)
    """
    dist = np.asarray(dist)
    tail = min(np.sum(dist <= 0), np.sum(dist >= 0))
    return float(min(1.0, 2 * (tail + 1) / (len(dist) + 1)))
