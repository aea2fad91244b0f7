"""Propose phase: every teacher writes ``tasks_per_teacher`` tasks, kinds taken in turn, in one batched
generation (each row on its teacher's adapter), in the run's ``tasks.format``. The completion, reasoning included,
stays on the rollout (the tasks table keeps it)."""

from __future__ import annotations

import numpy as np

from populora.training.phases.buffers import TaskBuffers
from populora.training.member import Member
from populora.training.phases.rollout import Rollout
from populora.training.tasks import KINDS, Task
from populora.training.tasks.prompts import render, stop


def propose(backend, teachers: list[Member], buffers: TaskBuffers, cfg, step: int, rng: np.random.Generator, seed: int):
    """Return (tasks, rollouts): unvalidated tasks (``reason`` set on format failures) and the teachers' rollouts."""
    tc = cfg.tasks
    plans = []  # (teacher, task, prompt)
    for teacher in teachers:
        for j in range(tc.tasks_per_teacher):
            kind = tc.kinds[(step + j) % len(tc.kinds)]
            task = Task(id=f"s{step}-{teacher.id}-{j}", kind=kind, program="", teacher=teacher.id, step=step)
            prompt = KINDS[kind].teacher_prompt(task, buffers, rng, tc)
            plans.append((teacher, task, render(backend, prompt, tc.format, tc.template)))
    gens = backend.generate(
        [p for _, _, p in plans], [t.id for t, _, _ in plans], tc.max_new_tokens_propose,
        temperature=tc.temperature, top_p=tc.top_p, seed=seed, stop=stop(tc.format, "teacher", tc.stop_at_answer),
    )
    tasks, rollouts = [], []
    for (teacher, task, _), gen in zip(plans, gens):
        KINDS[task.kind].parse_proposal(gen.text, task, tc)
        tasks.append(task)
        rollouts.append(Rollout(teacher.id, "teacher", task.kind, task.id, gen.prompt_ids, gen.completion_ids, gen.text,
                                generator_logp=gen.logprobs))
    return tasks, rollouts
