"""Curriculum metrics of a task's program: AST depth, cyclomatic complexity (radon), lines, variables; and
problem-space coverage (distinct program structures, names and constants abstracted away).

They measure what teachers write, so they are taken only on programs a teacher wrote in the step (``wrote_program``):
not on a code_f task's program (re-sampled from the buffer, the teacher only writes its inputs) and not on the
seed programs. Two static signs of degenerate teaching are measured here too: ``dead_code`` (the share of
statements that cannot matter: after a return, under ``if False``, ``pass``, assignments never read) and
``ignores_input`` (f never reads its arguments: the output is a constant).

Coverage (distinct structures so far) grows with how much an arm proposes, and distinct structures per 100
programs proposed (``diversity.per_100``) falls with it even for a generator that never changes: neither compares
arms. ``populora.training.measures.diversity`` compares them at equal volume (rarefaction, Chao1).
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
        "dead_code": dead_code_fraction(tree),
        "ignores_input": float(ignores_input(tree)),
    }


def _falsy_constant(test: ast.expr) -> bool | None:
    """True / False if ``test`` is a literal constant that is falsy / truthy, None if it is not a constant."""
    return not test.value if isinstance(test, ast.Constant) else None


def _dead_in(body: list[ast.stmt], out: list[ast.stmt]) -> None:
    """Collect the statements of ``body`` (and nested bodies) that can never matter."""
    ended = False
    for stmt in body:
        if ended:  # after return / raise / break / continue in the same block
            out.extend(n for n in ast.walk(stmt) if isinstance(n, ast.stmt))
            continue
        if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            out.append(stmt)
        elif isinstance(stmt, (ast.If, ast.While)) and _falsy_constant(stmt.test) is not None:
            dead, live = (stmt.body, stmt.orelse) if _falsy_constant(stmt.test) else (stmt.orelse, []  if isinstance(stmt, ast.While) else stmt.body)
            out.extend(n for s in dead for n in ast.walk(s) if isinstance(n, ast.stmt))
            _dead_in(live, out)
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], (ast.stmt, ast.excepthandler)):
                _dead_in([s for h in inner for s in (h.body if isinstance(h, ast.excepthandler) else [h])], out)
        ended = isinstance(stmt, (ast.Return, ast.Raise, ast.Break, ast.Continue))


def dead_code_fraction(tree: ast.AST) -> float:
    """Share of the program's statements that cannot change its output: after a return/raise/break/continue,
    in a branch a constant test never takes, ``pass`` and bare constants, and assignments to names nothing reads
    (whose value calls nothing). Padding raises lines and AST size without making the task harder.

    >>> dead_code_fraction(ast.parse("def f(a):\\n    unused = 3\\n    if False:\\n        a = 1\\n    return a\\n    a += 1"))
    0.6
    >>> dead_code_fraction(ast.parse("def f(a):\\n    b = a * 2\\n    return b"))
    0.0
    """
    stmts = [n for n in ast.walk(tree) if isinstance(n, ast.stmt) and not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    if not stmts:
        return 0.0
    dead: list[ast.stmt] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef)):
            body = node.body[1:] if isinstance(node, ast.FunctionDef) and _docstring(node) else node.body
            _dead_in(body, dead)
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and not any(isinstance(c, ast.Call) for c in ast.walk(node.value)):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if names and len(names) == len(node.targets) and not set(names) & loaded:
                dead.append(node)
    return len({id(d) for d in dead if not isinstance(d, (ast.FunctionDef, ast.ClassDef))}) / len(stmts)


def _docstring(fn: ast.FunctionDef) -> bool:
    first = fn.body[0] if fn.body else None
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def ignores_input(tree: ast.AST) -> bool:
    """Whether the task's function ``f`` (else the last function defined) never reads any of its arguments, so
    its output is the same whatever the input (a constant-output task). False if there is no function.

    >>> ignores_input(ast.parse("def f(a, b):\\n    return 42"))
    True
    >>> ignores_input(ast.parse("def f(a, b):\\n    return b"))
    False
    """
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    if not functions:
        return False
    fn = next((f for f in functions if f.name == "f"), functions[-1])
    args = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    args |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return not args & read


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
