"""Known-truth check of the printed MDE (``power.mde``): in simulated worlds whose true difference of the method
is the MDE printed for their design, the report's own test (``stats.compare`` at one seed, the exact sign flip at
16 problems or fewer; ``stats.seed_compare`` at >= 2 seeds) must reject, in the right direction, at its level, at
least 80% of the time (within Monte Carlo error), with the seed effects shared by the benchmarks or not.

The world: the design's problems (``power.beta_p`` at each benchmark's assumed base score, the n scored), a seed
effect u ~ sigma x (sqrt(share) z_common + sqrt(1 - share) z_benchmark) logits per run (``heavy``: z from a t with
3 degrees of freedom scaled to unit variance, a model ``power`` does not assume), four members per population
run sharing its u, the planted effect in logits on every member chosen so that its true difference (over the
problems and the seed effects) equals the MDE. ``python -m populora.evaluation.statistics.power_check`` prints the table
(``--replicates``); ``tests/evaluation/test_power.py`` runs a small fixed-seed version.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from populora.evaluation.statistics import families, power, stats

CHECK_BENCHMARKS = ("humaneval_plus", "aime24", "gsm8k")  # a code, a hard and an easy math benchmark


@dataclass(frozen=True)
class World:
    n: int                  # problems scored per benchmark
    seeds: int              # per arm
    shared: float           # share of the seed variance common to the benchmarks
    sigma: float = 0.2      # logits
    heavy: bool = False     # t(3) seed effects instead of normal
    benchmarks: tuple = CHECK_BENCHMARKS

    @property
    def name(self) -> str:
        return (f"n={self.n} x {len(self.benchmarks)} seeds={self.seeds} sigma={self.sigma:g} "
                f"{power.share_words(self.shared)}" + (" t3" if self.heavy else ""))


def design(w: World, shared: float | None = None) -> power.Design:
    """The world's design; ``shared`` None: the share the printed MDE assumes (``power.SHARED_DEFAULT``)."""
    p = power.beta_p({b: power.BASE_SCORE[b] for b in w.benchmarks}, {b: w.n for b in w.benchmarks})
    return power.Design(p, seeds=w.seeds, sigma=w.sigma, shared=power.SHARED_DEFAULT if shared is None else shared,
                        family=families.family_size(list(w.benchmarks)))


def _z(rng, shape, heavy: bool) -> np.ndarray:
    return rng.standard_t(3, shape) / np.sqrt(3.0) if heavy else rng.normal(0, 1, shape)


def _run_effects(rng, w: World) -> np.ndarray:
    """(seeds, benchmarks) logits of one arm's runs."""
    common, own = _z(rng, (w.seeds, 1), w.heavy), _z(rng, (w.seeds, len(w.benchmarks)), w.heavy)
    return w.sigma * (np.sqrt(w.shared) * common + np.sqrt(1 - w.shared) * own)


def _arms(rng, d: power.Design, w: World, effect: float) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(population mean, baseline): per benchmark a (seeds, problems) array of one world."""
    u_pop, u_base = _run_effects(rng, w), _run_effects(rng, w)
    pop, base = [], []
    for j, b in enumerate(w.benchmarks):
        lp = power._logit(d.p[b])
        x = rng.random((w.seeds, d.members, len(lp))) < power._sigmoid(lp[None, None, :] + u_pop[:, j, None, None] + effect)
        pop.append(x.mean(axis=1))
        base.append((rng.random((w.seeds, len(lp))) < power._sigmoid(lp[None, :] + u_base[:, j, None])).astype(float))
    return pop, base


def check(w: World, replicates: int = 400, seed: int = 0, n_resamples: int = stats.N_RESAMPLES,
          at_truth: bool = False) -> dict:
    """The overall comparison's power at its printed MDE in ``replicates`` worlds: {world, mde, rate, mc_error, ...};
    ``at_truth``: at the MDE of the world's true share instead (the formula's own calibration: 0.80, not more).
    An MDE the design cannot print (None) has nothing to check (rate None)."""
    d = design(w, w.shared if at_truth else None)
    weights = {b: 1 / len(w.benchmarks) for b in w.benchmarks}
    target = power._printable(d, power.OVERALL, weights)  # power.mde(d)["overall"], without the other comparisons
    out = {"world": w.name, "n": w.n, "seeds": w.seeds, "shared": w.shared, "heavy": w.heavy, "sigma": w.sigma,
           "mde": target, "needs": power._needs(d, power.OVERALL) if target is None else None, "replicates": replicates}
    if target is None:
        return {**out, "rate": None, "mc_error": None}
    effect = optimize.brentq(lambda e: power.true_difference(d, weights, e) - target, 0.0, 20.0)
    rng = np.random.default_rng(seed)
    level = power.ALPHA / d.primary
    hits = 0
    flips = w.seeds == 1 and w.n * len(w.benchmarks) <= stats.SIGN_FLIP_MAX
    for _ in range(replicates):
        pop, base = _arms(rng, d, w, effect)
        if flips:  # stats.compare's exact sign flip, its p without the interval's bisection (equal: test_power.py)
            diffs = np.concatenate([(x - y)[0] / len(w.benchmarks) / x.shape[1] for x, y in zip(pop, base)])
            p, delta = float(power.flip_p(diffs[:, None])[0]), float(diffs.sum())
        else:
            c = (stats.seed_compare("overall", pop, base) if w.seeds > 1
                 else stats.compare("overall", pop, base, seed=int(rng.integers(2 ** 31)), n_resamples=n_resamples))
            p, delta = c.p_value, c.delta
        hits += p < level and delta > 0
    rate = hits / replicates
    return {**out, "effect_logits": effect, "rate": rate,
            "mc_error": float(np.sqrt(max(rate * (1 - rate), power.POWER * (1 - power.POWER)) / replicates)),
            "promised": power.POWER}


def check_measured(w: World, replicates: int = 300, pilot: int = 100, seed: int = 0) -> dict:
    """The MDE as a report prints it from its own data (``power.from_scored``: the seed effect measured from the
    baseline's seeds and the per-seed overall differences, floored at ``SIGMA_DEFAULT``, its share common to the
    benchmarks and the per-problem noise measured too), at >= 2 seeds: its readings of sigma and of the MDE over ``pilot`` null worlds,
    then the power at their median MDE over ``replicates`` worlds."""
    d = design(w)
    names, rng = list(w.benchmarks), np.random.default_rng(seed)
    weights = {b: 1 / len(names) for b in names}
    readings, mdes = [], []
    for _ in range(pilot):
        pop, base = _arms(rng, d, w, 0.0)
        scores = {b: float((pop[j].mean() + base[j].mean()) / 2) for j, b in enumerate(names)}
        diff = np.mean([pop[j].mean(axis=1) - base[j].mean(axis=1) for j in range(len(names))], axis=0)
        printed, how = power.from_scored(scores, {b: w.n for b in names}, w.seeds, family=d.family,
                                         per_seed={b: base[j].mean(axis=1) for j, b in enumerate(names)},
                                         per_seed_diff=diff,
                                         noise=power.measured_noise({b: pop[j] - base[j] for j, b in enumerate(names)}))
        readings.append(how["measured"])
        mdes.append(power._printable(printed, power.OVERALL, weights))
    target = float(np.median([np.inf if m is None else m for m in mdes]))
    effect = optimize.brentq(lambda e: power.true_difference(d, weights, e) - target, 0.0, 20.0)
    hits = 0
    for _ in range(replicates):
        pop, base = _arms(rng, d, w, effect)
        c = stats.seed_compare("overall", pop, base)
        hits += c.p_value < power.ALPHA and c.delta > 0
    rate = hits / replicates
    return {"world": w.name, "sigma_read": [float(q) for q in np.quantile(readings, [0.1, 0.5, 0.9])],
            "mde_median": target, "mde_at_truth": power._printable(design(w, w.shared), power.OVERALL, weights),
            "rate": rate, "mc_error": float(np.sqrt(max(rate * (1 - rate), 0.16) / replicates))}


WORLDS = [World(n, s, sh) for n in (5, 12, 40) for s in (1, 3, 5) for sh in (0.0, 1.0)] \
    + [World(3, 1, 1.0, benchmarks=tuple(power.BASE_SCORE)), World(30, 3, 1.0, benchmarks=tuple(power.BASE_SCORE))] \
    + [World(40, s, 1.0, heavy=True) for s in (1, 3, 5)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=400)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [{"printed": check(w, args.replicates), "at_truth": check(w, args.replicates, at_truth=True)} for w in WORLDS]
    if args.json:
        print(json.dumps(rows))
        return 0
    for r in rows:
        cells = []
        for key in ("printed", "at_truth"):
            x = r[key]
            mde = f"none ({x['needs']})" if x["mde"] is None else f"{100 * x['mde']:.1f} pts"
            rate = "" if x["rate"] is None else f" power {x['rate']:.3f} +- {x['mc_error']:.3f}"
            cells.append(f"{key}: MDE {mde}{rate}")
        print(f"{r['printed']['world']:42} " + "; ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
