"""Intervals for scores in [0, 1] that stay honest on few problems and degenerate data: no zero width on finite data.

A percentile bootstrap (or a t) of a benchmark score leans on the central limit theorem, which fails on the
small benchmarks researchers start with (Bowyer, Aitchison & Ivanova, ICML 2025, "Don't use the CLT in LLM evals
with fewer than a few hundred datapoints"; Miller 2024): three problems nobody solved resample to 0.0 every time
("95% CI 0.0 to 0.0"), and on 30 problems at 10% accuracy the interval under-covers (0.84-0.89 for 0.95). So:

- a score (one arm): the **Wilson score interval at the effective sample size** (Wilson 1927; Kish's effective
  n = m (1 - m) / Var(m), the survey form of Korn & Graubard 1998, "Confidence intervals for proportions with
  small expected number of positive counts estimated from survey data", with their degrees-of-freedom
  correction n (z / t_df)^2 when Var(m) is estimated from few seeds; Dean & Pagano 2015 compare the choices).
  For 0/1 scores on one seed it is Wilson's interval on n problems; fractional per-problem scores (a mean over
  members or samples) give a larger n, at most the number of Bernoulli draws, and at most one trial per problem
  where the average has fewer than 10 successes or failures (``_units``: on 30 problems at 7% the draws of a
  4-member mean hide how few problems are ever solved; coverage 0.89 -> 0.995 at one seed, 0.93-0.96 at 3-5). Var(m) is the estimator's own
  (problems for one seed, ``stats.seed_variance`` for several) with a floor: a mean of D Bernoulli draws,
  problems resampled, varies by at least m (1 - m) / D (var(p) (1 - 1/k) + m (1 - m) / k per problem of k
  draws), evaluated at Wilson's centre so that it is not 0 at m = 0 or 1. Wilson's interval at m = 0 is
  [0, z^2 / (n + z^2)]: 0 of 3 problems reads 0.0 to 56.2, never 0.0 to 0.0;
- a paired difference of two arms on one seed: **MOVER** (the method of variance estimates recovery, Zou &
  Donner 2008, "Construction of confidence limits about effect measures: a general approach", Stat Med 27:1693)
  over the two parts of the per-problem difference d = a - b, max(d, 0) and max(-d, 0), each a mean in [0, 1]
  with its Wilson interval at its effective n (draws: the steps of the difference), recovered with their correlation
  (they are never both non-zero on one problem, so their covariance is -m+ m-, at the shrunk means). For 0/1
  scores the parts are the discordant cells of the paired 2x2 table, and this is Newcombe's (1998, Stat Med
  17:2635) hybrid-score construction applied to them rather than to the margins: identical arms (no discordant
  problem) give +-z^2 / (n + z^2), not Newcombe's zero width at 50%. Its p-value inverts the interval (the
  level at which its near end reaches 0), so "p < 0.05" and "the interval excludes 0" always agree;
- IQM and probability of improvement over problems (``aggregates``): the **Bayesian bootstrap** (Rubin 1981)
  of the problems with a prior pseudo-problem at each corner of the arms' score cube (Dirichlet weights; for
  one arm of 0/1 scores exactly the Beta(k + 1, n - k + 1) posterior Bowyer et al. use), so that data with no
  variance still has posterior spread. A posterior interval that leaves out an estimate at the edge of the scale
  is extended to it (Brown, Cai & DasGupta 2001's modification of the Jeffreys interval at x = 0 and x = n).

Every interval contains its estimate and has positive width on finite data; scores within [0, 1], differences
within [-1, 1]. Above a few hundred problems these agree with the normal / bootstrap intervals to a fraction of
a point, so they are used at every size (one method, no threshold to justify a jump at).
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95
MAX_DRAWS_PER_PROBLEM = 64  # finer per-problem scores are treated as 64 draws (the floor is a lower bound only)


def z_of(confidence: float = CONFIDENCE) -> float:
    return float(sps.norm.isf((1 - confidence) / 2))


def in_unit(*arrays) -> bool:
    """Whether every value lies in [0, 1] (a score: these intervals apply; anything else: the bootstrap)."""
    return all(np.all((np.asarray(x) >= 0) & (np.asarray(x) <= 1)) for x in arrays)


def resolution(x) -> int:
    """Draws per problem the scores ``x`` are means of: the smallest k <= 64 with every value a multiple of 1/k.

    >>> resolution([0, 1, 1]), resolution([0.25, 0.5, 1.0]), resolution([1 / 3, 0.5]), resolution([0.123])
    (1, 4, 6, 64)
    """
    x = np.unique(np.asarray(x, dtype=float).ravel())
    ks = np.arange(1, MAX_DRAWS_PER_PROBLEM + 1)
    scaled = x[None, :] * ks[:, None]
    ok = np.all(np.abs(scaled - np.round(scaled)) < 1e-6, axis=1)
    return int(ks[np.argmax(ok)]) if ok.any() else MAX_DRAWS_PER_PROBLEM


def wilson(m: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``m`` from ``n`` (effective) trials, containing ``m``.

    >>> [round(v, 3) for v in wilson(0.0, 3, 1.96)], [round(v, 3) for v in wilson(1.0, 3, 1.96)]
    ([0.0, 0.562], [0.438, 1.0])
    """
    q = z * z / n
    centre = (m + q / 2) / (1 + q)
    half = z * np.sqrt(m * (1 - m) / n + q / (4 * n)) / (1 + q)
    return float(min(m, max(0.0, centre - half))), float(max(m, min(1.0, centre + half)))


def clopper_pearson(m: float, n: float, z: float) -> tuple[float, float]:
    """Clopper & Pearson's exact interval of a proportion ``m`` from ``n`` (effective, possibly fractional)
    trials, at the level of the normal quantile ``z``: the Beta quantiles of x = m n successes (Korn & Graubard
    1998 use it at the effective sample size); 0 at m = 0 and 1 at m = 1.

    >>> [round(v, 3) for v in clopper_pearson(0.0, 3, 1.96)], [round(v, 3) for v in clopper_pearson(1.0, 3, 1.96)]
    ([0.0, 0.708], [0.292, 1.0])
    """
    a = float(sps.norm.sf(z))  # each tail
    x = m * n
    lo = 0.0 if x <= 0 else float(sps.beta.ppf(a, x, n - x + 1))
    hi = 1.0 if x >= n else float(sps.beta.ppf(1 - a, x + 1, n - x))
    return min(m, lo), max(m, hi)


def _centre(m: float, draws: float, z: float) -> float:
    """Wilson's centre (the mean shrunk toward 1/2 by z^2 / 2 pseudo-draws each way)."""
    return (m * draws + z * z / 2) / (draws + z * z)


def _part(x: np.ndarray, draws_per_cell: int, z: float, mu: float) -> tuple[float, float, float]:
    """(mean, variance of one cell, draws) of one benchmark's (S, P) scores, the cell variance floored at the
    Bernoulli floor m~ (1 - m~) / k: m~ is the benchmark's mean shrunk by z^2 pseudo-draws toward ``mu`` (the
    Wilson centre of the whole average: 3 problems of a benchmark scored 0 beside 27 others scored 0 are not
    read as if each benchmark could be at 56% on its own)."""
    draws = x.size * draws_per_cell
    m = float(x.mean())
    mt = (m * draws + z * z * mu) / (draws + z * z)
    s2 = float(x.var(ddof=1)) if x.size > 1 else 0.0
    return m, max(s2, mt * (1 - mt) / draws_per_cell), float(draws)


def _pooled(strata: list[np.ndarray], ks: list[int], w: np.ndarray, z: float) -> tuple[float, float, float]:
    """(weighted mean, effective draws of the weighted mean, Wilson centre of the mean at those draws)."""
    m = float(sum(wx * x.mean() for wx, x in zip(w, strata)))
    units = _units(strata, ks)
    equal = 1 / sum(wx ** 2 / u for wx, u in zip(w, units) if wx > 0)  # every benchmark at the average's mean
    mu = _centre(m, equal, z)
    # each benchmark's trials at its own (shrunk) mean: an average of a benchmark at 7% and one at 50% is not as
    # uncertain as if both were at 29%; the cap is the effective n of the average were every trial a Bernoulli at
    # its benchmark's mean (Kish's n at the stratified variance), ``equal`` when the means agree. With ``equal``
    # alone the average of ten benchmarks (AIME's 30 problems at one trial each among them) over-covered: 0.99-1.00
    shrunk = [(float(x.mean()) * u + z * z * mu) / (u + z * z) for x, u in zip(strata, units)]
    var = sum(wx ** 2 * t * (1 - t) / u for wx, t, u in zip(w, shrunk, units) if wx > 0)
    mt = sum(wx * t for wx, t in zip(w, shrunk))
    cap = max(equal, mt * (1 - mt) / var) if var > 0 else equal
    return m, cap, _centre(m, cap, z)


def few(strata: list[np.ndarray]) -> bool:
    """Whether scores in [0, 1] (arrays of any shape, pooled) have fewer than ``FEW`` successes or failures in all
    their cells: too few for the normal approximation of a binomial, and for a variance read from them.

    >>> few([np.zeros((5, 30))]), few([np.full((3, 10), 0.5)]), few([np.ones(9)]), few([np.zeros(10), np.ones(10)])
    (True, False, True, False)
    """
    cells = sum(x.size for x in strata)
    m = sum(float(x.sum()) for x in strata) / cells
    return min(m, 1 - m) * cells < FEW


def _units(strata: list[np.ndarray], ks: list[int]) -> list[float]:
    """Trials each benchmark's (S, P) scores may count for at most in an average's effective n: k draws a cell, or,
    where the average has too ``few`` successes or failures, one trial per problem (the problem is the unit, Miller
    2024: on 30 problems at 7% the k draws of a 4-member mean hide how few problems are ever solved, and the
    interval covered 0.89; one trial, 0.995). P, not S P: several seeds answer the same problems, and with a
    handful of successes nothing tells how many problems they would ever solve; on 30 problems at 3% with 5 seeds
    one trial per cell made a benchmark nobody solved read 0 to 2.5%, covering 0.895 of the mean of benchmarks;
    per problem, 0 to 11.3%. Decided for the average as a whole (one benchmark: for it): among ten benchmarks
    with thousands of problems, AIME's 30 at 7% counted one trial each held the overall's effective n at 2,800
    where its variance says 4,100 (coverage 0.99-1.00)."""
    if few(strata):
        return [float(x.shape[-1]) for x in strata]
    return [float(x.size * k) for x, k in zip(strata, ks)]


FEW = 10  # successes or failures: below, an average counts one trial per problem (n min(m, 1 - m) >= 10, the rule
          # of thumb for the normal approximation of a binomial)


def effective_n(m: float, var: float, cap: float, df: float | None = None, z: float = 1.96) -> float:
    """Kish's effective sample size m (1 - m) / var (at Wilson's centre of the ``cap`` draws when m is 0 or 1),
    at most ``cap``; with ``df`` (a variance estimated from few seeds) Korn & Graubard's n (z / t_df)^2."""
    mt = m if 0 < m < 1 else _centre(m, cap, z)
    n = min(mt * (1 - mt) / var, cap) if var > 0 else cap
    if df is not None and np.isfinite(df):
        n *= (z / sps.t.isf(sps.norm.sf(z), df)) ** 2
    return float(max(n, 1e-9))


def score(strata: list[np.ndarray], w: np.ndarray, var: float | None = None, df: float | None = None,
          confidence: float = CONFIDENCE) -> tuple[float, tuple[float, float], float]:
    """(mean, Wilson interval at the effective n, effective n) of an arm's weighted mean score over ``strata``
    ((S, P) arrays in [0, 1]). ``var``: the estimator's variance when it is not the problems' (several seeds:
    ``stats.seed_variance``), with ``df`` its degrees of freedom; floored either way."""
    z = z_of(confidence)
    ks = [resolution(x) for x in strata]
    m, cap, mu = _pooled(strata, ks, w, z)
    parts = [_part(x, k, z, mu) for x, k in zip(strata, ks)]              # (mean, cell variance, draws)
    floor = sum(wx ** 2 * p[1] * k / p[2] for wx, p, k in zip(w, parts, ks))  # floored cell variance / cells
    # the cells as if independent: a lower bound of the variance of the mean under the crossed seeds x problems
    # model too (var(seed)/S + var(problem)/P + var(noise)/(S P) >= their sum / (S P)), so a valid floor there
    v = floor if var is None else max(var, floor)
    n = effective_n(m, v, cap, df if var is not None and var > floor else None, z)
    return m, LIMITS(m, n, z), n


def _mover(t1, l1, u1, t2, l2, u2, r) -> tuple[float, float]:
    """Zou & Donner's (2008) limits of t1 - t2 from each estimate's limits and their correlation ``r``."""
    lo = t1 - t2 - np.sqrt(max((t1 - l1) ** 2 + (u2 - t2) ** 2 - 2 * r * (t1 - l1) * (u2 - t2), 0.0))
    hi = t1 - t2 + np.sqrt(max((u1 - t1) ** 2 + (t2 - l2) ** 2 - 2 * r * (u1 - t1) * (t2 - l2), 0.0))
    return float(max(-1.0, lo)), float(min(1.0, hi))


LIMITS = wilson  # the limits of a proportion at its effective n (``clopper_pearson``: 0.98-1.00 on 30 problems)


class Difference:
    """A paired difference of two arms on one seed: its MOVER interval at any level, and the p-value that inverts it.
    ``a``, ``b``: per benchmark the arms' per-problem scores; ``w``: the benchmarks' weights (summing to 1)."""

    def __init__(self, a: list[np.ndarray], b: list[np.ndarray], w: np.ndarray):
        self.w = np.asarray(w, dtype=float)
        pos, neg, k = [], [], []
        for x, y in zip(a, b):
            d = np.asarray(x, dtype=float).ravel() - np.asarray(y, dtype=float).ravel()
            pos.append(np.maximum(d, 0.0))
            neg.append(np.maximum(-d, 0.0))
            k.append(resolution(d))  # the difference's own steps: identical 0/1 arms, 1 (the widest floor)
        self.k = np.array(k, dtype=float)
        self.cells = np.array([len(p) for p in pos], dtype=float)
        self.draws = self.cells * self.k
        # per benchmark: (mean, sample variance) of each part
        self.pos = np.array([(p.mean(), p.var(ddof=1) if len(p) > 1 else 0.0) for p in pos])
        self.neg = np.array([(q.mean(), q.var(ddof=1) if len(q) > 1 else 0.0) for q in neg])
        self.delta = float(self.w @ (self.pos[:, 0] - self.neg[:, 0]))
        # one trial per problem where the compared average (all its benchmarks) has fewer than FEW discordant
        # draws in its larger part, else k (``_units``' rule: decided for the average, not per benchmark)
        larger = pos if self.pos[:, 0] @ self.cells >= self.neg[:, 0] @ self.cells else neg
        trials = [1 if few(larger) else int(kk) for kk in self.k]
        self.cap = 1 / np.sum(self.w ** 2 / (self.cells * np.array(trials)))  # ``_pooled``'s rule, on the larger part

    def _side(self, part: np.ndarray, z: float):
        """(mean, its variance, the benchmarks' shrunk means) of one part, the cells' variance floored."""
        m = float(self.w @ part[:, 0])
        mu = _centre(m, self.cap, z)
        mt = (part[:, 0] * self.draws + z * z * mu) / (self.draws + z * z)
        cell = np.maximum(part[:, 1], mt * (1 - mt) / self.k)
        return m, float(np.sum(self.w ** 2 * cell / self.cells)), mt

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        return self.interval_z(z_of(confidence))

    def interval_z(self, z: float) -> tuple[float, float]:
        """The interval at the level of the normal quantile ``z`` (1.96: 95%)."""
        mp, vp, tp = self._side(self.pos, z)
        mn, vn, tn = self._side(self.neg, z)
        lp, up = LIMITS(mp, effective_n(mp, vp, self.cap, None, z), z)
        ln, un = LIMITS(mn, effective_n(mn, vn, self.cap, None, z), z)
        # the parts' covariance: -m+ m- per problem (never both non-zero), at the shrunk means so that it is not 0
        cov = -float(np.sum(self.w ** 2 * tp * tn / self.cells))
        r = float(np.clip(cov / np.sqrt(vp * vn), -1.0, 0.0)) if vp > 0 and vn > 0 else 0.0
        lo, hi = _mover(mp, lp, up, mn, ln, un, r)
        return min(lo, self.delta), max(hi, self.delta)

    def p_value(self) -> float:
        """The two-sided p of "no difference": 1 - the level at which the interval's near end reaches 0 (bisection
        on the normal quantile z of the level: p = 2 (1 - Phi(z)))."""
        if self.delta == 0:
            return 1.0
        end, sign = (0, 1.0) if self.delta > 0 else (1, -1.0)

        def excludes(z):
            return sign * self.interval_z(z)[end] > 0
        low, high = 1e-9, 40.0  # excludes(low); not excludes(high) unless p < 1e-300
        if not excludes(low):
            return 1.0
        if excludes(high):
            return 0.0
        for _ in range(45):
            mid = (low + high) / 2
            low, high = (mid, high) if excludes(mid) else (low, mid)
        return float(2 * sps.norm.sf(high))


# ====================================================================== Bayesian bootstrap over problems
def bayes_draws(arms: dict[str, list[np.ndarray]], n_draws: int, seed: int = 0) -> dict[str, np.ndarray]:
    """{arm: (n_draws, benchmarks)} posterior draws of each arm's benchmark scores: per benchmark, Dirichlet(1)
    weights over its problems (shared by the arms: they answered the same problems) plus a pseudo-problem at each
    of the 2^A corners of the arms' scores with weight 2 / 2^A (each arm: one pseudo-problem at 0, one at 1).
    ``arms``: {arm: [per-problem scores of each benchmark]}, scores in [0, 1]."""
    rng = np.random.default_rng(seed)
    names = list(arms)
    corners = ((np.arange(2 ** len(names))[:, None] >> np.arange(len(names))) & 1).astype(float)  # (2^A, A)
    prior = 2.0 / len(corners)
    out = {a: np.empty((n_draws, len(arms[a]))) for a in names}
    for j in range(len(arms[names[0]])):
        x = np.stack([np.asarray(arms[a][j], dtype=float).ravel() for a in names], axis=1)      # (P, A)
        values = np.concatenate([x, corners])                                                   # (P + 2^A, A)
        g = rng.gamma(np.r_[np.ones(len(x)), np.full(len(corners), prior)], size=(n_draws, len(values)))
        scores = (g / g.sum(axis=1, keepdims=True)) @ values                                    # (n, A)
        for i, a in enumerate(names):
            out[a][:, j] = scores[:, i]
    return out


def posterior_interval(draws: np.ndarray, estimate: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The equal-tailed interval of ``draws``, extended to ``estimate`` if it lies outside (at the scale's edge)."""
    alpha = (1 - confidence) / 2
    lo, hi = float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))
    return min(lo, estimate), max(hi, estimate)
