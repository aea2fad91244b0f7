"""Step 0: fill each kind's buffer with the base model's own proposals, as AZR seeds its buffers.

The buffers start from AZR's one trivial task per kind; then the bare base model (no adapter) proposes with the
very prompts teachers get, references drawn from what the buffers hold so far, until each kind holds
``tasks.seed_buffer`` valid tasks or ``tasks.seed_rounds`` rounds have run (AZR loops until full; we bound the
tries so a weak model cannot stall a run). A program kind for which the model wrote no valid task at all falls
back to the hand-written ``SEED_PROGRAMS``; the caller logs that as a warning and a run tag.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from populora.platform.backends import BASE
from populora.training.phases.buffers import AZR_SEED, SEED_PROGRAMS, TaskBuffers, seed_tasks
from populora.training.tasks import KINDS, PROGRAM_KINDS, Task
from populora.training.tasks.prompts import render, stop
from populora.training.phases.validate import program_rules, validate


@dataclass
class SeedReport:
    proposed: dict[str, int] = field(default_factory=dict)   # base-model proposals per kind
    valid: dict[str, int] = field(default_factory=dict)      # of which valid (and now in the buffer)
    fallback: list[str] = field(default_factory=list)        # kinds that got the hand-written programs
    rounds: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        per_kind = ", ".join(f"{k} {self.valid.get(k, 0)}/{n}" for k, n in self.proposed.items()) or "no proposals"
        fallback = f"; hand-written fallback for {', '.join(self.fallback)}" if self.fallback else ""
        return f"seeded buffers from the base model in {self.rounds} round(s), {self.seconds:.0f}s: valid {per_kind}{fallback}"


class SeedError(RuntimeError):
    """A built-in seed task failed validation: the sandbox, not the model, is broken."""


def initial_buffers(verifier, kinds: list[str], size: int, when_full: str = "drop_oldest",
                    code_f_pool: str = "all") -> TaskBuffers:
    """The step-0 buffers: AZR's trivial seed task in each kind, validated in the sandbox."""
    buffers = TaskBuffers(kinds, size, when_full, code_f_pool)
    _add_validated(verifier, buffers, seed_tasks(kinds, [AZR_SEED]))
    return buffers


def seed_buffers(backend, verifier, buffers: TaskBuffers, tc, rng: np.random.Generator, seed: int) -> SeedReport:
    """Grow every buffer to ``tc.seed_buffer`` valid tasks with base-model proposals (bounded by ``tc.seed_rounds``)."""
    report, t0 = SeedReport(), time.perf_counter()
    for r in range(tc.seed_rounds):
        # programs first: code_f proposes inputs for programs the other buffers hold
        missing = {k: tc.seed_buffer - buffers.count(k) for k in buffers.kinds if buffers.count(k) < tc.seed_buffer}
        if not missing:
            break
        tasks = propose_with_base(backend, buffers, tc, missing, rng, seed + r, prefix=f"seed{r}")
        validate(verifier, tasks, buffers, set(), program_rules(tc))
        if tc.seed_shared:
            share_programs(tasks, buffers, tc.seed_buffer)
        report.rounds = r + 1
        for t in tasks:
            report.proposed[t.kind] = report.proposed.get(t.kind, 0) + 1
            report.valid[t.kind] = report.valid.get(t.kind, 0) + int(t.valid)
    for kind in buffers.kinds:
        if kind in PROGRAM_KINDS and buffers.count(kind) <= 1:  # AZR's seed alone: the model added nothing
            _add_validated(verifier, buffers, seed_tasks([kind], SEED_PROGRAMS[1:], teacher="handwritten"))
            report.fallback.append(kind)
    report.seconds = time.perf_counter() - t0
    return report


def share_programs(tasks: list[Task], buffers: TaskBuffers, cap: int) -> None:
    """AZR seeds code_i and code_o from one pool of programs with their inputs: each valid code_o / code_i seed
    task also enters the other kind's buffer, up to ``cap``."""
    pair = {"code_o": "code_i", "code_i": "code_o"}
    for t in tasks:
        other = pair.get(t.kind)
        if t.valid and other in buffers.kinds and buffers.count(other) < cap:
            buffers.add(replace(t, id=f"{t.id}-as-{other}", kind=other, inputs=list(t.inputs), outputs=list(t.outputs),
                                metrics=dict(t.metrics)))


def propose_with_base(backend, buffers: TaskBuffers, tc, counts: dict[str, int], rng: np.random.Generator, seed: int,
                      prefix: str) -> list[Task]:
    """``counts[kind]`` proposals per kind by the bare base model, parsed (not yet validated)."""
    tasks, prompts = [], []
    for kind, n in counts.items():
        for j in range(n):
            task = Task(id=f"{prefix}-{kind}-{j}", kind=kind, program="", teacher="base", step=0)
            prompt = KINDS[kind].teacher_prompt(task, buffers, rng, tc)
            tasks.append(task)
            prompts.append(render(backend, prompt, tc.format, tc.template))
    gens = backend.generate(prompts, [BASE] * len(prompts), tc.max_new_tokens_propose, temperature=tc.temperature,
                            top_p=tc.top_p, seed=seed, stop=stop(tc.format, "teacher", tc.stop_at_answer))
    for task, gen in zip(tasks, gens):
        KINDS[task.kind].parse_proposal(gen.text, task, tc)
    return tasks


def _add_validated(verifier, buffers: TaskBuffers, tasks: list[Task]) -> None:
    validate(verifier, tasks, buffers, set())
    retry = [t for t in tasks if not t.valid]
    if retry:  # known-good programs: a sandbox worker that died under them (replaced since) gets one more try
        for t in retry:
            t.valid, t.reason, t.output, t.outputs = False, "", "", []
        validate(verifier, retry, buffers, set())
    bad = [f"{t.id} ({t.reason})" for t in tasks if not t.valid]
    if bad:
        raise SeedError(f"built-in seed tasks failed validation in the sandbox: {bad[:3]}")
