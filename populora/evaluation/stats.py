"""Intervals and paired tests for benchmark scores: is a difference of a point or two more than noise?

The data of one arm (a population's mean member, its weakest member, the baseline) on one benchmark is a
(seeds, problems) array of per-problem scores (pass@1 or accuracy of each problem). Every adapter answers the
same problems, so two arms are compared problem by problem (paired), and seed s of a configuration with seed s
of the other. An average over several benchmarks (code avg, math avg, overall: the unweighted mean of the
benchmark scores, as in ``report.py``; AZR's total, (code avg + math avg) / 2, a weighted one) is stratified:
each benchmark's problems are resampled within it.

The bootstrap resamples problems (and, with more than one seed, seeds too: a two-level bootstrap, since a
training seed is itself a draw). With one seed this is exactly ``scipy.stats.bootstrap`` with one sample per
benchmark (scipy resamples unpaired samples independently: the stratified bootstrap); with several seeds scipy
has no two-level resampling, so ``_two_level`` does it with numpy. The p-value of a difference is the two-sided
bootstrap p-value: twice the share of resampled differences on the far side of 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_RESAMPLES = 4000
CONFIDENCE = 0.95


@dataclass
class Estimate:
    mean: float
    ci95: tuple[float, float]

    def to_dict(self) -> dict:
        return {"mean": self.mean, "ci95": list(self.ci95)}


@dataclass
class Comparison:
    name: str
    delta: float
    ci95: tuple[float, float]
    p_value: float

    @property
    def includes_zero(self) -> bool:
        return self.ci95[0] <= 0 <= self.ci95[1]

    def words(self) -> str:
        """The comparison in one sentence, in points (scores x 100)."""
        d, lo, hi = (100 * v for v in (self.delta, *self.ci95))
        text = f"{self.name}: {d:+.1f} pts (95% CI {lo:+.1f} to {hi:+.1f}, p={self.p_value:.3g})"
        if self.includes_zero:
            return text + " - the interval includes 0: no difference this data can tell from noise"
        return text + f" - the interval excludes 0: {'higher' if d > 0 else 'lower'}"

    def to_dict(self) -> dict:
        return {"name": self.name, "delta": self.delta, "ci95": list(self.ci95), "p_value": self.p_value,
                "includes_zero": self.includes_zero, "words": self.words()}


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


def estimate(strata: list[np.ndarray], seed: int = 0, weights=None) -> Estimate:
    """Mean and 95% interval of an arm's score (one benchmark: one stratum; an average: several, weighted by
    ``weights`` if given)."""
    ci, _ = bootstrap_distribution(strata, seed=seed, weights=weights)
    return Estimate(point(strata, weights), ci)


def compare(name: str, a: list[np.ndarray], b: list[np.ndarray], seed: int = 0, weights=None) -> Comparison:
    """a - b, paired by problem and seed: ``a[i]`` and ``b[i]`` are the same benchmark's (seeds, problems) arrays
    with rows and columns in the same order; ``weights``: of the benchmarks in an average (AZR's total)."""
    a, b = _check(a), _check(b)
    if [x.shape for x in a] != [x.shape for x in b]:
        raise ValueError(f"paired arms need the same shapes, got {[x.shape for x in a]} and {[x.shape for x in b]}")
    diffs = [x - y for x, y in zip(a, b)]
    ci, dist = bootstrap_distribution(diffs, seed=seed, weights=weights)
    return Comparison(name, point(diffs, weights), ci, p_value(dist))


def p_value(dist: np.ndarray) -> float:
    """Two-sided bootstrap p-value of "the difference is 0".

    >>> p_value(np.array([0.1, 0.2, 0.3, -0.1]))
    0.5
    >>> p_value(np.zeros(10))
    1.0
    """
    dist = np.asarray(dist)
    return float(min(1.0, 2 * min(np.mean(dist <= 0), np.mean(dist >= 0))))
