"""Validate phase: the sandbox runs every proposed task; invalid or nondeterministic ones are dropped (and
their teachers penalised in the update); valid ones get gold outputs computed in the sandbox, curriculum
metrics (programs the teacher wrote only: ``curriculum.wrote_program``), and join the buffers."""

from __future__ import annotations

from populora.platform.verifier import Validate
from populora.training import curriculum
from populora.training.buffers import TaskBuffers
from populora.training.tasks import KINDS, Task


def validate(verifier, tasks: list[Task], buffers: TaskBuffers, seen_structures: set[str]) -> None:
    requests, owners = [], []  # one verifier Validate job per (task, input)
    for task in tasks:
        if task.reason:  # already a format failure
            continue
        for x in KINDS[task.kind].validation_inputs(task):
            requests.append(Validate(task.program, x))
            owners.append((task, x))
    verdicts = verifier.check_many(requests) if requests else []
    results: dict[str, list] = {}
    for (task, x), verdict in zip(owners, verdicts):
        results.setdefault(task.id, []).append((x, verdict))
    for task in tasks:
        if task.reason:
            continue
        KINDS[task.kind].judge_validation(task, results.get(task.id, []))
        if task.valid:
            if curriculum.wrote_program(task):  # metrics of what the teacher wrote, not of re-sampled programs
                task.metrics = curriculum.measure(task.program, seen_structures)
            buffers.add(task)

