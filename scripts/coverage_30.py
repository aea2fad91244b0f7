"""Coverage of an arm's score and of a difference on one 30-problem benchmark (AIME-sized), at 1, 3 and 5 seeds.

A 4-member population mean against a 0/1 baseline; problem difficulties Beta(m K, (1 - m) K) with K = 1; a seed
effect of 0.1 logit (the population's members share their run's); ``stats.estimate`` / ``compare`` (one seed)
and ``seed_estimate`` / ``seed_compare`` (several) directly. The truth: one seed, these adapters' expected score
on the benchmark's problem distribution at their seed effect; several, the method's (over seeds too); the
difference under the null is that of the two arms' truths. Prints coverage and its Monte Carlo error.

    python scripts/coverage_30.py [R] [problems]
"""

import sys

import numpy as np
from scipy import stats as sps

from populora.evaluation.statistics import stats

SIGMA, K, MEMBERS = 0.1, 1.0, 4
U = np.random.default_rng(12345).normal(0, SIGMA, 4000)  # the seed law's nodes for expectations over seeds
Q = (np.arange(2000) + 0.5) / 2000


def expected(m: float, u: np.ndarray) -> float:
    """E over problems p ~ Beta(m K, (1-m) K) of sigmoid(logit p + u), averaged over ``u``."""
    lp = sps.beta.ppf(Q, m * K, (1 - m) * K)
    lg = np.log(np.clip(lp, 1e-12, 1 - 1e-12) / np.clip(1 - lp, 1e-12, 1))
    return float(np.mean([np.mean(1 / (1 + np.exp(-(lg + x)))) for x in np.atleast_1d(u)]))


def main(R: int = 400, P: int = 30) -> None:
    rng = np.random.default_rng(0)
    print(f"{P} problems, R = {R}, MC error ~ {np.sqrt(0.05 * 0.95 / R):.3f}")
    for m in (0.07, 0.10, 0.35):
        method = expected(m, U[:400])
        for S in (1, 3, 5):
            sc = df = 0
            for _ in range(R):
                p = rng.beta(m * K, (1 - m) * K, P)
                lg = np.log(np.clip(p, 1e-12, 1 - 1e-12) / np.clip(1 - p, 1e-12, 1))
                up, ub = rng.normal(0, SIGMA, S), rng.normal(0, SIGMA, S)
                pop = np.stack([(rng.random((MEMBERS, P)) < 1 / (1 + np.exp(-(lg + up[s])))).mean(axis=0)
                                for s in range(S)])
                base = np.stack([(rng.random(P) < 1 / (1 + np.exp(-(lg + ub[s])))).astype(float) for s in range(S)])
                if S == 1:
                    t_pop, t_base = expected(m, up[0]), expected(m, ub[0])
                    e, c = stats.estimate([pop]), stats.compare("d", [pop], [base])
                else:
                    t_pop = t_base = method
                    e, c = stats.seed_estimate([pop]), stats.seed_compare("d", [pop], [base])
                sc += e.ci95[0] - 1e-12 <= t_pop <= e.ci95[1] + 1e-12
                df += c.ci95[0] - 1e-12 <= t_pop - t_base <= c.ci95[1] + 1e-12
            print(f"accuracy {m:.2f}, {S} seed(s): score {sc / R:.3f}, difference {df / R:.3f}", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
