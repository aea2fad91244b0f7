"""Per-kind task buffers: reference tasks for propose prompts and programs for code_f.

They start, as AZR's do, from one trivial task per kind (``AZR_SEED``) and are then filled at step 0 by the base
model's own proposals (``populora.training.phases.seeding``). ``SEED_PROGRAMS`` are hand-written programs used only as a
fallback when the base model proposes no valid task. Every output is computed by the sandbox, never typed in."""

from __future__ import annotations

from collections import deque

import numpy as np

from populora.training.tasks import PROGRAM_KINDS, Task

# AZR's seed: the identity on "Hello world" (code_o / code_i), and for code_f the inputs AZR's seed shows.
AZR_SEED = ("def f(a):\n    return a", "'Hello world'")
AZR_SEED_CODE_F_INPUTS = ["'Hello world'", "1", "dict(a=1, b=2)", "(1.1, 1.2, 1.3)", "'[[1, 0, 0], [0, 0, 0], [0, 0, 0]]'",
                          "1001101100010001"]

# The fallback when the base model proposes nothing valid: a few more shapes than AZR's one seed.
SEED_PROGRAMS: list[tuple[str, str]] = [
    ("def f(a):\n    return a", "'Hello world'"),
    ("def f(n):\n    total = 0\n    for i in range(n):\n        total += i * i\n    return total", "5"),
    ("def f(s):\n    return ''.join(c for c in s if c not in 'aeiou')", "'programming'"),
    ("def f(xs):\n    return sorted(xs)[len(xs) // 2]", "[7, 1, 5, 3, 9]"),
    ("def f(a, b):\n    while b:\n        a, b = b, a % b\n    return a", "48, 18"),
    ("def f(words):\n    counts = {}\n    for w in words:\n        counts[w] = counts.get(w, 0) + 1\n    return counts", "['a', 'b', 'a']"),
    ("def f(n):\n    if n < 2:\n        return n\n    return f(n - 1) + f(n - 2)", "10"),
    ("def f(s):\n    return s.upper() if len(s) > 3 else s[::-1]", "'hey'"),
]


def buffer_kinds(kinds: list[str]) -> list[str]:
    """The buffers a run keeps: its kinds, plus code_o when code_f is trained without a program kind (code_f
    needs programs to show).

    >>> buffer_kinds(["code_f"]), buffer_kinds(["planted"])
    (['code_f', 'code_o'], ['planted'])
    """
    return list(kinds) + (["code_o"] if "code_f" in kinds and not any(k in PROGRAM_KINDS for k in kinds) else [])


def seed_tasks(kinds: list[str], programs: list[tuple[str, str]], teacher: str = "seed") -> list[Task]:
    """Unvalidated buffer tasks of ``programs`` (program, input) for each of ``kinds``; code_f gets AZR's seed inputs
    (only for the identity; other programs enter the code_f buffer through the model's proposals)."""
    tasks = []
    for i, (program, x) in enumerate(programs):
        for kind in kinds:
            if kind in PROGRAM_KINDS:
                tasks.append(Task(id=f"{teacher}-{kind}-{i}", kind=kind, program=program, input=x, teacher=teacher, step=0))
            elif kind == "code_f" and (program, x) == AZR_SEED:  # (the planted kind needs no seed)
                tasks.append(Task(id=f"{teacher}-{kind}-{i}", kind=kind, program=program, inputs=list(AZR_SEED_CODE_F_INPUTS),
                                  teacher=teacher, step=0))
    return tasks


class TaskBuffers:
    def __init__(self, kinds: list[str], size: int, when_full: str = "drop_oldest", code_f_pool: str = "all"):
        self.kinds = list(kinds)
        self.size, self.when_full, self.code_f_pool = size, when_full, code_f_pool
        self.buffers: dict[str, deque[Task]] = {k: deque(maxlen=size) for k in kinds}

    def add(self, task: Task) -> None:
        """Keep valid tasks only; a full buffer drops its oldest task (``drop_oldest``, ours) or the new one
        (``drop_new``: AZR keeps the first ``max_programs``)."""
        if task.valid and task.kind in self.buffers:
            if self.when_full == "drop_new" and len(self.buffers[task.kind]) >= self.size:
                return
            self.buffers[task.kind].append(task)

    def sample_max_new(self, kind: str, k: int, step: int, rng: np.random.Generator) -> list[Task]:
        """AZR's solver batch (``pred_data_mix_strategy=max_new``): up to ``k`` of the tasks added at ``step``,
        then the rest uniformly from the whole buffer (with replacement only when it holds fewer than needed)."""
        pool = list(self.buffers[kind])
        if not pool or k <= 0:
            return []
        new = [t for t in pool if t.step == step]
        picked = [new[i] for i in rng.choice(len(new), size=min(k, len(new)), replace=False)] if new else []
        rest = k - len(picked)
        if rest:
            picked += [pool[i] for i in rng.choice(len(pool), size=rest, replace=rest > len(pool))]
        return picked

    def sample(self, kind: str, k: int, rng: np.random.Generator) -> list[Task]:
        pool = self.buffers[kind]
        if not pool or k <= 0:
            return []
        idx = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
        return [pool[i] for i in sorted(idx)]

    def programs(self, rng: np.random.Generator) -> Task:
        """One program for a code_f proposal, from the code_o / code_i buffers, and (``code_f_pool: all``, ours)
        the code_f one too; AZR's pool (``programs``) is code_i + code_o only."""
        kinds = ("code_o", "code_i", "code_f") if self.code_f_pool == "all" else ("code_o", "code_i")
        pool = [t for k in kinds if k in self.buffers for t in self.buffers[k]]
        return pool[int(rng.integers(len(pool)))]

    def count(self, kind: str) -> int:
        return len(self.buffers[kind])

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def to_dict(self) -> dict:
        return {k: [t.to_dict() for t in b] for k, b in self.buffers.items()}

    def load(self, data: dict) -> None:
        for kind, tasks in data.items():
            self.buffers[kind] = deque((Task.from_dict(t) for t in tasks), maxlen=self.size)
