"""A rollout: one sampled completion by one member, with the reward it earned. The unit of the update."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Rollout:
    member: str
    role: str                  # teacher | student (the role played in this rollout)
    kind: str                  # code_o | code_i | code_f
    task_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    answer: str | None = None  # student: the parsed answer (None = format error)
    correct: bool = False
    solved: bool | None = None  # counts as solved in the task's solve rate, where it differs from correct (AZR's estimate)
    verdict: str = ""          # the verifier's status / reason for a student answer
    reward: float = 0.0
    advantage: float = 0.0
    generator_logp: list[float] | None = None  # the generator's log-prob of each completion token (vLLM), else None

    def summary(self) -> dict:
        return {"member": self.member, "task_id": self.task_id, "kind": self.kind, "answer": self.answer,
                "correct": self.correct, "verdict": self.verdict, "reward": self.reward, "text": self.text}
