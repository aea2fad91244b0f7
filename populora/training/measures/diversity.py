"""Diversity of what teachers wrote, compared at equal volume.

Counting distinct program structures is counting species: the more programs an arm proposes, the more distinct
ones it shows, and distinct-per-program falls with volume even for a generator that never changes (a
saturation curve). So two arms are compared at the same number of programs ``m``:

- ``rarefy``: the expected number of distinct structures among ``m`` programs drawn without replacement from the
  ``n`` proposed so far (the hypergeometric formula, Hurlbert 1971 / Heck et al. 1975), with the unconditional
  standard deviation of Colwell et al. 2012 (J. Plant Ecol. 5:3-21, eq. 5-6), the one that lets two samples be
  compared: it estimates what a fresh sample of ``m`` from the same generator would show;
- ``chao1``: the bias-corrected Chao1 estimate of the generator's total number of structures, with Chao's
  (1987) log-normal 95% interval (the EstimateS formulas);
- ``accumulation``: distinct structures after each program, in proposal order (the coverage curve, whose x axis
  is the number of programs, so two arms are read at the same x).

Everything takes a sequence of hashable keys (``curriculum.structure_key`` of each program) or their counts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Estimate:
    """A value with its standard deviation and 95% interval."""

    value: float
    sd: float
    low: float
    high: float

    def to_dict(self) -> dict:
        return {"value": self.value, "sd": self.sd, "low": self.low, "high": self.high}


def counts(keys: Iterable[Hashable]) -> np.ndarray:
    """How many times each distinct key occurs (the abundance vector), largest first.

    >>> counts(["a", "b", "a", "c", "a"]).tolist()
    [3, 1, 1]
    """
    return np.array(sorted(Counter(keys).values(), reverse=True), dtype=np.int64)


def _not_seen_probability(n_i: np.ndarray, n: int, m: int) -> np.ndarray:
    """alpha_{k,m} = C(n - k, m) / C(n, m): the chance that a key seen k times is absent from m of the n drawn."""
    out = np.zeros(len(n_i), dtype=float)
    ok = n - n_i >= m
    k = n_i[ok].astype(float)
    out[ok] = np.exp(gammaln(n - k + 1) + gammaln(n - m + 1) - gammaln(n - k - m + 1) - gammaln(n + 1))
    return out


def rarefied(abundance: np.ndarray, m: int) -> float:
    """The hypergeometric expectation: sum over keys of 1 - C(n - n_i, m) / C(n, m).

    >>> round(rarefied(np.array([2, 1, 1]), 2), 4)   # pairs of {a, a, b, c}: 5 of the 6 hold two distinct keys
    1.8333
    """
    n_i = abundance[abundance > 0]
    return float(np.sum(1.0 - _not_seen_probability(n_i, int(n_i.sum()), m)))


def assemblage(abundance: np.ndarray) -> np.ndarray:
    """The generator's key probabilities as the sample suggests them (Chao et al. 2014, iNEXT): the seen keys'
    frequencies shrunk by the estimated coverage deficit, plus Chao1's unseen keys sharing what is left."""
    n_i = abundance[abundance > 0].astype(float)
    n = n_i.sum()
    f1, f2 = float(np.sum(n_i == 1)), float(np.sum(n_i == 2))
    if f1 == 0:
        return n_i / n
    coverage = 1 - f1 / n * ((n - 1) * f1 / ((n - 1) * f1 + 2 * f2)) if f2 > 0 else 1 - f1 / n * ((n - 1) * (f1 - 1) / ((n - 1) * (f1 - 1) + 2))
    lam = (1 - coverage) / np.sum(n_i / n * np.exp(-n_i))
    seen = n_i / n * (1 - lam * np.exp(-n_i))
    unseen = max(1, math.ceil(chao1(n_i).value - len(n_i)))
    p = np.concatenate([np.clip(seen, 0, None), np.full(unseen, (1 - coverage) / unseen)])
    return p / p.sum()


def rarefy(abundance: Sequence[int] | np.ndarray, m: int, boot: int = 200, seed: int = 0) -> Estimate:
    """Expected distinct keys among ``m`` drawn without replacement from a sample with these ``abundance`` counts,
    with a bootstrap sd (``boot`` samples of the same size from the ``assemblage`` the sample suggests, as
    iNEXT does) and a 95% normal interval. The sd is that of the estimate: it shrinks as the sample grows.

    >>> round(rarefy([2, 1, 1], 2).value, 4)
    1.8333
    >>> rarefy([3, 1], 4).value   # m = n: exactly what was seen
    2.0
    """
    n_i = np.asarray(abundance, dtype=np.int64)
    n_i = n_i[n_i > 0]
    n = int(n_i.sum())
    if not 0 < m <= n:
        raise ValueError(f"m must be between 1 and the sample size {n}, got {m}")
    value = rarefied(n_i, m)
    sd = 0.0
    if boot:
        rng = np.random.default_rng(seed)
        draws = rng.multinomial(n, assemblage(n_i), size=boot)
        sd = float(np.std([rarefied(d, m) for d in draws], ddof=1))
    return Estimate(value, sd, max(min(1.0, value), value - Z95 * sd), value + Z95 * sd)  # at least one key


def rarefaction_curve(abundance: Sequence[int] | np.ndarray, ms: Iterable[int]) -> list[dict]:
    """``rarefy`` at each m (those above the sample size are left out): [{m, value, sd, low, high}]."""
    n = int(np.sum(abundance))
    return [{"m": int(m), **rarefy(abundance, int(m)).to_dict()} for m in ms if 0 < m <= n]


def chao1(abundance: Sequence[int] | np.ndarray) -> Estimate:
    """Bias-corrected Chao1 richness S_obs + (n-1)/n * f1 (f1 - 1) / (2 (f2 + 1)), its variance and Chao's
    log-normal 95% interval (which never goes below the observed count).

    >>> e = chao1([5, 3, 2, 1, 1, 1])       # f1 = 3 singletons, f2 = 1 doubleton, n = 13
    >>> round(e.value, 4), e.low >= 6
    (7.3846, True)
    >>> chao1([4, 2]).value                 # no singleton: nothing unseen to estimate
    2.0
    """
    n_i = np.asarray(abundance, dtype=np.int64)
    n_i = n_i[n_i > 0]
    n, s_obs = int(n_i.sum()), len(n_i)
    if n == 0:
        return Estimate(0.0, 0.0, 0.0, 0.0)
    f1, f2 = int(np.sum(n_i == 1)), int(np.sum(n_i == 2))
    a = (n - 1) / n
    unseen = a * f1 * (f1 - 1) / (2 * (f2 + 1))
    var = (a * f1 * (f1 - 1) / (2 * (f2 + 1)) + a ** 2 * f1 * (2 * f1 - 1) ** 2 / (4 * (f2 + 1) ** 2)
           + a ** 2 * f1 ** 2 * f2 * (f1 - 1) ** 2 / (4 * (f2 + 1) ** 4))
    value = s_obs + unseen
    if unseen <= 0:
        return Estimate(float(value), math.sqrt(var), float(s_obs), float(s_obs) + Z95 * math.sqrt(var))
    k = math.exp(Z95 * math.sqrt(math.log(1 + var / unseen ** 2)))
    return Estimate(float(value), math.sqrt(var), s_obs + unseen / k, s_obs + unseen * k)


def accumulation(keys: Iterable[Hashable]) -> list[int]:
    """Distinct keys after each one, in order (the coverage curve over programs proposed).

    >>> accumulation("abacb")
    [1, 2, 2, 3, 3]
    """
    seen, out = set(), []
    for key in keys:
        seen.add(key)
        out.append(len(seen))
    return out


def per_100(distinct: int, proposed: int) -> float | None:
    """The old volume-biased measure: distinct per 100 proposed, ``curriculum/coverage_per_100`` (it falls with
    volume even for a generator that never changes: never compare arms on it). None before any proposal.

    >>> per_100(12, 40)
    30.0
    >>> per_100(0, 0) is None
    True
    """
    return 100.0 * distinct / proposed if proposed else None


def equal_volume(arms: dict[str, Sequence[Hashable]], m: int | None = None) -> dict:
    """Every arm's diversity at the same m (default: the smallest arm's size), each arm's Chao1, and for each
    pair of arms the difference of their rarefied values with its 95% interval (independent samples).

    Returns {"m", "arms": {arm: {"n", "observed", "rarefied", "chao1"}}, "differences": [{a, b, delta, low, high}]}.
    """
    sizes = {arm: len(keys) for arm, keys in arms.items() if len(keys)}
    if not sizes:
        return {"m": 0, "arms": {}, "differences": []}
    m = min(sizes.values()) if m is None else m
    out = {"m": m, "arms": {}, "differences": []}
    for arm, keys in arms.items():
        c = counts(keys)
        if len(keys) < max(m, 1):
            continue
        out["arms"][arm] = {"n": len(keys), "observed": len(c), "rarefied": rarefy(c, m).to_dict(),
                            "chao1": chao1(c).to_dict()}
    names = list(out["arms"])
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ra, rb = out["arms"][a]["rarefied"], out["arms"][b]["rarefied"]
            delta, sd = ra["value"] - rb["value"], math.hypot(ra["sd"], rb["sd"])
            out["differences"].append({"a": a, "b": b, "delta": delta, "low": delta - Z95 * sd, "high": delta + Z95 * sd})
    return out


def window_rarefied(keys: Sequence[Hashable], m: int, window: int) -> float | None:
    """Expected distinct among m of the last ``window`` keys (None until there are ``window``): the equal-volume
    diversity of what is written now, not since the start (the collapse monitor's)."""
    if len(keys) < window or window < m:
        return None
    return rarefied(counts(keys[-window:]), m)
