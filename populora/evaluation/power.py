"""The smallest effect a design can see, before it is launched: the minimum detectable effect (MDE) at 80% power.

A design is: the benchmarks (their sizes, and the per-problem success probabilities of the base model or of a
previous run: ``p``), the seeds per arm, the samples per problem and the members of the population. The model
is the calibration's (``calibration.py``), so the MDE it promises is checked there by a planted effect:

- per problem, a member or the baseline solves it with probability p_i (greedy: one Bernoulli draw per adapter;
  ``samples`` draws at a temperature: their mean, the problem stays the unit), so the per-problem noise of
  "population mean (M members) - baseline" is p_i (1 - p_i) (1/M + 1) / samples;
- a training seed moves an adapter by ``sigma`` logits (all members of a run share it), i.e. its benchmark
  score by about sigma x mean_i p_i (1 - p_i) (the logistic's slope), in both arms;
- ``shared``: one seed effect for all benchmarks of a run (they co-move: the overall average gains nothing
  from averaging over benchmarks), else one per benchmark.

With S >= 2 seeds per arm the test is ``stats.seed_compare``'s t with, conservatively, S - 1 degrees of
freedom; the MDE is the difference that test rejects with probability 0.8 (noncentral t). With one seed there
is no method-level test: the MDE printed is that of "these adapters on these problems" (normal, no seed term).
Per benchmark the level is the Holm family's first step (alpha / tests), overall the pre-specified primary's 0.05.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

from populora.evaluation import benchmarks, estimate
from populora.evaluation.benchmarks import BENCHMARKS

ALPHA, POWER = 0.05, 0.80
SIGMA_DEFAULT = 0.1   # logits: the seed effect assumed until a sweep measures it (the calibration's middle regime:
                      # ~1.2 points on a benchmark at 50%); ``seed_sigma`` estimates it from a sweep
MEMBERS = 4           # members averaged in "population mean" (the paper's 4 teachers + 4 students: 4 per role)
SIZES = {"humaneval_plus": 164, "mbpp_plus": 378, "livecodebench": 279, "aime24": 30, "aime25": 30, "amc23": 40,
         "math500": 500, "minerva_math": 272, "gsm8k": 1319, "olympiadbench": 675}  # the data files' counts (2026)
# Before a run exists, the base model's score per benchmark is assumed (typical of a 7B instruct model; a run's
# own scores replace them in every report): with CONCENTRATION, the Beta of the per-problem probabilities.
BASE_SCORE = {"humaneval_plus": 0.70, "mbpp_plus": 0.60, "livecodebench": 0.20, "aime24": 0.10, "aime25": 0.07,
              "amc23": 0.35, "math500": 0.60, "minerva_math": 0.25, "gsm8k": 0.85, "olympiadbench": 0.28}
CONCENTRATION = 1.0   # Beta(m K, (1 - m) K), K = 1: U-shaped, most problems nearly always or nearly never solved


@dataclass
class Design:
    """What an MDE is computed for."""
    p: dict[str, np.ndarray]     # {benchmark: per-problem success probabilities} (their count: the benchmark's size)
    seeds: int = 1               # training seeds per arm
    samples: int = 1             # samples per problem (1: greedy)
    members: int = MEMBERS       # members averaged in the population arm
    sigma: float = SIGMA_DEFAULT  # seed effect, logits
    shared: bool = False         # one seed effect for all benchmarks of a run
    family: int = 20             # tests in the Holm family (10 benchmarks x 2 differences)


def _variances(d: Design) -> dict[str, tuple[float, float]]:
    """{benchmark: (noise variance, seed variance) of one seed's difference of benchmark means}."""
    out = {}
    for b, p in d.p.items():
        p = np.asarray(p, dtype=float)
        pq = p * (1 - p)
        noise = float(pq.sum() * (1 / d.members + 1) / d.samples / len(p) ** 2)
        out[b] = (noise, float(2 * (d.sigma * pq.mean()) ** 2))
    return out


def _se(d: Design, weights: dict[str, float], seeds: int, with_seed: bool) -> float:
    v = _variances(d)
    noise = sum(weights[b] ** 2 * v[b][0] for b in weights)
    if not with_seed:
        seed = 0.0
    elif d.shared:
        seed = sum(weights[b] * np.sqrt(v[b][1]) for b in weights) ** 2
    else:
        seed = sum(weights[b] ** 2 * v[b][1] for b in weights)
    return float(np.sqrt((noise + seed) / seeds))


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
        reject = sps.nct.sf(crit, df, ncp) + sps.nct.cdf(-crit, df, ncp)
        return (1.0 if np.isnan(reject) else reject) - power  # scipy's nct is NaN far in its tail: power 1 there

    high = crit + 1.0
    while shortfall(high) < 0:
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high) * se)


def mde(d: Design) -> dict:
    """{"per_benchmark": {b: MDE}, "overall": MDE, "level": "method" | "adapters", "seeds": S, ...}: scores as
    fractions (x100 for points). One seed: the adapters' MDE (no seed term, no method-level claim possible)."""
    method = d.seeds >= 2
    df = d.seeds - 1 if method else None
    names = list(d.p)
    per = {b: detectable(_se(d, {b: 1.0}, d.seeds, method), df, ALPHA / max(d.family, 1)) for b in names}
    overall = detectable(_se(d, {b: 1 / len(names) for b in names}, d.seeds, method), df) if names else None
    return {"per_benchmark": per, "overall": overall, "level": "method" if method else "adapters", "seeds": d.seeds,
            "samples": d.samples, "sigma": d.sigma, "shared": d.shared, "alpha_per_benchmark": ALPHA / max(d.family, 1)}


def seeds_needed(d: Design, effect: float, most: int = 50) -> int | None:
    """The fewest seeds per arm (>= 2) whose overall MDE is at most ``effect`` (a fraction); None beyond ``most``."""
    for s in range(2, most + 1):
        if mde(Design(d.p, s, d.samples, d.members, d.sigma, d.shared, d.family))["overall"] <= abs(effect):
            return s
    return None


def seed_sigma(per_seed_scores: dict[str, np.ndarray], p: dict[str, np.ndarray]) -> float | None:
    """The seed effect in logits measured from a sweep: {benchmark: one arm's per-seed benchmark scores} and the
    per-problem probabilities. Per benchmark the per-seed variance beyond the Bernoulli noise is sigma^2 g_b^2
    (g_b = mean p(1 - p), the logistic's slope); pooled over benchmarks, sigma^2 = sum(excess) / sum(g^2), clipped
    at 0 only once (clipping each benchmark, then dividing by its small g^2, biased it up 2-3x on hard ones).
    None with fewer than 2 seeds."""
    excess, slope = 0.0, 0.0
    for b, scores in per_seed_scores.items():
        scores = np.asarray(scores, dtype=float)
        if len(scores) < 2 or b not in p:
            continue
        pq = np.asarray(p[b]) * (1 - np.asarray(p[b]))
        excess += scores.var(ddof=1) - pq.sum() / len(pq) ** 2
        slope += pq.mean() ** 2
    return float(np.sqrt(max(excess, 0.0) / slope)) if slope > 0 else None


def detail(m: dict) -> str:
    """The MDE's figures in points: overall, then per benchmark at the Holm family's level.

    >>> detail({"overall": 0.021, "samples": 1, "per_benchmark": {"aime24": 0.2, "gsm8k": 0.03}})
    '>= 2.1 pts overall at 80% power (per benchmark, Holm: AIME24 20.0, GSM8K 3.0; greedy)'
    """
    per = ", ".join(f"{BENCHMARKS[b].label.split(' ')[0] if b in BENCHMARKS else b} {100 * v:.1f}"
                    for b, v in m["per_benchmark"].items())
    sampling = "greedy" if m["samples"] == 1 else f"{m['samples']} samples per problem"
    return f">= {100 * m['overall']:.1f} pts overall at 80% power (per benchmark, Holm: {per}; {sampling})"


def words(m: dict) -> str:
    """The MDE in one line: what the design detects, and what it would be a claim about.

    >>> words({"overall": 0.021, "level": "method", "seeds": 3, "samples": 1, "sigma": 0.1, "shared": False,
    ...        "per_benchmark": {"gsm8k": 0.03}})
    '3 seeds per arm detect >= 2.1 pts overall at 80% power (per benchmark, Holm: GSM8K 3.0; greedy); seed effect 0.1 logit per benchmark, assumed'
    """
    if m["level"] == "adapters":
        return f"1 seed per arm detects a difference of these adapters of {detail(m)}; a claim about the method needs >= 2 seeds per arm"
    return (f"{m['seeds']} seeds per arm detect {detail(m)}; seed effect {m['sigma']:.2g} logit "
            f"{'shared by the benchmarks' if m['shared'] else 'per benchmark'}, {m.get('sigma_source', 'assumed')}")


def sizes(root=None) -> dict[str, int]:
    """Each benchmark's problem count from its file in the data dir (``SIZES`` for a file that is missing)."""
    root = root or benchmarks.data_dir()
    return {b: estimate.items(root, b, None) or SIZES[b] for b in benchmarks.BENCHMARKS}


def planned(seeds: int, samples: int = 1, spec: str = "all", limit: int | None = None, scores=None,
            sigma: float = SIGMA_DEFAULT) -> dict:
    """The MDE of a design before launch: the benchmarks ``spec`` names at their sizes (first ``limit`` items),
    the base scores ``scores`` (default ``BASE_SCORE``), ``seeds`` per arm; with ``words`` added."""
    n = {b: min(k, limit) if limit else k for b, k in sizes().items() if b in benchmarks.select(spec)}
    m = mde(Design(beta_p(scores or BASE_SCORE, n, CONCENTRATION), seeds=seeds, samples=samples, sigma=sigma))
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
