"""Rewards for every rollout and the zero-sum TrueSkill update of every teacher-vs-student outcome."""

from __future__ import annotations

from collections import defaultdict

from populora.training import rating
from populora.training.member import Population
from populora.training.rewards import solve_rate, student_reward, teacher_reward
from populora.training.rollout import Rollout
from populora.training.tasks import Task


def assign_rewards(tasks: list[Task], proposals: list[Rollout], answers: list[Rollout], cfg) -> dict[str, float | None]:
    """Set ``reward`` on every rollout; return each task's solve rate (None if invalid or unanswered)."""
    by_task = defaultdict(list)
    for a in answers:
        a.reward = student_reward(a.answer is not None, a.correct, cfg.reward)
        by_task[a.task_id].append(a.correct)
    rates = {t.id: (solve_rate(by_task[t.id]) if t.valid else None) for t in tasks}
    for p in proposals:
        rate = rates.get(p.task_id)
        task_valid = next(t.valid for t in tasks if t.id == p.task_id)
        p.reward = teacher_reward(task_valid and rate is not None, rate, cfg.reward)
        p.verdict = "valid" if task_valid else "invalid"
    return rates


def update_ratings(tasks: list[Task], answers: list[Rollout], population: Population, rate_unsolved: bool) -> int:
    """One 1-vs-1 TrueSkill game per (valid task, student): the student wins if it solved the task in most of its
    rollouts, loses if in fewer than half, draws at exactly half. Zero-sum: the teacher gets the opposite result.

    A task no student solved at all says nothing about how good its teacher is (it may be impossible), so it is
    not rated unless ``rate_unsolved``; otherwise teachers would climb the ladder by writing impossible tasks.
    Self-play (the single-agent baseline) has no opponent and is not rated. Returns the number of games.
    """
    outcomes = defaultdict(list)  # (task id, student) -> correct flags
    for a in answers:
        outcomes[(a.task_id, a.member)].append(a.correct)
    solved_by_anyone = {tid for (tid, _), flags in outcomes.items() if any(flags)}
    teacher_of = {t.id: t.teacher for t in tasks if t.valid}
    games = 0
    for (task_id, student_id), flags in outcomes.items():
        teacher_id = teacher_of.get(task_id)
        if teacher_id is None or teacher_id == student_id:
            continue
        if task_id not in solved_by_anyone and not rate_unsolved:
            continue
        student, teacher = population[student_id], population[teacher_id]
        student.rating, teacher.rating = rating.play(student, teacher, sum(flags) / len(flags))
        games += 1
    return games
