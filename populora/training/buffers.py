"""Per-kind task buffers: reference tasks for propose prompts and programs for code_f. Seeded AZR-style from a
small set of hand-written programs (their outputs computed by the sandbox, never typed in)."""

from __future__ import annotations

from collections import deque

import numpy as np

from populora.training.tasks import Task

# AZR seeds with `def f(a): return a` on "Hello world"; a few more shapes give a small model better examples.
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


class TaskBuffers:
    def __init__(self, kinds: list[str], size: int):
        self.kinds = list(kinds)
        self.size = size
        self.buffers: dict[str, deque[Task]] = {k: deque(maxlen=size) for k in kinds}

    def add(self, task: Task) -> None:
        """Keep valid tasks only; a full buffer drops its oldest task (AZR drops the new one)."""
        if task.valid and task.kind in self.buffers:
            self.buffers[task.kind].append(task)

    def sample(self, kind: str, k: int, rng: np.random.Generator) -> list[Task]:
        pool = self.buffers[kind]
        if not pool or k <= 0:
            return []
        idx = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
        return [pool[i] for i in sorted(idx)]

    def programs(self, rng: np.random.Generator) -> Task:
        """One program for a code_f proposal, from the code_o / code_i buffers (or code_f if those are off)."""
        pool = [t for k in ("code_o", "code_i", "code_f") if k in self.buffers for t in self.buffers[k]]
        return pool[int(rng.integers(len(pool)))]

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def to_dict(self) -> dict:
        return {k: [t.to_dict() for t in b] for k, b in self.buffers.items()}

    def load(self, data: dict) -> None:
        for kind, tasks in data.items():
            self.buffers[kind] = deque((Task.from_dict(t) for t in tasks), maxlen=self.size)
