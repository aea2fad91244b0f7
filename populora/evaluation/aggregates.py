"""rliable's aggregates across seeds and benchmarks (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical
Precipice"): the interquartile mean (IQM) of the (runs, benchmarks) score matrix, the probability of improvement
P(X > Y) of one configuration over another, and the performance profile (the share of runs x benchmarks scoring
above each threshold), each with a stratified bootstrap 95% interval (runs resampled within each benchmark).

The point estimates are rliable's own functions (``rliable.metrics.aggregate_iqm``,
``probability_of_improvement``). Its interval code (``rliable.library``) is not used: it imports the ``arch``
package, and the arch versions rliable accepts (< 8) fail at import with pandas 3 (``deprecate_kwarg() missing
1 required positional argument``, arch 7.2.0), while arch 8.0 rejects rliable's ``random_state=None``
(``StratifiedBootstrap``). ``stratified_bootstrap`` below does what rliable's ``StratifiedBootstrap`` does (each
benchmark's runs resampled with replacement, independently; two configurations independently of each other, as
its ``StratifiedIndependentBootstrap``) with percentile intervals, rliable's default, all resamples at once
(``*_batch``: rliable's formulas over a batch; tests/evaluation/test_aggregates.py checks them against rliable's
functions on each resample).

Scores are fractions (0-1) of benchmarks that all score in [0, 1], so no normalisation is needed. With one run per
benchmark (one seed) the stratified bootstrap has nothing to resample: the interval is None, and says so.
"""

from __future__ import annotations

import numpy as np
from rliable import metrics
from scipy import stats as sps

N_RESAMPLES = 2000
PROFILE_TAUS = tuple(np.round(np.linspace(0, 1, 21), 2))


def _check(scores) -> np.ndarray:
    x = np.asarray(scores, dtype=float)
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"scores must be a non-empty (runs, benchmarks) array, got shape {x.shape}")
    return x


def iqm(scores) -> float:
    """The interquartile mean of every run x benchmark score (rliable's ``aggregate_iqm``: the mean of the middle
    50%, scipy's trim_mean at 25%).

    >>> iqm([[0.0, 0.2, 0.4, 1.0]])  # the middle two of four
    0.30000000000000004
    """
    return float(metrics.aggregate_iqm(_check(scores)))


def probability_of_improvement(x, y) -> float:
    """P(X > Y): for each benchmark, the share of (run of x, run of y) pairs where x scores higher (ties count
    half: the Mann-Whitney U over the pairs), averaged over benchmarks (rliable's ``probability_of_improvement``).

    >>> probability_of_improvement([[0.5, 0.2], [0.8, 0.2]], [[0.4, 0.2], [0.7, 0.2]])  # 3/4 on one, ties on the other
    0.625
    """
    x, y = _check(x), _check(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"both configurations need the same benchmarks, got {x.shape[1]} and {y.shape[1]}")
    return float(metrics.probability_of_improvement(x, y))


def profile(scores, taus=PROFILE_TAUS) -> np.ndarray:
    """The performance profile: for each threshold tau, the share of runs scoring above it, averaged over
    benchmarks (rliable's run-score distribution).

    >>> profile([[0.1, 0.9], [0.5, 0.9]], taus=(0.0, 0.5, 0.95)).tolist()
    [1.0, 0.5, 0.0]
    """
    x = _check(scores)
    return np.array([float(np.mean((x > t).mean(axis=0))) for t in taus])


def _resample(m: np.ndarray, n: int, rng) -> np.ndarray:
    """(n, runs, benchmarks): each benchmark's runs drawn with replacement, independently (rliable's
    StratifiedBootstrap)."""
    idx = rng.integers(m.shape[0], size=(n, *m.shape))
    return np.take_along_axis(np.broadcast_to(m, (n, *m.shape)), idx, axis=1)


def iqm_batch(x: np.ndarray) -> np.ndarray:
    """``iqm`` of each of (n, runs, benchmarks) matrices at once (scipy's trim_mean, as rliable's)."""
    return sps.trim_mean(x.reshape(len(x), -1), 0.25, axis=1)


def poi_batch(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``probability_of_improvement`` of (n, runs_x, benchmarks) and (n, runs_y, benchmarks) at once: the share of
    pairs with x > y plus half the ties (the Mann-Whitney U over the pairs), averaged over benchmarks."""
    gt = (x[:, :, None, :] > y[:, None, :, :]).mean(axis=(1, 2))
    eq = (x[:, :, None, :] == y[:, None, :, :]).mean(axis=(1, 2))
    return (gt + 0.5 * eq).mean(axis=1)


def profile_batch(x: np.ndarray, taus=PROFILE_TAUS) -> np.ndarray:
    """``profile`` of each of (n, runs, benchmarks) matrices: (n, taus)."""
    return np.stack([(x > t).mean(axis=1).mean(axis=1) for t in taus], axis=1)


def stratified_bootstrap(matrices: list[np.ndarray], batch_statistic, n_resamples: int = N_RESAMPLES, seed: int = 0,
                         confidence: float = 0.95):
    """Percentile interval of a statistic of (runs, benchmarks) matrices, each matrix's runs resampled with
    replacement within each benchmark and the matrices independently (rliable's StratifiedIndependentBootstrap);
    ``batch_statistic`` takes the (n, runs, benchmarks) resamples of each. None when no matrix has two runs."""
    mats = [_check(m) for m in matrices]
    if all(m.shape[0] < 2 for m in mats):
        return None
    rng = np.random.default_rng(seed)
    values = batch_statistic(*[_resample(m, n_resamples, rng) for m in mats])
    alpha = (1 - confidence) / 2
    low, high = np.quantile(values, alpha, axis=0), np.quantile(values, 1 - alpha, axis=0)
    return (float(low), float(high)) if np.ndim(low) == 0 else (low.tolist(), high.tolist())


def summary(arms: dict[str, np.ndarray], baseline: str | None, seed: int = 0, n_resamples: int = N_RESAMPLES) -> dict:
    """{"iqm": {config: {"value", "ci95"}}, "probability_of_improvement": {config: {"value", "ci95"}} (vs
    ``baseline``), "profile": {"taus", config: {"value", "ci95"}}} of {config: (runs, benchmarks) scores}."""
    out: dict = {"iqm": {}, "probability_of_improvement": {}, "profile": {"taus": list(PROFILE_TAUS)}}
    for name, m in arms.items():
        out["iqm"][name] = {"value": iqm(m), "ci95": stratified_bootstrap([m], iqm_batch, n_resamples, seed),
                            "runs": len(m)}
        out["profile"][name] = {"value": profile(m).tolist(),
                                "ci95": stratified_bootstrap([m], profile_batch, n_resamples, seed)}
        if baseline is not None and name != baseline and baseline in arms:
            out["probability_of_improvement"][name] = {
                "value": probability_of_improvement(m, arms[baseline]),
                "ci95": stratified_bootstrap([m, arms[baseline]], poi_batch, n_resamples, seed)}
    return out


def words(s: dict, baseline: str | None = None) -> list[str]:
    """One line per configuration: IQM and P(config > baseline), in points / as a probability, with intervals."""
    def ci(c, scale=100, fmt=".1f"):
        return "no interval: one run per benchmark" if c is None else f"95% CI {scale * c[0]:{fmt}} to {scale * c[1]:{fmt}}"
    lines = []
    unit = "1 run: interval over problems" if s.get("level") == "adapters" else "{} runs x benchmarks"
    for name, e in s["iqm"].items():
        line = f"{name}: IQM {100 * e['value']:.1f} ({ci(e['ci95'])}; {unit.format(e['runs'])})"
        poi = s["probability_of_improvement"].get(name)
        if poi:
            line += (f"; P({name} > {baseline or 'baseline'}) = {poi['value']:.2f} "
                     f"({ci(poi['ci95'], 1, '.2f')})")
        lines.append(line)
    return lines


def one_run(arms: dict[str, list[np.ndarray]], baseline: str | None, n_resamples: int = N_RESAMPLES,
            seed: int = 0) -> dict:
    """The same aggregates for one run (one seed per arm: no runs to resample), over its benchmarks, with intervals
    from the problems instead: each benchmark's problems resampled within it (the same draw for every arm: they
    answered the same problems), so the intervals speak for these adapters on these problems. ``arms``: {arm:
    [per-problem scores of each benchmark]} (the verdict's strata, one row each)."""
    rng = np.random.default_rng(seed)
    first = next(iter(arms.values()))
    draws = [rng.integers(len(np.ravel(x)), size=(n_resamples, len(np.ravel(x)))) for x in first]
    scores = {a: np.array([[np.mean(np.ravel(x)) for x in xs]]) for a, xs in arms.items()}             # (1, B)
    boot = {a: np.stack([np.ravel(x)[d].mean(axis=1) for x, d in zip(xs, draws)], axis=1)[:, None, :]
            for a, xs in arms.items()}                                                               # (n, 1, B)
    alpha = 0.025

    def ci(values):
        return float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))
    out: dict = {"iqm": {}, "probability_of_improvement": {}, "level": "adapters"}
    for a in arms:
        out["iqm"][a] = {"value": iqm(scores[a]), "ci95": ci(iqm_batch(boot[a])), "runs": 1}
        if baseline in arms and a != baseline:
            out["probability_of_improvement"][a] = {"value": probability_of_improvement(scores[a], scores[baseline]),
                                                    "ci95": ci(poi_batch(boot[a], boot[baseline]))}
    out["words"] = words(out, baseline)
    return out
