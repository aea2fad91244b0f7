"""Functional distance of an evolution child from its parent: the mean KL of the two policies' next-token
distributions over a small fixed probe set of prompts (one forward of each, every prompt position). Weight-space
distances say little across operators (an SVD fit and a Gaussian of the same norm move the policy very
differently); this is what the policy feels."""

from __future__ import annotations

# Short, fixed, covering what the members do: propose programs, predict outputs, deduce inputs, and plain text.
PROBE_PROMPTS = (
    "Write a Python function f(xs) that returns the sum of the even numbers in xs.",
    "def f(s):\n    return s[::-1].upper()\n\nprint(f('abc'))  # the output is",
    "Find an input x such that f(x) == 12, where f = lambda x: 3 * x.",
    "The capital of France is",
)


class ProbeKL:
    """``distance(parent_id, child_id)``: mean KL(parent || child) on ``PROBE_PROMPTS``, tokenized once."""

    def __init__(self, backend, prompts: tuple[str, ...] = PROBE_PROMPTS):
        self.backend = backend
        self.prompt_ids = [backend.tokenizer(p)["input_ids"] for p in prompts]

    def __call__(self, parent: str, child: str) -> float:
        return self.backend.probe_kl(parent, child, self.prompt_ids)


def distance_for(backend) -> ProbeKL | None:
    """The probe, or None for a backend that cannot run it (Ray model workers: not measured, said in the docs)."""
    return ProbeKL(backend) if hasattr(backend, "probe_kl") else None
