"""The solver's training batch when ``solver.data`` is ``buffer`` (AZR's): each student answers, once each,
``solver.batch_per_kind`` tasks per kind drawn from the buffers by AZR's ``max_new`` rule (this step's additions
first, then uniform over the whole buffer). These answers are what the student trains on; the answers that
estimated this step's solve rates only set the teachers' rewards and the ratings (``azr_ray_trainer.py``:
``_create_train_code_pred_dataloader``, ``_compute_batch``)."""

from __future__ import annotations

import numpy as np

from populora.training.phases.buffers import TaskBuffers
from populora.training.member import Member
from populora.training.phases.rewards import student_reward
from populora.training.phases.rollout import Rollout
from populora.training.phases.solve import solve


def solver_batch(backend, verifier, buffers: TaskBuffers, students: list[Member], cfg, step: int,
                 rng: np.random.Generator, seed: int) -> list[Rollout]:
    """Every student's training answers, rewarded as any answer (``student_reward``)."""
    tasks, answerers = {}, {}
    for s in students:
        for kind in cfg.tasks.kinds:
            for task in buffers.sample_max_new(kind, cfg.solver.batch_per_kind, step, rng):
                tasks[task.id] = task
                answerers.setdefault(task.id, []).append(s.id)
    answers = solve(backend, verifier, list(tasks.values()), answerers, cfg, seed)
    for a in answers:
        a.reward = student_reward(a.answer is not None, a.correct, cfg.reward)
    return answers
