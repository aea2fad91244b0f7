"""The three AZR task kinds, one module each (prompt, parse, check) behind the :class:`TaskKind` interface, the
planted kind (planted.py: a learnable task with a known answer, to show the loop learns), and the Task record.
``KINDS`` maps a kind's name to its :class:`TaskKind`."""

from populora.training.tasks import code_f, code_o
from populora.training.tasks.code_f import CodeF
from populora.training.tasks.code_i import CodeI
from populora.training.tasks.code_o import CodeO
from populora.training.tasks.planted import Planted
from populora.training.tasks.prompts import THINK
from populora.training.tasks.task import Task, TaskKind

KINDS: dict[str, TaskKind] = {k.name: k for k in (CodeO(), CodeI(), CodeF(), Planted())}
PROGRAM_KINDS = tuple(name for name, k in KINDS.items() if k.writes_program)  # code_o, code_i



def proposal_prefill(kind: str, fmt: str) -> str:
    """The assistant prefill a teacher's proposal continues (its logged completion starts after it): azr,
    ``<think>``; direct, the kind's opening fence (code_i proposes as code_o does: a program and an input).

    >>> proposal_prefill("code_i", "direct"), proposal_prefill("code_f", "direct"), proposal_prefill("code_o", "azr")
    ('```python\\ndef f(', '```input\\n', '<think>')
    """
    if fmt == "azr":
        return THINK
    return code_f.PROPOSE_PREFILL if kind == "code_f" else code_o.PROPOSE_PREFILL


__all__ = ["KINDS", "PROGRAM_KINDS", "Task", "TaskKind", "proposal_prefill"]
