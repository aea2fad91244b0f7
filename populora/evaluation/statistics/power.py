"""The smallest effect a design can see: the minimum detectable effect (MDE) at 80% power, one function (``mde``)
for every place that prints it (the report, the sweep report, Compare, Launch's sweep form, ``sweep --dry-run``,
``populora plan``), from the design actually scored (``from_scored``) or planned (``planned``).

A design is: the benchmarks with their per-problem success probabilities ``p`` (as many as the problems scored,
after ``--limit``), the seeds per arm, the samples per problem, the members of the population, the seed effect
and how much of it the benchmarks share, and the sizes of the Holm families. The model is the calibration's
(``calibration.py``):

- per problem, a member or the baseline solves it with probability p_i (greedy: one Bernoulli draw per adapter;
  ``samples`` draws at a temperature: their mean, the problem stays the unit), so the per-problem noise of
  "population mean (M members) - baseline" is p_i (1 - p_i) (1/M + 1) / samples; where scored, that noise is
  measured (``measured_noise``; at one seed, the variance of the per-problem differences the test itself reads),
  and the slope g_b with it;
- a training seed moves an adapter by u ~ N(0, sigma) logits (all members of a run share it), i.e. its benchmark
  score by about u x g_b, g_b = mean_i p_i (1 - p_i) (the logistic's slope), in both arms; a share ``shared`` of
  that variance is common to all benchmarks of a run (they co-move, and the overall average gains nothing from
  averaging over them), the rest is per benchmark.

The MDE of a comparison (a benchmark, or the overall average) is the true difference of the method that the
report's own test detects (rejects at its level, in the right direction) with probability 0.8, the seed effects
drawn too:
- S >= 2 seeds per arm: ``stats.seed_compare``'s t on S - 1 degrees of freedom, standard error
  sqrt((noise + seed) / S): the noncentral t (``detectable``);
- one seed: the test is over problems only (``stats.compare``: "these adapters on these problems"), but the
  adapters' difference is the method's plus the two runs' seed effects, so the test rejects with probability
  P(N(delta, noise + seed) > z se_noise): delta = z_(alpha/2) se_noise + z_0.8 sqrt(se_noise^2 + seed). At
  ``stats.SIGN_FLIP_MAX`` problems or fewer the test is the exact sign flip, whose discreteness no normal
  approximation captures: its power is simulated (``_flip_power``, fixed seed, ``FLIP_REPLICATES`` worlds);
- the level: per benchmark (and per average) Holm's first step, alpha / ``family``; overall, the primary's
  alpha / ``primary`` (one configuration: 0.05). ``headline.FAMILIES`` defines the families.

What is printed, the rule (``docs/evaluation.md``): a figure is at least one problem's worth (1/n of the benchmark;
overall, the largest w_b / n_b) and at most what the benchmark can move (max(m, 1 - m) of its mean score m);
a design that cannot reach its level at all (one seed on 5 problems: the sign flip's smallest p is 2/2^5 = 0.0625)
or not with 80% power within that range prints no number but what would: "needs >= 6 problems", ">= 4 seeds per arm".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

from populora.evaluation.harness import benchmarks
from populora.evaluation import estimate
from populora.evaluation.statistics import families, stats
from populora.evaluation.harness.benchmarks import BENCHMARKS

ALPHA, POWER = 0.05, 0.80
SIGMA_DEFAULT = 0.1   # logits: the seed effect assumed until a sweep measures it (the calibration's middle regime:
                      # ~1.2 points on a benchmark at 50%), and the floor of a measured one (``from_scored``)
SHARED_DEFAULT = 1.0  # the seed effect's share common to all benchmarks until seeds measure it: 1, the worst case
                      # for an average (the benchmarks co-move); per benchmark the share does not matter
SIGMA_ONE_SEED = 0.2  # logits: the seed effect a one-seed design is priced with (``from_scored``, ``planned``): one
                      # seed per arm reads neither its size nor its share, so the conservative case, the top of the
                      # calibration's worlds (0.1-0.2 logit, bench stats), shared; at 0.1 the printed MDE delivered
                      # 0.63 +- 0.02 power where seeds of 0.15 logit are shared (issue 68)
SHARE_QUANTILE = 0.40  # the overall's seed term, which sets the share, is read at its upper 60% bound (``from_scored``)
MEMBERS = 4           # members averaged in "population mean" (the paper's 4 teachers + 4 students: 4 per role)
SIZES = {"humaneval_plus": 164, "mbpp_plus": 378, "livecodebench": 279, "aime24": 30, "aime25": 30, "amc23": 40,
         "math500": 500, "minerva_math": 272, "gsm8k": 1319, "olympiadbench": 675}  # the data files' counts (2026)
# Before a run exists, the base model's score per benchmark is assumed (typical of a 7B instruct model; a run's
# own scores replace them in every report): with CONCENTRATION, the Beta of the per-problem probabilities.
BASE_SCORE = {"humaneval_plus": 0.70, "mbpp_plus": 0.60, "livecodebench": 0.20, "aime24": 0.10, "aime25": 0.07,
              "amc23": 0.35, "math500": 0.60, "minerva_math": 0.25, "gsm8k": 0.85, "olympiadbench": 0.28}
CONCENTRATION = 1.0   # Beta(m K, (1 - m) K), K = 1: U-shaped, most problems nearly always or nearly never solved
OVERALL = "overall"
FLIP_REPLICATES = 400  # simulated worlds per power of a sign-flip design (power's Monte Carlo error ~0.02 at 0.8)
MOST_SEEDS, MOST_PROBLEMS = 50, 100_000  # "needs >= k" is searched up to these
_LOGIT_MAX = 12.0      # the largest planted effect tried (logits): beyond it every problem is nearly always solved


@dataclass
class Design:
    """What an MDE is computed for."""
    p: dict[str, np.ndarray]     # {benchmark: per-problem success probabilities} (their count: the problems scored)
    seeds: int = 1               # training seeds per arm
    samples: int = 1             # samples per problem (1: greedy)
    members: int = MEMBERS       # members averaged in the population arm
    sigma: float = SIGMA_DEFAULT  # seed effect, logits
    shared: float = SHARED_DEFAULT  # share of the seed variance common to all benchmarks of a run (bool: 1 or 0)
    family: int = 20             # tests in the Holm family of the per-benchmark comparisons (10 x 2 - 1 + averages)
    primary: int = 1             # tests in the primary's family (configurations compared with the baseline)
    scores: dict[str, float] | None = None  # the benchmarks' scores ``p`` was drawn at (``beta_p``); None: mean of p
    noise: dict[str, float] | None = None  # per benchmark, one seed's per-problem noise variance of the difference,
    # measured (``from_scored``); a benchmark not in it: the model's p (1 - p) (1/M + 1) / samples


def _cells(d: Design) -> dict[str, dict[str, float]]:
    """{comparison: {benchmark: weight}}: each benchmark alone, and the overall (unweighted) average."""
    names = [b for b in d.p if len(d.p[b])]
    out = {b: {b: 1.0} for b in names}
    if names:
        out[OVERALL] = {b: 1 / len(names) for b in names}
    return out


def _level(d: Design, cell: str) -> float:
    return ALPHA / max(d.primary, 1) if cell == OVERALL else ALPHA / max(d.family, 1)


def slope(d: Design, b: str) -> float:
    """Benchmark ``b``'s g_b = mean p (1 - p): the logistic's slope (a seed's logit shift moves its score by about
    u g_b) and, x (1/M + 1) / samples, the per-problem noise variance of one seed's difference; so where that
    noise is measured (``Design.noise``) g_b is read from it, else from the model's ``p``."""
    if d.noise and b in d.noise:
        return float(d.noise[b]) * d.samples / (1 / d.members + 1)
    return _model_slope(d.p[b])


def _model_slope(p) -> float:
    """mean p (1 - p) of per-problem probabilities ``p``."""
    p = np.asarray(p, dtype=float)
    return float(np.mean(p * (1 - p)))


def _variances(d: Design, weights: dict[str, float]) -> tuple[float, float]:
    """(noise, seed) variance of one seed's difference of the weighted benchmark means."""
    noise = slope_ = spread = 0.0
    for b, w in weights.items():
        g = slope(d, b)
        noise += w ** 2 * g * (1 / d.members + 1) / d.samples / len(d.p[b])
        slope_ += w * g
        spread += (w * g) ** 2
    rho = float(d.shared)
    return noise, float(2 * d.sigma ** 2 * (rho * slope_ ** 2 + (1 - rho) * spread))


@functools.lru_cache(maxsize=128)
def _laguerre(df: float, nodes: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of E[f(V / 2)], V ~ chi2(df), by generalised Gauss-Laguerre (x^(df/2 - 1) e^-x)."""
    x, w = special.roots_genlaguerre(nodes, df / 2 - 1)
    return x, w / w.sum()


def detectable(se: float, df: float | None, alpha: float = ALPHA, power: float = POWER) -> float:
    """The difference a two-sided level-``alpha`` test with standard error ``se`` rejects with probability
    ``power``: normal (``df`` None) or t with ``df`` degrees of freedom (noncentral t).

    >>> round(detectable(1.0, None), 3)  # (1.96 + 0.84) x se
    2.802
    >>> round(detectable(1.0, 2), 2)     # 3 seeds: twice the 2.8 standard errors of a normal test
    5.65
    """
    if df is None:
        return float((sps.norm.isf(alpha / 2) + sps.norm.isf(1 - power)) * se)
    crit = sps.t.isf(alpha / 2, df)

    def shortfall(ncp):
        # the noncentral t's two tails as an integral over the chi-square of its denominator: scipy's nct.cdf is
        # NaN in its far tail at small alpha (0.05 / 29 on 2 df), which read as power 1 and halved the MDE
        # (generalised Gauss-Laguerre in V / 2, V ~ chi2(df): exact for the chi-square's own weight)
        x, w = _laguerre(df)
        s = crit * np.sqrt(2 * x / df)
        return float(w @ (sps.norm.sf(s - ncp) + sps.norm.cdf(-s - ncp))) - power

    high = crit + 1.0
    while shortfall(high) < 0:
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high) * se)


def _n(d: Design, weights) -> int:
    return sum(len(d.p[b]) for b in weights)


def _step(d: Design, weights) -> float:
    """One problem's worth of the comparison: the largest weight of one problem (w_b / n_b)."""
    return max(w / len(d.p[b]) for b, w in weights.items())


def _room(d: Design, weights) -> float:
    """The largest difference the comparison can show: max(m, 1 - m) of its mean score m."""
    m = sum(w * float(np.mean(d.p[b])) for b, w in weights.items())
    return max(m, 1 - m)


def _min_p(d: Design, weights) -> float:
    """The smallest p-value the report's test can give: one seed, the sign flip's 2 / 2^n (at most
    ``SIGN_FLIP_MAX`` problems) or the bootstrap's 2 / (B + 1); >= 2 seeds, the t's: 0."""
    if d.seeds >= 2:
        return 0.0
    n = _n(d, weights)
    return 2 / 2 ** n if n <= stats.SIGN_FLIP_MAX else 2 / (stats.N_RESAMPLES + 1)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _logit(p):
    p = np.clip(np.asarray(p, dtype=float), 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(16)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def true_difference(d: Design, weights, effect: float) -> float:
    """E(population mean) - E(baseline) of the comparison when ``effect`` logits are planted on every member,
    over the design's problems and the seed effects (N(0, sigma) logits, Gauss-Hermite)."""
    out = 0.0
    for b, w in weights.items():
        lp = _logit(d.p[b])[:, None] + d.sigma * _NODES[None, :]
        out += w * float(np.mean((_sigmoid(lp + effect) - _sigmoid(lp)) @ _WEIGHTS))
    return out


def _draw_seed(rng, d: Design, names: list[str], reps: int) -> np.ndarray:
    """(reps, benchmarks) seed effects of one run, a share ``shared`` of the variance common to its benchmarks."""
    rho = float(d.shared)
    common = rng.normal(0, 1, (reps, 1))
    own = rng.normal(0, 1, (reps, len(names)))
    return d.sigma * (np.sqrt(rho) * common + np.sqrt(1 - rho) * own)


@functools.lru_cache(maxsize=64)
def _flips(n: int) -> np.ndarray:
    return (1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)).astype(float)  # (2^n, n) of +-1


def flip_p(centred: np.ndarray) -> np.ndarray:
    """Sign-flip p-values of many worlds at once: ``centred`` (n, worlds) of weighted per-problem differences;
    the share of the 2^n sign flips whose |sum| is at least the observed (``stats.sign_flip``'s p at 0)."""
    sums = _flips(centred.shape[0]) @ centred                       # (2^n, worlds)
    return np.mean(np.abs(sums) >= np.abs(centred.sum(axis=0))[None, :] - 1e-12, axis=0)


def flip_p_steps(steps: np.ndarray) -> tuple[np.ndarray, int]:
    """(counts (worlds, 2 h + 1) of the 2^n flips' sums -h..h, h) for ``flip_p``'s p when every problem weighs
    the same and the differences are whole steps (``steps``: (n, worlds) integers, a difference of
    k / (members x samples) is k): the law of the sum of the n signed steps by convolution, exact, without the
    2^n enumeration (16 problems: 65536 flips x 400 worlds)."""
    steps = np.abs(np.asarray(steps, dtype=np.int64))
    n, worlds = steps.shape
    half = int(steps.sum(axis=0).max()) if steps.size else 0
    counts = np.zeros((worlds, 2 * half + 1))
    counts[:, half] = 1.0
    for row in steps:
        new = np.zeros_like(counts)
        for v in np.unique(row):
            at = row == v
            if v == 0:
                new[at] = 2 * counts[at]
            else:
                new[at, v:] += counts[at, :-v]
                new[at, :-v] += counts[at, v:]
        counts = new
    return counts, half


def _flip_power(d: Design, weights: dict[str, float], effect: float, level: float,
                reps: int = FLIP_REPLICATES) -> float:
    """The probability that the one-seed sign-flip test on the comparison's problems rejects at its level with a
    positive difference, ``effect`` logits planted on every member: simulated, the same worlds for every
    effect (seed 0), so the power rises with the effect as it should."""
    rng = np.random.default_rng(0)
    names = list(weights)
    u_pop, u_base = _draw_seed(rng, d, names, reps), _draw_seed(rng, d, names, reps)
    rows = []
    for j, b in enumerate(names):
        lp = _logit(d.p[b])[None, :]                                   # (1, n)
        n = lp.shape[1]
        pop = rng.random((reps, d.members, d.samples, n)) < _sigmoid(lp + u_pop[:, j, None] + effect)[:, None, None, :]
        base = rng.random((reps, d.samples, n)) < _sigmoid(lp + u_base[:, j, None])[:, None, :]
        rows.append(weights[b] / n * (pop.mean(axis=(1, 2)) - base.mean(axis=1)))  # (reps, n)
    centred = np.concatenate(rows, axis=1).T                           # (n, reps)
    if len({round(weights[b] / len(d.p[b]), 15) for b in names}) == 1:  # equal weights: exact by convolution
        unit = d.members * d.samples
        signed = np.rint(centred * unit / (weights[names[0]] / len(d.p[names[0]]))).astype(np.int64)
        counts, half = flip_p_steps(signed)
        observed = np.abs(signed.sum(axis=0))
        sums = np.abs(np.arange(-half, half + 1))[None, :]
        p = (counts * (sums >= observed[:, None])).sum(axis=1) / 2 ** signed.shape[0]
    else:
        p = flip_p(centred)
    return float(np.mean((p < level) & (centred.sum(axis=0) > 0)))


def _flip_mde(d: Design, weights, level: float) -> float | None:
    """The smallest planted difference the sign-flip design detects with 80% power (None: none within reach)."""
    if _flip_power(d, weights, _LOGIT_MAX, level) < POWER:
        return None
    low, high = 0.0, _LOGIT_MAX
    for _ in range(11):  # to 12 / 2^11 = 0.006 logit
        mid = (low + high) / 2
        low, high = (mid, high) if _flip_power(d, weights, mid, level) < POWER else (low, mid)
    return true_difference(d, weights, high)


def _discordant(d: Design, weights, effect: float, k: int) -> float:
    """P(at least ``k`` of the comparison's problems have a nonzero difference) with ``effect`` logits planted
    (no seed effect): each problem is concordant when every member's and the baseline's draws agree, and the
    count is a sum of independent Bernoullis (its law by convolution)."""
    law = np.array([1.0])
    for b in weights:
        p = np.asarray(d.p[b], dtype=float)
        q = _sigmoid(_logit(p) + effect)
        draws = d.members * d.samples
        same = q ** draws * p ** d.samples + (1 - q) ** draws * (1 - p) ** d.samples
        for z in same:
            law = np.convolve(law, [z, 1 - z])
    return float(law[k:].sum())


def _live(d: Design, weights, level: float, raw: float) -> float | None:
    """The bootstrap's MDE (normal, ``raw``) where enough problems differ to reach ``level``: a difference carried
    by a handful of problems (GSM8K at 85% on 20 problems: ~3 differ) cannot reach ``level``, whatever the
    normal approximation says: with k of n problems differing, all the same way, the bootstrap's p is at least
    twice the chance that a resample draws none of them, 2 (1 - k/n)^n (about 2 e^-k). With fewer than k* (the
    least k whose bound is below the level: 4 at 0.05) differing in more than 20% of worlds, the MDE is raised to
    the effect that makes k* differ 80% of the time (None when none does)."""
    n = _n(d, weights)
    need = next((k for k in range(1, n + 1) if 2 * (1 - k / n) ** n < level), n + 1)
    if n > 64 * need:  # many problems: the count of differing ones is far above k* (cheap exit)
        return raw
    effect = optimize.brentq(lambda e: true_difference(d, weights, e) - raw, -_LOGIT_MAX, _LOGIT_MAX) \
        if true_difference(d, weights, _LOGIT_MAX) > raw else _LOGIT_MAX
    if _discordant(d, weights, effect, need) >= POWER:
        return raw
    if _discordant(d, weights, _LOGIT_MAX, need) < POWER:
        return None
    low, high = effect, _LOGIT_MAX
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (mid, high) if _discordant(d, weights, mid, need) < POWER else (low, mid)
    return max(raw, true_difference(d, weights, high))


def _raw(d: Design, cell: str, weights) -> float | None:
    """The MDE of one comparison before the printing rule's bounds (None: the test cannot reach its level)."""
    level = _level(d, cell)
    if _min_p(d, weights) >= level:
        return None
    noise, seed = _variances(d, weights)
    if d.seeds >= 2:
        return detectable(math.sqrt((noise + seed) / d.seeds), d.seeds - 1, level)
    if _n(d, weights) <= stats.SIGN_FLIP_MAX:
        return _flip_mde(d, weights, level)
    raw = float(sps.norm.isf(level / 2) * math.sqrt(noise) + sps.norm.isf(1 - POWER) * math.sqrt(noise + seed))
    return _live(d, weights, level, raw)


def _printable(d: Design, cell: str, weights) -> float | None:
    """The MDE as printed: at least one problem's worth, None when beyond what the comparison can move."""
    raw = _raw(d, cell, weights)
    if raw is None or raw > _room(d, weights):
        return None
    return max(raw, _step(d, weights))


def _resized(d: Design, n: int) -> Design:
    """The design with ``n`` problems per benchmark at the same scores (``beta_p`` of each benchmark's score)."""
    scores = {b: (d.scores or {}).get(b, float(np.mean(p))) for b, p in d.p.items()}
    return replace(d, p=beta_p(scores, {b: n for b in d.p}), scores=scores)


def design_key(d: Design) -> tuple:
    """Every field of ``d`` its MDE depends on, hashable and exact (the arrays' bytes, the floats as they are): the
    key of every remembered answer (``_needs``, ``calibration_worlds.remembered_power``). A key that leaves a
    field out hands one design the answer of another (issue 68: ``Design.noise`` left out, the same design read
    "needs >= 4 seeds per arm" alone and ">= 6" after another was priced)."""
    def items(x):
        return None if x is None else tuple(sorted((k, float(v)) for k, v in x.items()))
    return (tuple((b, np.asarray(p, dtype=float).tobytes()) for b, p in d.p.items()), int(d.seeds), int(d.samples),
            int(d.members), float(d.sigma), float(d.shared), int(d.family), int(d.primary), items(d.scores),
            items(d.noise))


_NEEDS: dict[tuple, str] = {}  # a search per design and comparison, once per process (the UI asks again and again)


def _needs(d: Design, cell: str) -> str:
    """``_search``, remembered by the whole design (``design_key``)."""
    key = (cell, design_key(d))
    if key not in _NEEDS:
        _NEEDS[key] = _search(d, cell)
    return _NEEDS[key]


def forget() -> None:
    """Empty the remembered searches (``_needs``): a check that prices designs from scratch, in any order."""
    _NEEDS.clear()


def _search(d: Design, cell: str) -> str:
    """What would make an undetectable comparison detectable: more seeds (>= 2), or more problems per benchmark
    (the fewest at which ``_printable`` gives a figure, searched from the sign flip's bound up)."""
    if d.seeds >= 2:
        for s in range(d.seeds + 1, MOST_SEEDS + 1):
            if _printable(replace(d, seeds=s), cell, _cells(replace(d, seeds=s))[cell]) is not None:
                return f"needs >= {s} seeds per arm"
    per = len(_cells(d)[cell])
    suffix = " per benchmark" if cell == OVERALL else ""

    def works(n: int) -> bool:
        r = _resized(d, n)
        return _printable(r, cell, _cells(r)[cell]) is not None

    low = min(len(d.p[b]) for b in _cells(d)[cell])
    bound = math.floor(math.log2(2 / _level(d, cell))) + 1  # 2 / 2^n < level: the sign flip's least n
    if d.seeds == 1 and low * per < bound:
        low = max(low, math.ceil(bound / per) - 1)
        if works(low + 1):
            return (f"needs >= {low + 1} problems{suffix} (one seed: the exact sign-flip test's smallest p, 2/2^n, "
                    f"is not below {_level(d, cell):.2g} with fewer)")
    high = low
    while True:
        high *= 2
        if high > MOST_PROBLEMS:
            return "not detectable at 80% power with " + (
                f"{d.seeds} seeds per arm at any number of problems" if d.seeds > 1
                else "one seed per arm at any number of problems: needs >= 2 seeds per arm")
        if works(high):
            break
        low = high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if works(mid) else (mid, high)
    return f"needs >= {high} problems{suffix}"


def mde(d: Design) -> dict:
    """The MDE as printed, for every comparison of the design: {"per_benchmark": {b: MDE or None}, "overall": MDE
    or None, "needs": {b or "overall": what would detect it, for each None}, "words": the line every page
    prints, "level": "method" | "adapters", "seeds", "samples", "sigma", "shared", "n": {b: problems}, ...}.
    Figures are fractions (x100 for points), each >= one problem's worth and within what the benchmark can move."""
    cells = _cells(d)
    values = {c: _printable(d, c, w) for c, w in cells.items()}
    needs = {c: _needs(d, c) for c, v in values.items() if v is None}
    m = {"per_benchmark": {b: v for b, v in values.items() if b != OVERALL}, "overall": values.get(OVERALL),
         "needs": needs, "level": stats.METHOD if d.seeds >= 2 else stats.ADAPTERS, "seeds": d.seeds,
         "samples": d.samples, "sigma": d.sigma, "shared": float(d.shared), "n": {b: len(p) for b, p in d.p.items()},
         "alpha_per_benchmark": ALPHA / max(d.family, 1), "alpha_overall": ALPHA / max(d.primary, 1)}
    m["words"] = words(m)
    return m


def seeds_needed(d: Design, effect: float, most: int = MOST_SEEDS) -> int | None:
    """The fewest seeds per arm (>= 2) whose overall MDE is at most ``effect`` (a fraction); None beyond ``most``."""
    for s in range(2, most + 1):
        r = replace(d, seeds=s)
        v = _printable(r, OVERALL, _cells(r).get(OVERALL, {})) if _cells(r) else None
        if v is not None and v <= abs(effect):
            return s
    return None


def seed_sigma(per_seed_scores: dict[str, np.ndarray], p: dict[str, np.ndarray],
               slopes: dict[str, float] | None = None) -> float | None:
    """The seed effect in logits measured from a sweep: {benchmark: one arm's per-seed benchmark scores} and the
    per-problem probabilities. Per benchmark the per-seed variance beyond the Bernoulli noise is sigma^2 g_b^2
    (g_b = mean p(1 - p), the logistic's slope); pooled over benchmarks, sigma^2 = sum(excess) / sum(g^2), clipped
    at 0 only once (clipping each benchmark, then dividing by its small g^2, biased it up 2-3x on hard ones).
    None with fewer than 2 seeds. ``from_scored`` floors it at ``SIGMA_DEFAULT``. ``slopes``: g_b where measured
    (``slope``), else from ``p``."""
    excess, total = 0.0, 0.0
    for b, scores in per_seed_scores.items():
        scores = np.asarray(scores, dtype=float)
        if len(scores) < 2 or b not in p:
            continue
        g = slopes[b] if slopes and b in slopes else _model_slope(p[b])  # a measured 0 stays 0
        excess += scores.var(ddof=1) - g / len(p[b])
        total += g ** 2
    return float(np.sqrt(max(excess, 0.0) / total)) if total > 0 else None


def overall_sigma(per_seed_diff, p: dict[str, np.ndarray], members: int = MEMBERS, samples: int = 1,
                  quantile: float = 0.5, noise: dict[str, float] | None = None) -> float | None:
    """The seed effect in logits the overall test's own variance implies: the S per-seed overall differences
    (population mean - baseline) vary by noise + 2 sigma^2 (sum_b w_b g_b)^2 with seed effects shared by the
    benchmarks (whatever the true share, this is the shared sigma that gives the overall its measured variance);
    their variance is read at its ``quantile`` bound, x (S - 1) / chi2_quantile(S - 1): at 0.5 median-unbiased
    (1.44 at 3 seeds, 1.19 at 5: a plain reading of 3 seeds falls below the truth 6 times in 10 and the MDE then
    promises power the design lacks); ``from_scored`` reads it at ``SHARE_QUANTILE``. The noise taken off:
    ``noise`` where measured (``Design.noise``), else the model's. None with fewer than 2 seeds."""
    x = np.asarray(per_seed_diff, dtype=float)
    if len(x) < 2 or not p:
        return None
    weights = {b: 1 / len(p) for b in p}
    d = Design(p, members=members, samples=samples, sigma=0.0, noise=noise)
    noise, _ = _variances(d, weights)
    g = sum(w * slope(d, b) for b, w in weights.items())
    var = float(x.var(ddof=1)) * (len(x) - 1) / sps.chi2.ppf(quantile, len(x) - 1)
    return float(np.sqrt(max(var - noise, 0.0) / 2)) / g if g > 0 else None


def share_of(slopes: dict[str, float], sigma: float, overall: float) -> float:
    """The share of a per-benchmark seed effect ``sigma`` the benchmarks have in common for the overall average
    of the benchmarks of ``slopes`` (their g_b, ``slope``) to have the seed variance of a fully shared ``overall``
    (``overall_sigma``): rho with sigma^2 (rho slope^2 + (1 - rho) spread) = overall^2 slope^2 (``_variances``),
    clipped to [0, 1] (one benchmark, or benchmarks of equal slope only: no telling, 1).

    >>> g = {"gsm8k": 0.25, "aime24": 0.09}
    >>> share_of(g, 0.2, 0.2), share_of(g, 0.2, 0.0)  # fully shared; only the per-benchmark part is left
    (1.0, 0.0)
    >>> round(share_of(g, 0.2, 0.18), 3)  # in between
    0.512
    """
    w = 1 / len(slopes)
    g = list(slopes.values())
    slope2, spread = (w * sum(g)) ** 2, sum((w * gb) ** 2 for gb in g)
    if sigma <= 0 or slope2 - spread <= 1e-15:
        return 1.0
    return float(np.clip((overall ** 2 * slope2 - sigma ** 2 * spread) / (sigma ** 2 * (slope2 - spread)), 0.0, 1.0))


def from_scored(scores: dict[str, float], n: dict[str, int], seeds: int, samples: int = 1, members: int = MEMBERS,
                family: int = 20, primary: int = 1, per_seed: dict[str, list[float]] | None = None,
                per_seed_diff: list[float] | None = None, noise: dict[str, float] | None = None) -> tuple[Design, dict]:
    """(the design of an evaluation actually scored, how its seed effect was set): ``scores`` the benchmarks'
    mean scores (both arms), ``n`` the problems scored per benchmark, ``per_seed`` one arm's per-seed scores
    (the baseline's), ``per_seed_diff`` the per-seed overall differences of the two arms, ``noise`` per benchmark
    the per-problem noise variance of one seed's difference as measured (``measured_noise``).

    The rule for the seed effect (>= 2 seeds): the largest of the assumed ``SIGMA_DEFAULT``, the per-benchmark
    reading (``seed_sigma``) and the overall test's own (``overall_sigma`` at ``SHARE_QUANTILE``). The default is
    a floor at every number of seeds (3 seeds read sigma anywhere between 0 and 3x the truth), the overall
    reading catches seed effects the benchmarks share, and none is trusted alone. The share the benchmarks have
    in common (``share_of``) is the one that gives the overall average the variance its own test reads; without
    per-seed overall differences, shared (``SHARED_DEFAULT``, the worst case for the overall).

    Why a measured share and its 60% bound: with the share assumed 1 the overall MDE delivered 0.94-1.00 power
    where seed effects are per benchmark (3 and 5 seeds, ten benchmarks of 30 or 200 problems: the printed
    8.6 pts against 3.6 at the truth, 200 problems, 3 seeds), since a per-benchmark effect averages out over
    ten benchmarks; read median-unbiased the share let it fall to 0.72-0.79 where they are shared (one
    reading of S - 1 degrees of freedom, and no other to take the larger of); at the upper 60% bound every
    world of ``power_check`` (3 or 10 benchmarks, 5-200 problems, 3 and 5 seeds, shared, half or per
    benchmark, sigma 0.05-0.5, normal or t3) gets 0.81-0.97, per benchmark 0.86-0.94 (75%: up to 0.98).

    One seed (issue 68): the seed effect is ``SIGMA_ONE_SEED``, shared (one seed reads neither), and the noise is
    measured as at >= 2 seeds, here the variance of the per-problem differences (``measured_noise``). Priced from
    the Beta(K = 1) at 0.1 logit, the printed MDE (3.2 pts, the full suite) delivered 0.63 +- 0.02 power where the
    problems' law is bell-shaped (K = 4: the model's p (1 - p) 0.6x the world's, in the noise and the slope) and
    seeds of 0.15 logit are shared (``populora bench stats``'s one-seed power cell).

    Why the noise measured: the model's p (1 - p) at a Beta(K = 1) of the benchmark's score over-states the noise
    where problems are mostly always or never solved (a U-shaped Beta K = 0.3, 30% of problems unsolvable), and
    the MDE printed there delivered 0.955-0.985 power (``populora bench stats``); the seeds x problems residual
    of the per-problem differences measures it on (S - 1)(P - 1) degrees of freedom, and with it the slope g_b
    through which a logit of seed effect moves the benchmark (``slope``), so that the floor of 0.1 logit is
    not priced at the model's slope either."""
    p = beta_p(scores, {b: k for b, k in n.items() if k})
    noise = {b: v for b, v in (noise or {}).items() if b in p}
    scored = Design(p, members=members, samples=samples, noise=noise)
    g = {b: slope(scored, b) for b in p}
    overall = (overall_sigma(per_seed_diff, p, members, samples, SHARE_QUANTILE, noise)
               if per_seed_diff is not None and seeds > 1 else None)
    readings = [r for r in (seed_sigma(per_seed, p, g) if per_seed and seeds > 1 else None, overall) if r is not None]
    measured = max(readings) if readings else None
    used = assumed_sigma(seeds) if measured is None else max(measured, SIGMA_DEFAULT)
    shared = SHARED_DEFAULT if overall is None or not g else share_of(g, used, overall)
    source = (ONE_SEED_SOURCE if measured is None and seeds == 1 else "assumed" if measured is None
              else f"measured from the {seeds} seeds"
              + ("" if used == measured else f" as {measured:.2g}, floored at {SIGMA_DEFAULT:g}"))
    return Design(p, seeds=seeds, samples=samples, members=members, sigma=used, shared=shared, family=max(family, 1),
                  primary=max(primary, 1), scores=dict(scores), noise=noise or None), {"measured": measured,
                                                                                        "source": source}


def measured_noise(diffs: dict[str, np.ndarray]) -> dict[str, float]:
    """Per benchmark, one seed's per-problem noise variance of a difference of two arms, from its (S, P) table of
    per-problem differences: S >= 2 seeds (P >= 2 problems), the residual mean square of the seeds x problems
    ANOVA (``stats``' crossed model: the problem's own difficulty and the seed's shift taken out); one seed, more
    than ``stats.SIGN_FLIP_MAX`` problems, the variance of the P differences (the spread the one-seed test's own
    standard error reads; the difference's own spread over problems, if any, is in it: the conservative side).
    On fewer the one-seed test is the exact sign flip, its power simulated from the model's p, and a variance of
    a handful of differences would steer the "needs >= k problems" search: the model's noise there.

    >>> shifted = np.array([[0.0, 0.5, 1.0], [0.2, 0.7, 1.2]])  # seed 2 one shift above seed 1: no noise
    >>> flip = np.array([[0.0, 1.0], [1.0, 0.0]])  # residuals +-0.5 on (2 - 1)(2 - 1) = 1 degree of freedom
    >>> halves = np.tile([0.0, 1.0], 10)[None, :]  # one seed, 20 differences: half 0, half 1
    >>> {b: round(v, 12) for b, v in measured_noise({"a": shifted, "b": flip, "one seed, 20": halves,
    ...                                              "one seed, 2": flip[:1], "one problem": flip[:, :1]}).items()}
    {'a': 0.0, 'b': 1.0, 'one seed, 20': 0.263157894737}
    """
    out = {}
    for b, x in diffs.items():
        x = np.asarray(x, dtype=float)
        if x.ndim != 2 or x.shape[1] < 2:
            continue
        if x.shape[0] >= 2:
            out[b] = stats.residual_mean_square(x)
        elif x.shape[1] > stats.SIGN_FLIP_MAX:
            out[b] = float(np.var(x[0], ddof=1))
    return out


ONE_SEED_SOURCE = "assumed: one seed per arm reads neither its size nor its share, so the conservative case"


def assumed_sigma(seeds: int) -> float:
    """The seed effect a design is priced with before any is measured: ``SIGMA_ONE_SEED`` at one seed (nothing
    will measure it), else ``SIGMA_DEFAULT`` (the floor of what the seeds will measure)."""
    return SIGMA_ONE_SEED if seeds <= 1 else SIGMA_DEFAULT


def _label(b: str) -> str:
    return BENCHMARKS[b].label.split(" ")[0] if b in BENCHMARKS else b


def _figure(m: dict, cell: str) -> str:
    v = m["overall"] if cell == OVERALL else m["per_benchmark"][cell]
    return f"{100 * v:.1f}" if v is not None else "none"


def detail(m: dict) -> str:
    """The MDE's figures in points: overall, then per benchmark at the Holm family's level; a comparison the
    design cannot detect says so, and what would.

    >>> detail({"overall": 0.021, "samples": 1, "per_benchmark": {"aime24": 0.2, "gsm8k": 0.03}, "needs": {}})
    '>= 2.1 pts overall at 80% power (per benchmark, Holm: AIME24 20.0, GSM8K 3.0; greedy)'
    >>> detail({"overall": None, "samples": 1, "per_benchmark": {"gsm8k": None},
    ...         "needs": {"overall": "needs >= 6 problems", "gsm8k": "needs >= 6 problems"}})
    'nothing overall at 80% power (needs >= 6 problems) (per benchmark, Holm: GSM8K none (needs >= 6 problems); greedy)'
    """
    needs = m.get("needs", {})
    cells = [f"{_label(b)} {_figure(m, b)}" for b in m["per_benchmark"] if b not in needs]
    lacking: dict[str, list[str]] = {}
    for b in m["per_benchmark"]:
        if b in needs:
            lacking.setdefault(needs[b], []).append(_label(b))
    per = ", ".join(cells + [f"{', '.join(names)} none ({why})" for why, names in lacking.items()])
    sampling = "greedy" if m["samples"] == 1 else f"{m['samples']} samples per problem"
    head = (f">= {100 * m['overall']:.1f} pts overall at 80% power" if m["overall"] is not None
            else f"nothing overall at 80% power ({needs.get(OVERALL, 'no benchmark scored')})")
    return f"{head} (per benchmark, Holm: {per}; {sampling})"


def words(m: dict) -> str:
    """The MDE in one line: what the design detects, and what it would be a claim about.

    >>> words({"overall": 0.021, "level": "method", "seeds": 3, "samples": 1, "sigma": 0.1, "shared": 1.0,
    ...        "per_benchmark": {"gsm8k": 0.03}, "needs": {}})
    '3 seeds per arm detect >= 2.1 pts overall at 80% power (per benchmark, Holm: GSM8K 3.0; greedy); seed effect 0.1 logit shared by the benchmarks, assumed'
    """
    if m["level"] == stats.ADAPTERS:
        return (f"1 seed per arm detects, in these adapters on these problems, {detail(m)}; {seed_words(m)}; a "
                "claim about the method needs >= 2 seeds per arm")
    return f"{m['seeds']} seeds per arm detect {detail(m)}; {seed_words(m)}"


def share_words(shared: float) -> str:
    """How much of the seed effect the benchmarks share, in words.

    >>> share_words(1.0), share_words(0.0), share_words(0.431)
    ('shared by the benchmarks', 'per benchmark', '43% shared by the benchmarks')
    """
    return ("shared by the benchmarks" if shared >= 0.995 else "per benchmark" if shared <= 0.005
            else f"{shared:.0%} shared by the benchmarks")


def seed_words(m: dict) -> str:
    """The seed effect an MDE of >= 2 seeds was priced with, and where it came from (the MDE line's and the
    report's): assumed, shared; or measured, with the share the overall's own variance reads.

    >>> seed_words({"sigma": 0.1, "shared": 1.0})
    'seed effect 0.1 logit shared by the benchmarks, assumed'
    >>> print(seed_words({"sigma": 0.61, "shared": 0.0, "sigma_source": "measured from the 3 seeds"}))
    seed effect 0.61 logit, measured from the 3 seeds; its share common to the benchmarks, as the overall's own variance reads it: 0%
    >>> print(seed_words({"sigma": 0.2, "shared": 1.0, "sigma_source": ONE_SEED_SOURCE}))
    seed effect 0.2 logit shared by the benchmarks, assumed: one seed per arm reads neither its size nor its share, so the conservative case
    """
    source = m.get("sigma_source", "assumed")
    if source == ONE_SEED_SOURCE:
        return f"seed effect {m['sigma']:.2g} logit {share_words(m['shared'])}, {source}"
    if source == "assumed":
        return f"seed effect {m['sigma']:.2g} logit {share_words(m['shared'])}, assumed"
    return (f"seed effect {m['sigma']:.2g} logit, {source}; its share common to the benchmarks, as the overall's own "
            f"variance reads it: {m['shared']:.0%}")


def sizes(root=None) -> dict[str, int]:
    """Each benchmark's problem count from its file in the data dir (``SIZES`` for a file that is missing)."""
    root = root or benchmarks.data_dir()
    return {b: estimate.items(root, b, None) or SIZES[b] for b in benchmarks.BENCHMARKS}


def planned(seeds: int, samples: int = 1, spec: str = "all", limit: int | None = None, scores=None,
            sigma: float | None = None, family: int | None = None) -> dict:
    """The MDE of a design before launch (``mde``): the benchmarks ``spec`` names at their sizes (first ``limit``
    items), the base scores ``scores`` (default ``BASE_SCORE``), ``seeds`` per arm; the Holm family the report
    will use (``families.family_size`` of the benchmarks: every comparison but the primary); the seed effect
    ``sigma``, default the one the report will price with before any is measured (``assumed_sigma``)."""
    n = {b: min(k, limit) if limit else k for b, k in sizes().items() if b in benchmarks.select(spec)}
    fam = family if family is not None else families.family_size(list(n))
    scores = {b: (scores or BASE_SCORE)[b] for b in n}
    m = mde(Design(beta_p(scores, n, CONCENTRATION), seeds=seeds, samples=samples,
                   sigma=assumed_sigma(seeds) if sigma is None else sigma, family=fam, scores=scores))
    if seeds <= 1 and sigma is None:
        m["sigma_source"] = ONE_SEED_SOURCE
        m["words"] = words(m)
    return m
def sampling_gain(samples: int, spec: str = "all", limit: int | None = None, scores=None) -> dict:
    """What ``samples`` per problem buy over one, before launch: the standard error of one adapter's pass@1 per
    benchmark and overall (the mean of the benchmarks), in fractions, with 1 sample and with ``samples``, from the
    design's per-problem probabilities (``beta_p`` of ``scores``, default ``BASE_SCORE``): a problem's mean of N
    draws varies by var_between + var_within / N (Miller 2024), var_between = var(p_i), var_within = mean p_i (1 - p_i).

    >>> g = sampling_gain(8, "gsm8k")
    >>> round(100 * g["overall"][0], 2), round(100 * g["overall"][1], 2), g["words"]
    (0.98, 0.74, 'SE overall 0.98 -> 0.74 pts with 8 samples per problem (GSM8K 0.98 -> 0.74)')
    """
    n = {b: min(k, limit) if limit else k for b, k in sizes().items() if b in benchmarks.select(spec)}
    p = beta_p(scores or BASE_SCORE, n, CONCENTRATION)
    per = {}
    for b, q in p.items():
        between, within = float(np.var(q)), float(np.mean(q * (1 - q)))
        per[b] = tuple(float(np.sqrt((between + within / k) / len(q))) for k in (1, samples))
    w = 1 / max(len(per), 1)
    overall = tuple(float(np.sqrt(sum((w * v[i]) ** 2 for v in per.values()))) for i in (0, 1))
    cells = ", ".join(f"{BENCHMARKS[b].label.split(' ')[0]} {100 * a:.2f} -> {100 * c:.2f}" for b, (a, c) in per.items())
    return {"per_benchmark": per, "overall": overall, "samples": samples,
            "words": f"SE overall {100 * overall[0]:.2f} -> {100 * overall[1]:.2f} pts with {samples} samples per "
                     f"problem ({cells})"}


def beta_p(scores: dict[str, float], sizes: dict[str, int], concentration: float = CONCENTRATION) -> dict[str, np.ndarray]:
    """Per-problem probabilities for a ``Design`` when only benchmark scores are known (a greedy run's 0/1
    verdicts say nothing of a problem's probability): ``sizes[b]`` evenly spaced quantiles of
    Beta(m K, (1 - m) K), m the benchmark's score (clipped to [0.02, 0.98]), K = ``concentration`` (the
    calibration's: most problems nearly always or nearly never solved).

    >>> p = beta_p({"gsm8k": 0.5}, {"gsm8k": 4})["gsm8k"]
    >>> len(p), round(float(p.mean()), 2)
    (4, 0.5)
    """
    out = {}
    for b, n in sizes.items():
        m = min(max(float(scores.get(b, 0.5)), 0.02), 0.98)
        out[b] = sps.beta.ppf((np.arange(n) + 0.5) / n, m * concentration, (1 - m) * concentration)
    return out
