"""Rewards (AZR, with the paper/code differences as config): students for answers, teachers for tasks."""

from __future__ import annotations

import numpy as np


def student_reward(parsed: bool, correct: bool, cfg) -> float:
    """1 for right, ``student_wrong`` for a well-formed wrong answer, ``student_format_error`` if unparseable.

    >>> from populora.training.config import RewardConfig
    >>> [student_reward(True, True, RewardConfig()), student_reward(True, False, RewardConfig()), student_reward(False, False, RewardConfig())]
    [1.0, 0.0, -1.0]
    """
    if not parsed:
        return cfg.student_format_error
    return cfg.student_correct if correct else cfg.student_wrong


def teacher_reward(valid: bool, solve_rate: float | None, cfg) -> float:
    """Learnability reward: 1 - solve rate for tasks solved sometimes; ``teacher_trivial_or_impossible`` when
    always or never solved; ``teacher_invalid`` for invalid tasks.

    >>> from populora.training.config import RewardConfig
    >>> c = RewardConfig()
    >>> [teacher_reward(True, 0.25, c), teacher_reward(True, 1.0, c), teacher_reward(True, 0.0, c), teacher_reward(False, None, c)]
    [0.75, 0.0, 0.0, -1.0]
    """
    if not valid or solve_rate is None:
        return cfg.teacher_invalid
    if solve_rate <= 0.0 or solve_rate >= 1.0:
        return cfg.teacher_trivial_or_impossible
    return 1.0 - solve_rate


def solve_rate(correct: list[bool]) -> float | None:
    """Mean correctness of the rollouts on a task (None if nobody answered it).

    >>> solve_rate([True, False, False, True]), solve_rate([])
    (0.5, None)
    """
    return float(np.mean(correct)) if correct else None
