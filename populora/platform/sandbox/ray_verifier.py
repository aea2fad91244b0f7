"""Sandbox checks spread over Ray actors (``ray.sandbox_workers``), each running its own ``Verifier``.

Apart from the model workers (backends/ray.py): an actor's process imports the module its class is defined in, and
this one needs only the sandbox, not torch and transformers (~3 s of CPU and their memory in every sandbox actor).
"""

from __future__ import annotations

from populora.platform.sandbox.verifier import Verifier


class _VerifierWorker:
    def __init__(self, timeout_s: float, memory_mb: int):
        self.verifier = Verifier(timeout_s=timeout_s, memory_mb=memory_mb)

    def check_many(self, tasks: list):  # Validate / Check jobs (plain dataclasses: Ray pickles them)
        return self.verifier.check_many(tasks)


class RayVerifier:
    """Verifier interface; requests are split evenly over sandbox actors and answered in order."""

    def __init__(self, ray, workers: int, timeout_s: float, memory_mb: int, cpus: float = 0.5):
        self.ray = ray
        actor = ray.remote(num_cpus=cpus)(_VerifierWorker)
        self.actors = [actor.remote(timeout_s, memory_mb) for _ in range(workers)]

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []

    def check_many(self, tasks: list):  # Validate / Check jobs (plain dataclasses: Ray pickles them)
        n = len(self.actors)
        chunks = [tasks[i::n] for i in range(n)]
        results = self.ray.get([a.check_many.remote(c) for a, c in zip(self.actors, chunks) if c])
        out = [None] * len(tasks)
        for i, chunk_result in enumerate(results):
            out[i::n] = chunk_result
        return out
