"""The league's one scale: a Rasch item-response fit of students' answers to a fixed task panel.

P(student s solves task i) = sigmoid(ability_s - difficulty_i), fitted jointly to every verdict by penalised
maximum likelihood (a weak Gaussian prior on every parameter: an item nobody solves, or a student who solves
everything, keeps a finite estimate instead of running off to infinity). The prior, the same for every student,
fixes the scale's location; the fit is then shifted (which leaves the likelihood unchanged) so that one student,
the anchor (the base model), sits at ability 0: every ability and difficulty reads as logits relative to the
base model, and students whose answers are alike get alike abilities, the anchor included. The 2PL variant adds a discrimination per task, sigmoid(a_i (ability_s - b_i)),
with a log-normal prior on a_i around 1.

Why scipy and not an IRT package: the Rasch likelihood is twenty lines with its gradient, and
``scipy.optimize.minimize`` (L-BFGS-B) fits a league of tens of students and hundreds of tasks in milliseconds,
which the bootstrap needs (hundreds of refits). The Python IRT packages do not serve: ``girth`` (unmaintained
since 2021, no anchoring, no count data), ``py-irt`` (Pyro/variational, a heavy dependency, seconds per fit),
``mirt`` and ``TAM`` are R.

Intervals: a bootstrap over tasks and answers. Each replicate draws the panel's tasks with replacement and, in
every (student, task) cell, the cell's n answers with replacement (k* ~ Binomial(n, k / n)), then refits. A
teacher's strength (mean difficulty of its valid tasks) and every comparison are computed inside each replicate,
so their intervals carry the same resampling, paired: a population and a baseline answer the same resampled tasks.
The bootstrap cannot see the answers' own noise where every replicate answers alike (students who all solve
nothing resample to nothing, and their percentile interval had zero width, "+0.00 [+0.00, +0.00]"): each interval
is widened to at least the Laplace posterior's (``covariance``, ``widen``), never zero width on finite data.

Inputs are count matrices: ``solved[s, i]`` answers of student s to task i that were right, of ``tries[s, i]``
(0 where the student did not answer the task; such cells carry no information).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import norm, spearmanr

PRIOR_SD = 3.0        # prior sd of abilities and difficulties (logits): weak, only tames separation
LOG_A_PRIOR_SD = 0.5  # 2PL: prior sd of log discrimination
N_BOOT = 200
CONFIDENCE = 0.95


@dataclass
class Fit:
    """A fitted scale: ``ability`` (S,), ``difficulty`` (I,), ``discrimination`` (I,) (ones for Rasch)."""

    ability: np.ndarray
    difficulty: np.ndarray
    discrimination: np.ndarray
    anchor: int
    converged: bool


def _check(solved: np.ndarray, tries: np.ndarray, anchor: int) -> tuple[np.ndarray, np.ndarray]:
    solved, tries = np.asarray(solved, dtype=float), np.asarray(tries, dtype=float)
    if solved.ndim != 2 or solved.shape != tries.shape:
        raise ValueError(f"solved and tries must be (students, tasks) matrices of one shape; got {solved.shape} and {tries.shape}")
    if solved.shape[0] < 2 or solved.shape[1] < 1:
        raise ValueError(f"a fit needs at least 2 students and 1 task; got {solved.shape[0]} and {solved.shape[1]}")
    if np.any(solved < 0) or np.any(solved > tries):
        raise ValueError("solved must be between 0 and tries in every cell")
    if not 0 <= anchor < solved.shape[0]:
        raise ValueError(f"anchor {anchor} is not a student index (0..{solved.shape[0] - 1})")
    return solved, tries


def fit(solved, tries, anchor: int = 0, model: str = "rasch", start: Fit | None = None) -> Fit:
    """Penalised maximum-likelihood fit; ``anchor``: the student held at ability 0; ``model``: rasch | 2pl.

    >>> k = np.array([[2, 1, 0], [4, 3, 1]]); n = np.full((2, 3), 4)
    >>> f = fit(k, n)
    >>> float(f.ability[0]), bool(f.ability[1] > 0), bool(f.difficulty[0] < f.difficulty[1] < f.difficulty[2])
    (0.0, True, True)
    """
    k, n = _check(solved, tries, anchor)
    x0 = None if start is None else _pack(start, anchor, model)[None, :]
    theta, b, a, ok = fit_many(k[None], n[None], anchor, model, x0)
    return Fit(theta[0], b[0], a[0], anchor, ok)


def _pack(f: Fit, anchor: int, model: str) -> np.ndarray:
    return np.concatenate([f.ability, f.difficulty] + ([np.log(f.discrimination)] if model == "2pl" else []))


def fit_many(k: np.ndarray, n: np.ndarray, anchor: int, model: str = "rasch", x0: np.ndarray | None = None):
    """``B`` independent fits at once, ``k`` and ``n`` (B, S, I), each shifted so the ``anchor`` student is at 0
    (``x0``: a warm start, e.g. a shifted fit: near the optimum, which is found from anywhere). The objective is
    the fits' sum, which separates, so one L-BFGS run over all parameters gives each fit's optimum, with the numpy work batched (the bootstrap's
    hundreds of refits cost a few single fits). Returns ability (B, S), difficulty (B, I), discrimination (B, I),
    converged."""
    if model not in ("rasch", "2pl"):
        raise ValueError(f"model must be rasch or 2pl, not {model!r}")
    B, S, I = k.shape
    width = S + I * (2 if model == "2pl" else 1)
    objective = _objective(k, n, model)
    x0 = np.zeros((B, width)) if x0 is None else np.asarray(x0, dtype=float).reshape(B, width)
    res = minimize(objective, x0.ravel(), jac=True, method="L-BFGS-B",
                   options={"maxiter": 5000, "gtol": 1e-5, "maxcor": 20})
    theta, b, log_a = _unpack(res.x, B, S, I, model)
    shift = theta[:, anchor:anchor + 1]  # (B, 1): the anchor to 0, the whole scale with it
    return theta - shift, b - shift, np.exp(log_a), bool(res.success)


def _unpack(x: np.ndarray, B: int, S: int, I: int, model: str):
    """(ability (B, S), difficulty (B, I), log discrimination (B, I)) from the flat parameter vector."""
    x = x.reshape(B, -1)
    return x[:, :S], x[:, S:S + I], x[:, S + I:] if model == "2pl" else np.zeros((B, I))


def _objective(k: np.ndarray, n: np.ndarray, model: str):
    """The penalised negative log-likelihood of ``B`` fits (``k``, ``n``: (B, S, I)) and its gradient, as one
    function of the flat parameter vector (the fits' parameters one after another)."""
    B, S, I = k.shape
    two = model == "2pl"

    def objective(x):
        theta, b, log_a = _unpack(x, B, S, I, model)
        a = np.exp(log_a)[:, None, :]                           # (B, 1, I)
        d = theta[:, :, None] - b[:, None, :]                   # (B, S, I)
        z = a * d
        # binomial log-likelihood, -n log(1 + e^z) + k z, written stably with logaddexp
        nll = np.sum(n * np.logaddexp(0.0, z) - k * z)
        g = (n * expit(z) - k) * a                              # d nll / d d, (B, S, I)
        pen = (np.sum(theta ** 2) + np.sum(b ** 2)) / (2 * PRIOR_SD ** 2)
        grads = [g.sum(axis=2) + theta / PRIOR_SD ** 2, -g.sum(axis=1) + b / PRIOR_SD ** 2]
        if two:
            pen += np.sum(log_a ** 2) / (2 * LOG_A_PRIOR_SD ** 2)
            grads.append((g * d).sum(axis=1) + log_a / LOG_A_PRIOR_SD ** 2)
        return nll + pen, np.concatenate(grads, axis=1).ravel()
    return objective


def covariance(solved, tries, f: Fit, model: str = "rasch") -> np.ndarray:
    """The Laplace approximation of the posterior (the prior is the penalty): the inverse Hessian of the penalised
    negative log-likelihood at the fit, over (ability (S), difficulty (I)[, log discrimination (I)]). The
    likelihood depends on ability - difficulty only and the prior's Hessian is constant, so the Hessian at the
    anchored fit is the Hessian at the optimum. The prior makes it positive definite: every contrast has a
    positive variance, also where the bootstrap has none (students whose answers are all alike resample alike in
    every replicate, and their percentile interval has zero width). Central differences of the exact gradient."""
    k, n = np.asarray(solved, dtype=float)[None], np.asarray(tries, dtype=float)[None]
    grad = lambda x: _objective(k, n, model)(x)[1]  # noqa: E731
    x = _pack(f, f.anchor, model)
    h = 1e-5 * np.maximum(1.0, np.abs(x))
    H = np.empty((x.size, x.size))
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = h[j]
        H[:, j] = (grad(x + e) - grad(x - e)) / (2 * h[j])
    return np.linalg.inv((H + H.T) / 2)


def widen(value: float, lo: float, hi: float, var: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The bootstrap's interval (``lo``, ``hi``) extended to hold value +- z sd of the Laplace posterior
    (``var``: a contrast's variance from ``covariance``): the wider of the two on each side. The bootstrap carries
    the panel's sampling (another draw of tasks), the curvature the answers' own noise, which the bootstrap
    cannot see where every replicate answers alike (the verdict's rule: never a zero-width interval on finite
    data, ``intervals``).

    >>> [round(v, 2) for v in widen(0.0, 0.0, 0.0, 1.0)], widen(1.0, -3.0, 2.0, 0.25)
    ([-1.96, 1.96], (-3.0, 2.0))
    """
    half = float(norm.isf((1 - confidence) / 2)) * float(np.sqrt(max(var, 0.0)))
    if np.isnan(value):
        return lo, hi
    lo = value - half if np.isnan(lo) else min(lo, value - half)
    hi = value + half if np.isnan(hi) else max(hi, value + half)
    return float(lo), float(hi)


def resample(solved, tries, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One bootstrap replicate: (task indices drawn with replacement (I,), solved*, tries*) over those tasks,
    each cell's answers redrawn with replacement."""
    k, n = np.asarray(solved), np.asarray(tries)
    items = rng.integers(0, k.shape[1], size=k.shape[1])
    kk, nn = k[:, items], n[:, items]
    p = np.divide(kk, nn, out=np.zeros(kk.shape), where=nn > 0)
    return items, rng.binomial(nn.astype(np.int64), p).astype(float), nn.astype(float)


def interval(samples: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile interval of bootstrap ``samples`` (NaNs, e.g. a task a replicate did not draw, left out)."""
    s = np.asarray(samples, dtype=float)
    s = s[~np.isnan(s)]
    if s.size == 0:
        return float("nan"), float("nan")
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(s, [tail, 100 - tail])
    return float(lo), float(hi)


@dataclass
class Boot:
    """Bootstrap replicates: ``ability`` (B, S); ``difficulty`` (B, I), NaN where a replicate did not draw the
    task (the mean of its copies where it drew several); ``items`` (B, I) the drawn task indices."""

    ability: np.ndarray
    difficulty: np.ndarray
    items: np.ndarray


def bootstrap(solved, tries, anchor: int = 0, model: str = "rasch", n_boot: int = N_BOOT, seed: int = 0,
              point: Fit | None = None) -> Boot:
    """``n_boot`` refits on replicates over tasks and answers (warm-started from the point fit, all at once:
    ``fit_many``)."""
    k, n = _check(solved, tries, anchor)
    point = point or fit(k, n, anchor, model)
    rng = np.random.default_rng(seed)
    S, I = k.shape
    draws = [resample(k, n, rng) for _ in range(n_boot)]
    drawn = np.stack([d[0] for d in draws])                                   # (B, I)
    kk, nn = np.stack([d[1] for d in draws]), np.stack([d[2] for d in draws])  # (B, S, I)
    start = Fit(point.ability, point.difficulty, point.discrimination, anchor, True)
    x0 = np.stack([_pack(Fit(start.ability, start.difficulty[it], start.discrimination[it], anchor, True), anchor, model)
                   for it in drawn])
    ability, fitted, _, _ = fit_many(kk, nn, anchor, model, x0)
    difficulty = np.full((n_boot, I), np.nan)
    for r in range(n_boot):  # a task drawn several times: the mean of its copies
        sums, counts = np.bincount(drawn[r], fitted[r], I), np.bincount(drawn[r], minlength=I)
        difficulty[r] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return Boot(ability, difficulty, drawn)


def group_mean_difficulty(difficulty_by_draw: np.ndarray, items: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Mean difficulty of each group's tasks in one replicate, over the tasks drawn (copies counted as drawn):
    ``difficulty_by_draw`` (I,) the fitted difficulty of each drawn task, ``items`` (I,) which task each draw is,
    ``groups`` (I_total,) each task's group. NaN for a group with no task drawn."""
    g = groups[items]
    sums, counts = np.bincount(g, difficulty_by_draw, n_groups), np.bincount(g, minlength=n_groups)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def wilson(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a proportion (a teacher's validity rate).

    >>> tuple(round(v, 3) for v in wilson(8, 10))
    (0.49, 0.943)
    """
    if trials <= 0:
        return float("nan"), float("nan")
    p = successes / trials
    den = 1 + z * z / trials
    mid = (p + z * z / (2 * trials)) / den
    half = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / den
    # clipped to the rate (rounding left 0 of n at -1e-17, shown as "-0%")
    return float(min(p, max(0.0, mid - half))), float(max(p, min(1.0, mid + half)))


def spearman(x, y) -> float:
    """Rank correlation (average ranks for ties).

    >>> spearman([1, 2, 3, 4], [10, 20, 30, 40]), spearman([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
    """
    return float(spearmanr(x, y).statistic)
