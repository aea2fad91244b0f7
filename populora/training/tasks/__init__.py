"""The three AZR task kinds, one module each (prompt, parse, check) behind the :class:`TaskKind` interface, and
the Task record. ``KINDS`` maps a kind's name to its :class:`TaskKind`."""

from populora.training.tasks.code_f import CodeF
from populora.training.tasks.code_i import CodeI
from populora.training.tasks.code_o import CodeO
from populora.training.tasks.task import Task, TaskKind

KINDS: dict[str, TaskKind] = {k.name: k for k in (CodeO(), CodeI(), CodeF())}
PROGRAM_KINDS = tuple(name for name, k in KINDS.items() if k.writes_program)  # code_o, code_i

__all__ = ["KINDS", "PROGRAM_KINDS", "Task", "TaskKind"]
