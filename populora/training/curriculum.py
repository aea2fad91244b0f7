"""Curriculum metrics of a task's program: AST depth, cyclomatic complexity (radon), lines, variables; and
problem-space coverage (distinct program structures, names and constants abstracted away)."""

from __future__ import annotations

import ast
import hashlib

from radon.complexity import cc_visit


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
