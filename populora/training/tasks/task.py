"""The task record shared by every phase (what a teacher proposed, what the verifier said, how it was solved),
and :class:`TaskKind`, the one interface through which a kind says what it means."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from populora.platform.sandbox.verifier import Check, Verdict
    from populora.training.config import TasksConfig


class BufferReader(Protocol):
    """What a kind's propose prompt reads from the run's task buffers (``training.buffers.TaskBuffers``, which
    builds on this module's ``Task``: named here by its use so that tasks need not import buffers)."""

    def sample(self, kind: str, k: int, rng: np.random.Generator) -> list[Task]: ...

    def programs(self, rng: np.random.Generator) -> Task: ...


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


Prompt = tuple[list[dict], str]  # chat messages, and the assistant prefill (azr: "<think>"; direct: up to a fence)


class TaskKind(ABC):
    """Everything one task kind means, in one place: how a teacher is asked for a task and how the reply is read,
    how a student is asked and how the answer is read, and what makes the answer right (a :class:`Check` the
    generic verifier runs in the sandbox)."""

    name: str                    # code_o | code_i | code_f
    json_keys: tuple[str, ...]   # the fields of this kind's TASK.json (``populora sandbox check``)
    writes_program: bool = True  # the teacher writes the program (code_f: it writes inputs for a buffered one)

    @abstractmethod
    def teacher_prompt(self, task: Task, buffers: BufferReader, rng: np.random.Generator,
                       cfg: TasksConfig) -> Prompt:
        """The propose prompt for ``task`` (an empty record of this kind), drawing references from ``buffers``."""

    @abstractmethod
    def parse_proposal(self, text: str, task: Task, cfg: TasksConfig) -> Task:
        """Fill ``task`` from the teacher's completion (prefill excluded), read in ``cfg.format``;
        ``task.reason`` says a format failure."""

    @abstractmethod
    def student_prompt(self, task: Task, fmt: str) -> Prompt:
        """The solve prompt in format ``fmt`` (``tasks.format``): what the student is shown of a valid task."""

    @abstractmethod
    def parse_answer(self, text: str, fmt: str) -> str | None:
        """The answer in the student's completion (prefill excluded), or None when none is well-formed (in the
        azr format, also when the completion is not laid out as <think>...</think> <answer>...</answer>)."""

    def read_answer(self, body: str, fmt: str) -> str | None:
        """The answer in the text of a completion's answer (what :meth:`parse_answer` reads once the layout is
        checked), or None when there is none."""
        raise NotImplementedError

    @abstractmethod
    def check_answer(self, task: Task, answer: str) -> Check:
        """The sandbox job that judges ``answer`` to the valid ``task``."""

    @abstractmethod
    def check_json(self, record: dict) -> Check:
        """The same job from a TASK.json record holding :attr:`json_keys`."""

    def validation_inputs(self, task: Task) -> list[str]:
        """The inputs the validate phase runs the proposed program on (one sandbox job each): the one input."""
        return [task.input]

    def judge_validation(self, task: Task, checked: list[tuple[str, Verdict]], rules=None) -> None:
        """Validity and gold output(s) of ``task`` from the sandbox's verdict on each validation input: the
        program ran, deterministically, and its output is the gold one (``rules``: the run's ProgramRules)."""
        (_, verdict), = checked
        task.valid, task.output = verdict.valid, verdict.output or ""
        task.reason = "ok" if verdict.valid else verdict.said()[:300]
