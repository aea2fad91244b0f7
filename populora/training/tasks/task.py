"""The task record shared by every phase: what a teacher proposed, what the verifier said, how it was solved."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Task:
    id: str
    kind: str                      # code_o | code_i | code_f
    program: str                   # defines f
    input: str = ""                # code_o / code_i: the argument expression, as AZR writes it
    output: str = ""               # code_o / code_i: repr of f(input), computed in the sandbox
    inputs: list[str] = field(default_factory=list)   # code_f: all inputs (first half shown, rest held out)
    outputs: list[str] = field(default_factory=list)  # code_f: repr of f(x) per input
    message: str = ""              # code_f: the teacher's hint
    teacher: str = ""              # member id ("seed" for the seed buffer)
    step: int = -1
    valid: bool = False
    reason: str = ""               # why invalid, or "ok"
    metrics: dict = field(default_factory=dict)       # curriculum metrics of the program

    @property
    def shown(self) -> list[tuple[str, str]]:
        """code_f: the input/output pairs shown to the student."""
        half = max(1, len(self.inputs) // 2)
        return list(zip(self.inputs[:half], self.outputs[:half]))

    @property
    def held_out(self) -> list[str]:
        half = max(1, len(self.inputs) // 2)
        return self.inputs[half:]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Task":
        return cls(**data)
