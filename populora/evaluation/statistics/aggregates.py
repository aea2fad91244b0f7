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
benchmark (one seed) the stratified bootstrap has nothing to resample: ``one_run`` takes its intervals from the
problems instead (a Bayesian bootstrap with a prior pseudo-problem at each end of the scale, honest on ties and
all-0 data); ``summary`` given the per-problem scores takes the hull of both.
"""

from __future__ import annotations

import numpy as np
from rliable import metrics
from scipy import stats as sps

from populora.evaluation.statistics import intervals

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


def summary(arms: dict[str, np.ndarray], baseline: str | None, seed: int = 0, n_resamples: int = N_RESAMPLES,
            per_problem: dict[str, list[np.ndarray]] | None = None) -> dict:
    """{"iqm": {config: {"value", "ci95"}}, "probability_of_improvement": {config: {"value", "ci95"}} (vs
    ``baseline``), "profile": {"taus", config: {"value", "ci95"}}} of {config: (runs, benchmarks) scores}.

    ``per_problem``: {config: [each benchmark's per-problem scores, averaged over its runs]}: then each IQM and
    probability-of-improvement interval is the hull of rliable's bootstrap over runs (the seeds' spread) and the
    Bayesian bootstrap over problems (``one_run``: the precision of the scores themselves), so that runs with
    identical scores (all 0 on three problems) do not give a zero-width interval: the runs agreeing says nothing
    of how well a few problems pin their score."""
    out: dict = {"iqm": {}, "probability_of_improvement": {}, "profile": {"taus": list(PROFILE_TAUS)}}
    problems = one_run(per_problem, baseline if per_problem and baseline in per_problem else None, n_resamples,
                       seed) if per_problem else None
    for name, m in arms.items():
        out["iqm"][name] = {"value": iqm(m), "ci95": _hull(stratified_bootstrap([m], iqm_batch, n_resamples, seed),
                                                           problems, "iqm", name, iqm(m)), "runs": len(m)}
        out["profile"][name] = {"value": profile(m).tolist(),
                                "ci95": stratified_bootstrap([m], profile_batch, n_resamples, seed)}
        if baseline is not None and name != baseline and baseline in arms:
            value = probability_of_improvement(m, arms[baseline])
            out["probability_of_improvement"][name] = {
                "value": value, "ci95": _hull(stratified_bootstrap([m, arms[baseline]], poi_batch, n_resamples, seed),
                                              problems, "probability_of_improvement", name, value)}
    return out


def _hull(runs, problems: dict | None, stat: str, name: str, value: float):
    """The hull of the runs' interval and the problems' (either may be None), containing ``value``."""
    other = (problems or {}).get(stat, {}).get(name, {}).get("ci95")
    cis = [c for c in (runs, other) if c is not None]
    if not cis:
        return None
    return (min(min(c[0] for c in cis), value), max(max(c[1] for c in cis), value))


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
    from the problems instead: the Bayesian bootstrap of each benchmark's problems (Dirichlet weights shared by
    the arms: they answered the same problems) with a prior pseudo-problem at each corner of the arms' scores
    (``intervals.bayes_draws``), so that arms with no variance (every score 0) still have posterior spread:
    IQM 0.0 on three problems solved by nobody reads 0.0 to ~40, not 0.0 to 0.0, and P(> baseline) of two
    identical all-0 arms 0.50 with an interval wide as the benchmarks' coin flips, not 0.50 to 0.50 (ties count
    half in the estimate; posterior draws do not tie). An interval is extended to its estimate where that lies
    at the edge of the scale. The intervals speak for these adapters on these problems. ``arms``: {arm:
    [per-problem scores of each benchmark]} (the verdict's strata, one row each)."""
    draws = intervals.bayes_draws({a: [np.ravel(x) for x in xs] for a, xs in arms.items()}, n_resamples, seed)
    scores = {a: np.array([[np.mean(np.ravel(x)) for x in xs]]) for a, xs in arms.items()}             # (1, B)
    boot = {a: d[:, None, :] for a, d in draws.items()}                                               # (n, 1, B)
    out: dict = {"iqm": {}, "probability_of_improvement": {}, "level": "adapters"}
    for a in arms:
        value = iqm(scores[a])
        out["iqm"][a] = {"value": value, "ci95": intervals.posterior_interval(iqm_batch(boot[a]), value), "runs": 1}
        if baseline in arms and a != baseline:
            value = probability_of_improvement(scores[a], scores[baseline])
            out["probability_of_improvement"][a] = {
                "value": value, "ci95": intervals.posterior_interval(poi_batch(boot[a], boot[baseline]), value)}
    out["words"] = words(out, baseline)
    return out
