"""The three AZR task kinds, one module each (prompt, parse, check), and the Task record."""

from populora.training.tasks import code_f, code_i, code_o
from populora.training.tasks.task import Task

KINDS = {"code_o": code_o, "code_i": code_i, "code_f": code_f}

__all__ = ["KINDS", "Task", "code_f", "code_i", "code_o"]
