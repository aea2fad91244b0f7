"""Match phase: pair students with teachers by TrueSkill win probability (prioritized fictitious self-play).

PFSP (AlphaStar) samples opponents with weight f(P[win]). For a student facing teacher t, with p = P(student
beats t): "even" f = p(1-p) favours close matches, "hard" f = (1-p)^power favours teachers the student loses to,
"uniform" f = 1.
"""

from __future__ import annotations

import numpy as np

from populora.training.member import Member
from populora.training.rating import win_probability


def pfsp_weights(p_win: np.ndarray, scheme: str, power: float = 2.0) -> np.ndarray:
    """Sampling weights over opponents from P(win) against each, normalised to sum to 1.

    >>> pfsp_weights(np.array([0.5, 0.9]), "even").round(3).tolist()
    [0.735, 0.265]
    >>> pfsp_weights(np.array([0.2, 0.8]), "hard").round(3).tolist()
    [0.941, 0.059]
    """
    p = np.clip(np.asarray(p_win, dtype=float), 1e-6, 1 - 1e-6)
    if scheme == "even":
        w = p * (1 - p)
    elif scheme == "hard":
        w = (1 - p) ** power
    elif scheme == "uniform":
        w = np.ones_like(p)
    else:
        raise ValueError(f"unknown PFSP scheme {scheme!r}; use even, hard or uniform")
    return w / w.sum()


def match(
    teachers: list[Member], students: list[Member], per_student: int, scheme: str, power: float, rng: np.random.Generator
) -> dict[str, list[str]]:
    """Return teacher id -> ids of the students who will solve its tasks this step.

    Each student draws ``per_student`` distinct teachers by PFSP weight; a teacher no student drew gets the
    student it is most evenly matched with, so every teacher's tasks get a solve rate.
    """
    pairs: dict[str, list[str]] = {t.id: [] for t in teachers}
    k = min(per_student, len(teachers))
    for s in students:
        w = pfsp_weights(np.array([win_probability(s, t) for t in teachers]), scheme, power)
        for i in rng.choice(len(teachers), size=k, replace=False, p=w):
            pairs[teachers[i].id].append(s.id)
    for t in teachers:
        if not pairs[t.id] and students:
            closest = min(students, key=lambda s: abs(win_probability(s, t) - 0.5))
            pairs[t.id].append(closest.id)
    return pairs
