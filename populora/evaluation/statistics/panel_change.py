"""Before and after on one fixed task panel: the base model's answers against the trained students', as solve
rates and as league abilities, each with an interval, and the change with its interval.

Pure: the league's count matrices in (``solved[s, i]`` right answers of entrant s to panel task i, of
``tries[s, i]``), one JSON-ready dict out. ``training/learn_panel.py`` fills them (the base model and the
students after K steps answer the same panel) and ``populora bench learn --model embedded`` prints the dict.

- a **solve rate** is the mean over the panel's tasks of each task's share of right answers (the trained arm:
  averaged over its students first), with ``intervals.score``'s Wilson interval at the effective n (tasks are
  the unit: answers to one task are not independent; never zero width, 0 of n reads [0, z^2 / (n + z^2)]);
- the **difference** trained - base is paired by task: ``intervals.Difference`` (MOVER on the per-task
  difference's two parts; contains the difference, positive width on finite data, within [-1, 1]);
- the **ability** is the league's Rasch scale (``league_fit``), the base model the anchor at 0: the trained arm's
  ability is the mean of its students' abilities, which is already its difference from the base, with the
  league's interval (the bootstrap over tasks and answers, widened to the Laplace posterior's, ``league_summary``).
"""

from __future__ import annotations

import numpy as np

from populora.evaluation.statistics import intervals
from populora.evaluation.statistics import league_fit as F
from populora.evaluation.statistics.league_summary import Contrasts, _estimate


def per_task(solved, tries, rows) -> np.ndarray:
    """(I,) each task's share of right answers, averaged over ``rows`` (entrants); every row must have answered
    every task.

    >>> per_task([[1, 2], [0, 1]], [[2, 2], [2, 2]], [0, 1]).tolist()
    [0.25, 0.75]
    """
    k, n = np.asarray(solved, dtype=float)[list(rows)], np.asarray(tries, dtype=float)[list(rows)]
    if k.size == 0 or k.shape[1] == 0:
        raise ValueError("a panel solve rate needs at least one entrant and one task")
    if np.any(n <= 0):
        raise ValueError("an entrant did not answer every panel task: the solve rates would not be paired")
    return (k / n).mean(axis=0)


def solve_rate(scores: np.ndarray, confidence: float = intervals.CONFIDENCE) -> dict:
    """``value`` (mean of per-task ``scores`` in [0, 1]) and ``ci95`` (Wilson at the effective n over tasks)."""
    m, (lo, hi), n_eff = intervals.score([np.asarray(scores, dtype=float)[None, :]], np.ones(1), confidence=confidence)
    return {"value": float(m), "ci95": [float(lo), float(hi)], "effective_n": float(n_eff)}


def difference(after: np.ndarray, before: np.ndarray, confidence: float = intervals.CONFIDENCE) -> dict:
    """``value`` (mean of after - before, per task) and ``ci95`` (``intervals.Difference``, paired by task)."""
    d = intervals.Difference([np.asarray(after, dtype=float)], [np.asarray(before, dtype=float)], np.ones(1))
    lo, hi = d.interval(confidence)
    return {"value": d.delta, "ci95": [float(lo), float(hi)], "p": d.p_value()}


def ability(solved, tries, members, anchor: int, model: str = "rasch", n_boot: int = F.N_BOOT, seed: int = 0) -> dict:
    """The mean league ability of ``members`` (rows) on the scale anchored at ``anchor`` (ability 0): ``value``,
    ``ci95`` (the bootstrap's percentile interval widened to the Laplace posterior's) and each member's own."""
    k, n = np.asarray(solved, dtype=float), np.asarray(tries, dtype=float)
    point = F.fit(k, n, anchor, model)
    boot = F.bootstrap(k, n, anchor, model, n_boot, seed, point)
    con = Contrasts(F.covariance(k, n, point, model), k.shape[0], anchor)
    members = list(members)
    mean = float(point.ability[members].mean() - point.ability[anchor])
    samples = boot.ability[:, members].mean(axis=1) - boot.ability[:, anchor]
    out = _estimate(mean, samples, con.var(con.ability(members)))
    out["members"] = [_estimate(point.ability[s] - point.ability[anchor], boot.ability[:, s] - boot.ability[:, anchor],
                                con.var(con.ability([s]))) for s in members]
    return out


def panel_change(solved, tries, base: int, trained, model: str = "rasch", n_boot: int = F.N_BOOT, seed: int = 0) -> dict:
    """The base row against the ``trained`` rows on one panel: ``start`` / ``end`` (solve rates), ``rise`` and
    ``interval`` (their paired difference), each arm's solve rate and ability in full."""
    trained = list(trained)
    if not trained or base in trained:
        raise ValueError("panel_change needs at least one trained entrant, apart from the base")
    before, after = per_task(solved, tries, [base]), per_task(solved, tries, trained)
    diff = difference(after, before)
    return {"tasks": int(before.size), "start": float(before.mean()), "end": float(after.mean()),
            "rise": diff["value"], "interval": diff["ci95"], "p": diff["p"],
            "solve_rate": {"base": solve_rate(before), "trained": solve_rate(after), "difference": diff},
            "ability": {"base": {"value": 0.0, "note": "the scale's anchor"},
                        "trained": ability(solved, tries, trained, base, model, n_boot, seed)}}
