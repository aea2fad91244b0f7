"""Curriculum metrics of a task's program: AST depth, cyclomatic complexity (radon), lines, variables; and
problem-space coverage (distinct program structures, names and constants abstracted away).

They measure what teachers write, so they are taken only on programs a teacher wrote in the step (``wrote_program``):
not on a code_f task's program (re-sampled from the buffer, the teacher only writes its inputs) and not on the
seed programs. Coverage is kept two ways: cumulative (distinct structures so far) and per 100 programs proposed,
the one to compare arms by, since raw coverage grows with how much an arm proposes.
"""

from __future__ import annotations

import ast
import hashlib
from typing import TYPE_CHECKING

from radon.complexity import cc_visit

from populora.training.tasks import KINDS

if TYPE_CHECKING:
    from populora.training.tasks import Task

SEED_TEACHER = "seed"                  # Task.teacher of the seed buffer's tasks


def ast_depth(node: ast.AST) -> int:
    """Longest root-to-leaf path of the AST (load/store context markers not counted).

    >>> ast_depth(ast.parse("x = 1"))
    3
    """
    children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr_context)]
    return 1 + (max(ast_depth(c) for c in children) if children else 0)


def variable_count(tree: ast.AST) -> int:
    """Distinct names bound in the program: arguments, assignment targets, loop and comprehension variables."""
    names = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return len(names)


def cyclomatic_complexity(program: str) -> float:
    """Total radon cyclomatic complexity of the program's functions and classes (1 for straight-line code)."""
    blocks = cc_visit(program)
    return float(sum(b.complexity for b in blocks)) if blocks else 1.0


def program_metrics(program: str) -> dict[str, float]:
    """AST depth, cyclomatic complexity, lines of code and variable count of a program.

    >>> program_metrics("def f(a):\\n    if a:\\n        return 1\\n    return 2")["cyclomatic"]
    2.0
    """
    tree = ast.parse(program)
    return {
        "ast_depth": float(ast_depth(tree)),
        "cyclomatic": cyclomatic_complexity(program),
        "loc": float(sum(1 for line in program.splitlines() if line.strip() and not line.strip().startswith("#"))),
        "variables": float(variable_count(tree)),
    }


class _Abstract(ast.NodeTransformer):
    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id="_", ctx=node.ctx), node)

    def visit_arg(self, node):
        node.arg = "_"
        return node

    def visit_Constant(self, node):
        return ast.copy_location(ast.Constant(value=type(node.value).__name__), node)

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.name = "_"
        return node


def structure_key(program: str) -> str:
    """Hash of the program's AST with identifiers and constants abstracted: two programs differing only in
    names or literal values share a key.

    >>> structure_key("def f(a):\\n    return a + 1") == structure_key("def f(x):\\n    return x + 7")
    True
    """
    tree = _Abstract().visit(ast.parse(program))
    return hashlib.sha1(ast.dump(tree).encode()).hexdigest()[:16]


def wrote_program(task: "Task") -> bool:
    """Whether the task's program is the teacher's own work of this step (valid or not).

    >>> from populora.training.tasks import Task
    >>> [wrote_program(Task("a", k, "def f(a): return a", teacher=t)) for k, t in
    ...  [("code_o", "T0"), ("code_i", "T1"), ("code_f", "T0"), ("code_o", "seed")]]
    [True, True, False, False]
    """
    return KINDS[task.kind].writes_program and task.teacher != SEED_TEACHER


def measure(program: str, seen_structures: set[str]) -> dict[str, float]:
    """``program_metrics`` plus ``novel_structure`` (1.0 if no earlier program had its structure); adds the
    program's structure to ``seen_structures``.

    >>> seen = set()
    >>> [measure(p, seen)["novel_structure"] for p in ("def f(a): return a", "def f(b): return b")]
    [1.0, 0.0]
    """
    metrics = program_metrics(program)
    key = structure_key(program)
    metrics["novel_structure"] = float(key not in seen_structures)
    seen_structures.add(key)
    return metrics


def coverage_per_100(distinct: int, proposed: int) -> float | None:
    """Distinct structures per 100 programs proposed (None before any proposal).

    >>> coverage_per_100(12, 40)
    30.0
    >>> coverage_per_100(0, 0) is None
    True
    """
    return 100.0 * distinct / proposed if proposed else None
