"""Rewards for every rollout and the zero-sum TrueSkill update of every teacher-vs-student outcome."""

from __future__ import annotations

from collections import defaultdict

from populora.training import rating
from populora.training.member import Population
from populora.training.phases.rewards import solve_rate, student_reward, teacher_reward
from populora.training.phases.rollout import Rollout
from populora.training.tasks import Task


def assign_rewards(tasks: list[Task], proposals: list[Rollout], answers: list[Rollout], cfg) -> dict[str, float | None]:
    """Set ``reward`` on every rollout; return each task's solve rate (None if invalid or unanswered)."""
    by_task = defaultdict(list)
    for a in answers:
        a.reward = student_reward(a.answer is not None, a.correct, cfg.reward)
        by_task[a.task_id].append(a.correct if a.solved is None else a.solved)
    rates = {t.id: (solve_rate(by_task[t.id]) if t.valid else None) for t in tasks}
    for p in proposals:
        rate = rates.get(p.task_id)
        task_valid = next(t.valid for t in tasks if t.id == p.task_id)
        p.reward = teacher_reward(task_valid, rate, cfg.reward)
        p.verdict = "valid" if task_valid else "invalid"
    return rates


def update_ratings(tasks: list[Task], answers: list[Rollout], population: Population, pairs: dict[str, list[str]],
                   rate_unsolved: bool = True, rate_invalid: bool = True) -> int:
    """Rate every teacher-vs-student outcome of the step (``rating.play``): one zero-sum game per rollout a
    matched student spent on a valid task, won by the student if the answer is correct, by the teacher if not.
    Returns the number of games.

    Two-sided: a task no student solved is a win for its teacher, so with one matched student a teacher can still
    climb. ``rate_unsolved=False`` keeps the older one-sided rule (such a task may be impossible, so it is not
    rated), under which a teacher can only draw or lose.

    An invalid task is a forfeit (``rate_invalid``): for each student ``pairs`` matched its teacher with, the
    teacher loses one game to ``rating.PAR`` and only the teacher moves. Without that, a teacher writing only
    invalid tasks is never rated and keeps a new member's rating, which evolution (mu - k*sigma) cannot tell from
    a good teacher's. One game per invalid task, not one per rollout: rollouts are the student's samples of a
    task, and an invalid task reached no student, so it is one fact about its teacher (the first version charged
    ``rollouts`` forfeits per task: with half the tasks invalid no teacher could ever climb). Self-play (the single-agent baseline plays itself) is not
    rated: it has no opponent.
    """
    outcomes = defaultdict(list)  # (task id, student) -> correct flags, one per rollout
    for a in answers:
        outcomes[(a.task_id, a.member)].append(bool(a.correct))
    teacher_of = {t.id: t.teacher for t in tasks}
    solved_by_anyone = {tid for (tid, _), flags in outcomes.items() if any(flags)}
    games = 0
    for (task_id, student_id), flags in sorted(outcomes.items()):
        teacher_id = teacher_of.get(task_id)
        if teacher_id is None or teacher_id == student_id:
            continue
        if task_id not in solved_by_anyone and not rate_unsolved:
            continue
        student, teacher = population[student_id], population[teacher_id]
        for won in flags:
            student.rating, teacher.rating = rating.play(student, teacher, won)
            games += 1
    if rate_invalid:
        for task in (t for t in tasks if not t.valid):
            teacher = population[task.teacher]
            for student_id in pairs.get(task.teacher, []):
                if student_id == task.teacher:
                    continue
                teacher.rating = rating.forfeit(teacher)
                games += 1
    return games
