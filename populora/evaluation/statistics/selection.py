"""The weakest and the best member of a population, chosen without selection bias: cross-fitting on halves.

Choosing the member with the lowest observed score and then reporting that same score is biased. Take eight
equally skilled members (true score 50) on 500 problems: the lowest of eight noisy scores sits about 3 points
below 50, and a bootstrap that treats the choice as fixed ignores that it was made on the same data.

Cross-fitting separates the choice from the score. Each benchmark's problems are split deterministically into
halves A and B (sorted ids, alternating, so both halves cover every benchmark). The weakest member is chosen
on half A by its overall score (the unweighted mean over benchmarks, as in ``report.py``) and scored on half
B; the member chosen on half B is scored on half A. No problem is used both to choose a member and to score
it. The two halves together give a per-problem table over every problem. That table estimates the score of
"the member the rule picks" without the bias, and it goes into the paired bootstrap against the baseline the
same way a single member's table would. The best member is handled the same way with max in place of min.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Table = dict[str, dict[str, float]]  # one member's {benchmark: {problem id: score}}
WHICH = {"weakest": min, "best": max}
BIASED = "selected on the same problems: biased"


class TooFewProblems(ValueError):
    """Half B is empty (every benchmark has at most one problem): nothing to choose on for half A."""


def halves(problems) -> tuple[list[str], list[str]]:
    """Half A and half B of one benchmark's problem ids: sorted, then alternating.

    >>> halves(["b", "a", "d", "c", "e"])
    (['a', 'c', 'e'], ['b', 'd'])
    """
    ordered = sorted(problems)
    return ordered[0::2], ordered[1::2]


def overall(table: Table, problems: dict[str, list[str]]) -> float:
    """Unweighted mean over benchmarks of the mean score on ``problems[b]``; benchmarks with no problems are
    left out.

    >>> overall({"x": {"1": 1.0, "2": 0.0}, "y": {"1": 1.0}}, {"x": ["1", "2"], "y": ["1"]})
    0.75
    """
    return float(np.mean([np.mean([table[b][p] for p in ps]) for b, ps in problems.items() if ps]))


def common_problems(tables: dict[str, Table]) -> dict[str, list[str]]:
    """{benchmark: sorted problem ids} over the benchmarks every member scored. Within one evaluation every
    member answers the same problems; anything else is refused (ValueError naming the benchmark), since
    intersecting them would silently compare different things.

    >>> common_problems({"S0": {"x": {"1": 1.0}, "y": {"1": 0.0}}, "S1": {"x": {"1": 0.0}}})
    {'x': ['1']}
    """
    names = [b for b in next(iter(tables.values())) if all(b in t for t in tables.values())]
    out = {}
    for b in names:
        sets = {m: frozenset(t[b]) for m, t in tables.items()}
        if len(set(sets.values())) > 1:
            sizes = ", ".join(f"{m}: n={len(s)}" for m, s in sets.items())
            raise ValueError(f"members were evaluated on different problems of {b} ({sizes}); re-evaluate them together")
        out[b] = sorted(next(iter(sets.values())))
    return out


@dataclass
class Selection:
    """The weakest (or best) member arm: its per-problem table and the members it was made of."""
    which: str     # "weakest" | "best"
    scores: Table  # {benchmark: {problem id: score}} over every problem
    on_a: str      # the member chosen on half A (its scores on half B are used)
    on_b: str      # the member chosen on half B (its scores on half A are used)
    cross_fitted: bool = True  # False: chosen on the same problems it is scored on (``same_problems``), biased

    @property
    def members(self) -> list[str]:
        return list(dict.fromkeys([self.on_a, self.on_b]))

    def label(self) -> str:
        """The report row's label: which members, and how they were chosen.

        >>> Selection("weakest", {}, "S0", "S2").label()
        'weakest member (cross-fit: S0 chosen on half A, S2 chosen on half B)'
        >>> Selection("best", {}, "T1", "T1").label()
        'best member (T1, cross-fit)'
        >>> Selection("best", {}, "T1", "T1", cross_fitted=False).label()
        'best member (T1, selected on the same problems: biased)'
        """
        if not self.cross_fitted:
            return f"{self.which} member ({self.on_a}, {BIASED})"
        if self.on_a == self.on_b:
            return f"{self.which} member ({self.on_a}, cross-fit)"
        return f"{self.which} member (cross-fit: {self.on_a} chosen on half A, {self.on_b} chosen on half B)"


def cross_fit(tables: dict[str, Table], which: str = "weakest") -> Selection:
    """The weakest (``min``) or best (``max``) member by overall score, chosen on one half of each benchmark's
    problems and scored on the other; ties go to the member listed first. TooFewProblems when no benchmark has
    two problems.

    >>> t = {"S0": {"x": {"1": 0.0, "2": 1.0}}, "S1": {"x": {"1": 1.0, "2": 0.0}}}
    >>> s = cross_fit(t, "weakest")  # half A = ["1"]: S0 is weakest there; half B = ["2"]: S1
    >>> (s.on_a, s.on_b, s.scores)
    ('S0', 'S1', {'x': {'1': 1.0, '2': 1.0}})
    """
    pick = WHICH[which]
    problems = common_problems(tables)
    split = {b: halves(ps) for b, ps in problems.items()}
    half_a = {b: a for b, (a, _) in split.items()}
    half_b = {b: h for b, (_, h) in split.items()}
    members = list(tables)
    if not any(half_b.values()):
        raise TooFewProblems(f"cannot cross-fit: no benchmark has two problems ({', '.join(problems)})")

    def chosen(half):
        score = {m: overall(tables[m], half) for m in members}
        return pick(members, key=score.get)  # min / max keep the first of equals

    on_a, on_b = chosen(half_a), chosen(half_b)
    scores = {b: {**{p: tables[on_b][b][p] for p in half_a[b]}, **{p: tables[on_a][b][p] for p in half_b[b]}}
              for b in problems}
    return Selection(which, {b: dict(sorted(s.items())) for b, s in scores.items()}, on_a, on_b)


def same_problems(tables: dict[str, Table], which: str = "weakest") -> Selection:
    """The biased pick, for when cross-fitting is impossible: the member with the lowest (highest) overall score
    on all problems, scored on those same problems.

    >>> same_problems({"S0": {"x": {"1": 0.0, "2": 1.0}}, "S1": {"x": {"1": 0.0, "2": 0.0}}}).label()
    'weakest member (S1, selected on the same problems: biased)'
    """
    problems = common_problems(tables)
    m = WHICH[which](tables, key=lambda m: overall(tables[m], problems))
    return Selection(which, {b: {p: tables[m][b][p] for p in ps} for b, ps in problems.items()}, m, m, cross_fitted=False)


def pick(tables: dict[str, Table], which: str = "weakest") -> Selection:
    """``cross_fit``, else (too few problems to split) ``same_problems``, whose label says it is biased."""
    try:
        return cross_fit(tables, which)
    except TooFewProblems:
        return same_problems(tables, which)
