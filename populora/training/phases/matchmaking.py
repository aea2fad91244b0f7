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


def assign_answers(tasks_of: dict[str, list[str]], teachers: list[Member], students: list[Member], n: int,
                   scheme: str, power: float, rng: np.random.Generator) -> dict[str, list[str]]:
    """Return task id -> the students answering it, one entry per answer: exactly ``n`` per task (AZR's
    ``n_samples``), every student the same number of answers (to within one), who answers whose tasks drawn
    by PFSP. ``tasks_of``: teacher id -> its valid task ids.

    Answers are dealt one at a time, students taking turns: the student draws a teacher with open answers by its
    PFSP weights, and answers that teacher's task with the most answers still open. A student can only draw
    teachers with answers left, so the deal always completes, and the quotas sum to the answers needed.

    >>> from populora.training.member import Member
    >>> ts, ss = [Member("T0", "teacher", 8), Member("T1", "teacher", 8)], [Member(f"S{i}", "student", 8) for i in range(3)]
    >>> got = assign_answers({"T0": ["a", "b"], "T1": ["c"]}, ts, ss, 8, "even", 2.0, np.random.default_rng(0))
    >>> sorted(len(v) for v in got.values()), sorted(sum(v.count(s.id) for v in got.values()) for s in ss)
    ([8, 8, 8], [8, 8, 8])
    """
    open_ = {task: n for t in teachers for task in tasks_of.get(t.id, [])}
    owner = {task: t for t in teachers for task in tasks_of.get(t.id, [])}
    out: dict[str, list[str]] = {task: [] for task in open_}
    if not open_ or not students:
        return out
    total = n * len(open_)
    base, extra = divmod(total, len(students))
    quota = {s.id: base for s in students}
    for i in rng.choice(len(students), size=extra, replace=False):
        quota[students[i].id] += 1
    while any(quota.values()):
        for i in rng.permutation(len(students)):
            s = students[i]
            if not quota[s.id]:
                continue
            live = [t for t in teachers if any(open_[task] for task in tasks_of.get(t.id, []))]
            w = pfsp_weights(np.array([win_probability(s, t) for t in live]), scheme, power)
            teacher = live[rng.choice(len(live), p=w)]
            task = max((x for x in tasks_of[teacher.id]), key=lambda x: open_[x])
            out[task].append(s.id)
            open_[task] -= 1
            quota[s.id] -= 1
    assert all(owner[task] and len(v) == n for task, v in out.items()), "every task gets exactly n answers"
    return out


def answer_plan(tasks, pairs: dict[str, list[str]], teachers: list[Member], students: list[Member], tc, mc,
                rng: np.random.Generator) -> dict[str, list[str]]:
    """Task id -> the students answering it, one entry per answer, for every valid task.

    ``tasks.answers_per_task`` set: exactly that many answers per task, spread by :func:`assign_answers`. Unset:
    each student ``pairs`` matched with the task's teacher answers it ``tasks.rollouts`` times (a task gets
    rollouts x however many students drew its teacher)."""
    valid = [t for t in tasks if t.valid]
    if tc.answers_per_task is None:
        return {t.id: [s for s in pairs.get(t.teacher, []) for _ in range(tc.rollouts)] for t in valid}
    tasks_of: dict[str, list[str]] = {}
    for t in valid:
        tasks_of.setdefault(t.teacher, []).append(t.id)
    return assign_answers(tasks_of, teachers, students, tc.answers_per_task, mc.pfsp, mc.pfsp_power, rng)
