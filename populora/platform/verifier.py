"""Task semantics on top of the sandbox (AZR conventions): validate a proposed task, check code_o / code_i /
code_f answers. Every value is computed and canonicalised inside the sandbox; only canonical strings are
compared here (see ``sandbox_values``), so model-written objects cannot fool a check.

Conventions (docs/sandbox.md has the full list):
- a program must parse and define a top-level function ``f``; helper functions, classes and constants are
  allowed (AZR demands exactly one ``def``; we only need ``f`` to exist).
- an input is the argument list of a call, as AZR writes it: ``"Hello world"`` or ``[1, 2], 3`` meaning
  ``f([1, 2], 3)``. Teacher inputs may be any expression (the teacher already controls the program) and are
  evaluated only in the sandbox; student inputs (code_i answers) must be literals, or a student could run code
  next to the check.
- outputs are canonical text: strict types (``1``, ``1.0`` and ``True`` differ), all NaNs equal,
  order-insensitive dicts and sets. ``Verdict.output`` is that text: showable to a student and parseable back.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from typing import Callable

from populora.platform.sandbox import ExecRequest, ExecResult, Sandbox, get_sandbox
from populora.platform.sandbox_values import canonical_literal, parse_literal

AZR_BANNED = ("logging", "random", "multiprocessing", "pebble", "subprocess", "threading", "datetime", "time",
              "hashlib", "hmac", "bcrypt", "calendar")
# beyond AZR: modules that reach the OS or the interpreter, or are sources of nondeterminism
EXTRA_BANNED = ("os", "sys", "shutil", "socket", "ctypes", "importlib", "gc", "inspect", "signal", "resource",
                "builtins", "io", "pathlib", "tempfile", "pickle", "marshal", "secrets", "uuid", "asyncio",
                "concurrent", "_thread", "code", "codeop", "pty", "fcntl", "mmap", "platform", "sysconfig",
                "faulthandler", "tracemalloc", "atexit", "weakref", "select", "selectors", "urllib", "http")
DEFAULT_BANNED = AZR_BANNED + EXTRA_BANNED
BANNED_CALLS = frozenset({"__import__", "open", "input", "exec", "eval", "compile", "globals", "locals", "vars",
                          "breakpoint", "exit", "quit", "help", "id", "memoryview"})
BANNED_ATTRS = frozenset({"__subclasses__", "__globals__", "__builtins__", "__code__", "__closure__", "__bases__",
                          "__base__", "__mro__", "__getattribute__", "__import__", "__loader__", "__spec__",
                          "__self__", "__func__", "f_globals", "f_locals", "f_back", "gi_frame", "cr_frame",
                          "tb_frame", "__reduce__", "__reduce_ex__"})


@dataclass
class Verdict:
    valid: bool           # the task itself is fine (parses, allowed, runs, deterministic)
    correct: bool | None  # the answer is right; None for validate or when the task is invalid
    status: str           # sandbox status, or "invalid"/"banned"/"parse_error"/"nondeterministic"/"bad_answer"/"wrong"
    reason: str
    output: str | None = None  # validate: canonical text of f(input), the task's gold output

    def to_json(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------- static checks


def _banned_import(node: ast.AST, banned: tuple[str, ...]) -> str | None:
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    for name in names:
        parts = name.split(".")
        if any(".".join(parts[: i + 1]) in banned for i in range(len(parts))):
            return f"imports banned module {name!r}"
    return None


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the program binds itself (parameters, assignments, defs, imports): ``def f(input, time)`` uses
    its own variables, not the builtin or the module."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return bound


def _banned_node(node: ast.AST, banned: tuple[str, ...], bound: set[str]) -> str | None:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return _banned_import(node, banned)
    if isinstance(node, ast.Name) and node.id == "__builtins__":
        return "uses '__builtins__'"
    if isinstance(node, ast.Name) and node.id not in bound and node.id in BANNED_CALLS:
        return f"uses banned builtin {node.id!r}"
    if isinstance(node, ast.Name) and node.id not in bound and node.id in banned:
        return f"uses banned module name {node.id!r}"
    if isinstance(node, ast.Attribute) and node.attr in BANNED_ATTRS:
        return f"uses banned attribute {node.attr!r}"
    return None


def banned_reason(tree: ast.AST, banned: tuple[str, ...] = DEFAULT_BANNED) -> str | None:
    """Why the code is not allowed, or None. Catches imports (also dotted and ``from`` forms), banned builtins
    used in any way (``open``, ``__import__``, ``eval``...), and introspection attributes used to escape.

    >>> banned_reason(ast.parse("import os.path"))
    "imports banned module 'os.path'"
    >>> banned_reason(ast.parse("g = getattr(x, 'y'); h = __import__")) is not None
    True
    """
    bound = _bound_names(tree)
    for node in ast.walk(tree):
        reason = _banned_node(node, banned, bound)
        if reason:
            return reason
    return None


def check_program(program: str, banned: tuple[str, ...] = DEFAULT_BANNED) -> tuple[str, str] | None:
    """(status, reason) if the program cannot be a task, else None."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return "parse_error", f"program does not parse: {e}"
    if not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
        return "invalid", "program defines no top-level function f"
    reason = banned_reason(tree, banned)
    return ("banned", reason) if reason else None


def _call_tree(args: str) -> ast.Call | None:
    try:
        call = ast.parse(f"f({args})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    # "1), g(2" parses as something else than one call of f with these arguments
    ok = isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "f"
    return call if ok and ast.unparse(call.func) == "f" else None


def check_input(args: str, banned: tuple[str, ...] = DEFAULT_BANNED) -> tuple[str, str] | None:
    """A teacher's input: any expression list forming one call ``f(<args>)``, nothing banned."""
    call = _call_tree(args)
    if call is None:
        return "invalid", f"input is not an argument list for f(...): {args[:200]!r}"
    reason = banned_reason(call, banned)
    return ("banned", f"input {reason}") if reason else None


def literal_arguments(args: str) -> bool:
    """True if ``f(<args>)`` passes only literals (what a student's code_i answer may be).

    >>> literal_arguments("[1, 2], 'a', k=float('nan')"), literal_arguments("open('x')")
    (True, False)
    """
    call = _call_tree(args)
    if call is None:
        return False
    values = list(call.args) + [k.value for k in call.keywords]
    if any(isinstance(v, ast.Starred) for v in call.args) or any(k.arg is None for k in call.keywords):
        return False
    try:
        for v in values:
            parse_literal(ast.unparse(v))
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- plans: requests + verdict

Finish = Callable[[list[ExecResult]], Verdict]


def _failure(r: ExecResult) -> str:
    last = r.stderr.strip().splitlines()[-1:] or [f"exit code {r.returncode}"]
    return f"{r.status}: {last[0][:300]}"


def _run_failed(results: list[ExecResult]) -> ExecResult | None:
    return next((r for r in results if r.status != "ok" or r.values is None), None)


class Verifier:
    """Checks tasks and answers in a :class:`Sandbox` (the shared default one unless given)."""

    def __init__(self, sandbox: Sandbox | None = None, banned_modules: tuple[str, ...] = DEFAULT_BANNED,
                 timeout_s: float = 5.0, memory_mb: int = 512):
        self.sandbox = sandbox
        self.banned, self.timeout_s, self.memory_mb = tuple(banned_modules), timeout_s, memory_mb

    def _sb(self) -> Sandbox:
        if self.sandbox is None:
            self.sandbox = get_sandbox()
        return self.sandbox

    def _req(self, program: str, args: str, repeat: int = 1) -> ExecRequest:
        return ExecRequest(program, call=args, repeat=repeat, timeout_s=self.timeout_s, memory_mb=self.memory_mb)

    def _static(self, program: str, inputs: list[str]) -> Verdict | None:
        bad = check_program(program, self.banned)
        for x in inputs:
            bad = bad or check_input(x, self.banned)
        return Verdict(False, None, *bad) if bad else None

    # ---- one plan per task kind: the executions it needs and how their results become a verdict

    def plan_validate(self, program: str, input: str) -> tuple[list[ExecRequest], Finish]:
        static = self._static(program, [input])
        if static:
            return [], lambda _: static

        def finish(results: list[ExecResult]) -> Verdict:
            r = results[0]
            if _run_failed(results):
                return Verdict(False, None, r.status if r.status != "ok" else "invalid", _failure(r))
            if len(set(r.values)) != 1:  # f(input) twice in one process, arguments rebuilt each time
                return Verdict(False, None, "nondeterministic", "f(input) gave different results on repeated calls")
            return Verdict(True, None, "ok", "ok", output=r.value)

        return [self._req(program, input, repeat=2)], finish

    def plan_code_o(self, program: str, input: str, answer: str) -> tuple[list[ExecRequest], Finish]:
        static = self._static(program, [input])
        if static:
            return [], lambda _: static
        try:
            expected = canonical_literal(answer)
        except ValueError as e:
            bad = Verdict(True, False, "bad_answer", f"answer is not a literal: {e}")
            return [], lambda _: bad

        def finish(results: list[ExecResult]) -> Verdict:
            failed = _run_failed(results)  # the program fails on its own input: the task is at fault
            if failed:
                return Verdict(False, None, failed.status if failed.status != "ok" else "invalid", _failure(failed))
            return _compare(results, [expected], "f(input)")

        return [self._req(program, input)], finish

    def plan_code_i(self, program: str, output: str, answer: str) -> tuple[list[ExecRequest], Finish]:
        static = self._static(program, [])
        if static:
            return [], lambda _: static
        try:
            expected = canonical_literal(output)
        except ValueError as e:
            bad = Verdict(False, None, "invalid", f"task output is not a literal: {e}")
            return [], lambda _: bad
        if not literal_arguments(answer):
            return [], lambda _: Verdict(True, False, "bad_answer", "answer is not a literal argument list")
        return [self._req(program, answer)], lambda rs: _compare(rs, [expected], "f(answer)")

    def plan_code_f(self, program: str, inputs: list[str], answer: str,
                    outputs: list[str] | None = None) -> tuple[list[ExecRequest], Finish]:
        static = self._static(program, inputs)
        if static or not inputs:
            return [], lambda _: static or Verdict(False, None, "invalid", "code_f task without inputs")
        bad = check_program(answer, self.banned)
        if bad:
            return [], lambda _: Verdict(True, False, bad[0], f"answer: {bad[1]}")
        n = len(inputs)
        refs = [] if outputs is not None else [self._req(program, x) for x in inputs]

        def finish(results: list[ExecResult]) -> Verdict:
            if outputs is None:
                failed = _run_failed(results[:n])
                if failed:
                    return Verdict(False, None, failed.status if failed.status != "ok" else "invalid",
                                   "reference program: " + _failure(failed))
            expected = outputs if outputs is not None else [r.value for r in results[:n]]
            return _compare(results[-n:], expected, "candidate f(input)")

        return refs + [self._req(answer, x) for x in inputs], finish

    def plan(self, task: dict) -> tuple[list[ExecRequest], Finish]:
        """The plan for one TASK.json-style dict; ``KeyError``/``ValueError`` name what is missing or wrong."""
        kind = task.get("type")
        if kind == "validate":
            return self.plan_validate(task["program"], task["input"])
        if kind == "code_o":
            return self.plan_code_o(task["program"], task["input"], task["answer"])
        if kind == "code_i":
            return self.plan_code_i(task["program"], task["output"], task["answer"])
        if kind == "code_f":
            return self.plan_code_f(task["program"], list(task["inputs"]), task["answer"], task.get("outputs"))
        raise ValueError(f"unknown task type {kind!r}: expected validate, code_o, code_i or code_f")

    # ---- public API

    def validate(self, program: str, input: str) -> Verdict:
        return self.check({"type": "validate", "program": program, "input": input})

    def check_code_o(self, program: str, input: str, answer: str) -> Verdict:
        return self.check({"type": "code_o", "program": program, "input": input, "answer": answer})

    def check_code_i(self, program: str, output: str, answer: str) -> Verdict:
        return self.check({"type": "code_i", "program": program, "output": output, "answer": answer})

    def check_code_f(self, program: str, inputs: list[str], answer: str, outputs: list[str] | None = None) -> Verdict:
        """``outputs`` (canonical, e.g. from validate) skips re-running the reference program."""
        task = {"type": "code_f", "program": program, "inputs": inputs, "answer": answer, "outputs": outputs}
        return self.check(task)

    def check(self, task: dict) -> Verdict:
        return self.check_many([task])[0]

    def check_many(self, tasks: list[dict]) -> list[Verdict]:
        """All executions of all tasks go to the sandbox pool in one batch; verdicts in task order."""
        plans = [self.plan(t) for t in tasks]
        flat = [req for reqs, _ in plans for req in reqs]
        results = self._sb().execute_many(flat) if flat else []
        verdicts, i = [], 0
        for reqs, finish in plans:
            verdicts.append(finish(results[i:i + len(reqs)]))
            i += len(reqs)
        return verdicts


def _compare(results: list[ExecResult], expected: list[str], what: str) -> Verdict:
    """Correct iff every run succeeded and its canonical value equals the expected canonical text."""
    for r, want in zip(results, expected):
        if r.status != "ok" or r.value is None:
            return Verdict(True, False, r.status if r.status != "ok" else "error", f"{what}: {_failure(r)}")
        if r.value != want:
            return Verdict(True, False, "wrong", f"{what} = {r.value[:200]}, expected {want[:200]}")
    return Verdict(True, True, "ok", "ok")
