"""Validate phase: the sandbox runs every proposed task; invalid or nondeterministic ones are dropped (and
their teachers penalised in the update); valid ones get gold outputs computed in the sandbox, curriculum
metrics (programs the teacher wrote only: ``curriculum.wrote_program``), and join the buffers."""

from __future__ import annotations

from populora.platform.sandbox.verifier import ProgramRules, Validate
from populora.training.measures import curriculum
from populora.training.phases.buffers import TaskBuffers
from populora.training.tasks import KINDS, Task


def program_rules(tc) -> ProgramRules:
    """The static program rules ``tasks.*`` asks for (AZR's, or ours where a switch says so)."""
    return ProgramRules(single_function=tc.single_function, extra_bans=tc.extra_bans,
                        error_keywords=tuple(tc.banned_error_keywords), code_f_distinct_outputs=tc.code_f_distinct_outputs)


def validate(verifier, tasks: list[Task], buffers: TaskBuffers, seen_structures: set[str],
             rules: ProgramRules = ProgramRules()) -> None:
    requests, owners = [], []  # one verifier Validate job per (task, input)
    for task in tasks:
        if task.reason:  # already a format failure
            continue
        for x in KINDS[task.kind].validation_inputs(task):
            requests.append(Validate(task.program, x, rules))
            owners.append((task, x))
    verdicts = verifier.check_many(requests) if requests else []
    results: dict[str, list] = {}
    for (task, x), verdict in zip(owners, verdicts):
        results.setdefault(task.id, []).append((x, verdict))
    for task in tasks:
        if task.reason:
            continue
        KINDS[task.kind].judge_validation(task, results.get(task.id, []), rules)
        if task.valid:
            if curriculum.wrote_program(task):  # metrics of what the teacher wrote, not of re-sampled programs
                task.metrics = curriculum.measure(task.program, seen_structures)
            buffers.add(task)

