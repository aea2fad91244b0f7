"""Rewards (AZR's, with its paper/code differences as config): students for answers, teachers for tasks.

Sources, AZR's code (absolute_zero_reasoner/rewards/reward_managers.py, training split) and paper (eq. 4-6):
- student: 1 if correct, -0.5 if well-formed but wrong, -1 if no answer can be parsed (code and the paper's
  format-aware penalty agree);
- teacher: -1 for an invalid task (a format failure); for a valid task with solve rate ``acc`` over its answers,
  1 - acc when 0 < acc < 1; at acc 0 or 1 the paper's eq. pays 0 (our default) and the code -0.5 (set
  ``reward.teacher_trivial_or_impossible: -0.5``; AZR issue #37 notes the difference).
"""

from __future__ import annotations

import numpy as np


def student_reward(parsed: bool, correct: bool, cfg) -> float:
    """``student_correct`` for right, ``student_wrong`` for a well-formed wrong answer, ``student_format_error``
    if unparseable.

    >>> from populora.training.config import RewardConfig
    >>> [student_reward(True, True, RewardConfig()), student_reward(True, False, RewardConfig()), student_reward(False, False, RewardConfig())]
    [1.0, -0.5, -1.0]
    """
    if not parsed:
        return cfg.student_format_error
    return cfg.student_correct if correct else cfg.student_wrong


def teacher_reward(valid: bool, solve_rate: float | None, cfg) -> float:
    """Learnability reward: 1 - solve rate for tasks solved sometimes; ``teacher_trivial_or_impossible`` when
    always or never solved; ``teacher_invalid`` for invalid tasks; 0 for a valid task nobody answered (no signal).

    >>> from populora.training.config import RewardConfig
    >>> c = RewardConfig()
    >>> [teacher_reward(True, 0.25, c), teacher_reward(True, 1.0, c), teacher_reward(True, 0.0, c), teacher_reward(False, None, c)]
    [0.75, 0.0, 0.0, -1.0]
    """
    if not valid:
        return cfg.teacher_invalid
    if solve_rate is None:
        return 0.0
    if solve_rate <= 0.0 or solve_rate >= 1.0:
        return cfg.teacher_trivial_or_impossible
    return 1.0 - solve_rate


def solve_rate(correct: list[bool]) -> float | None:
    """Mean correctness of the rollouts on a task (None if nobody answered it).

    >>> solve_rate([True, False, False, False]), solve_rate([])
    (0.25, None)
    """
    return float(np.mean(correct)) if correct else None
