"""Generic checking on top of the sandbox (AZR conventions): static bans, running ``f(args)`` to canonical values,
determinism. Which runs a task kind needs and what their values must be is the kind's business
(``populora.training.tasks``): it describes an answer check as a :class:`Check`, and this module runs it. Every
value is computed and canonicalised inside the sandbox; only canonical strings are compared here (see
``sandbox.values``), so model-written objects cannot fool a check.

Conventions (docs/sandbox.md has the full list):
- a program must parse and define a top-level function ``f``; helper functions, classes and constants are
  allowed (AZR demands exactly one ``def``; we only need ``f`` to exist).
- an input is the argument list of a call, as AZR writes it: ``"Hello world"`` or ``[1, 2], 3`` meaning
  ``f([1, 2], 3)``. Teacher inputs may be any expression (the teacher already controls the program) and are
  evaluated only in the sandbox; any other argument list (a student's, e.g. a code_i answer) must be literals,
  or a student could run code next to the check.
- outputs are canonical text: strict types (``1``, ``1.0`` and ``True`` differ), all NaNs equal,
  order-insensitive dicts and sets. ``Verdict.output`` is that text: showable to a student and parseable back.
- an answer check compares either that text (``Check.equality = "canonical"``) or, as AZR's executor does
  (``gold == f(answer)``, ``eval(gold) == eval(answer)``), the values by Python equality (``"python"``:
  ``2 == 2.0 == True``). The values are rebuilt in this process from their canonical text by the literal grammar,
  so ``==`` only ever runs on exact builtin types a model cannot have overridden.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, replace
from typing import Callable

from populora.platform.sandbox import ExecRequest, ExecResult, Sandbox, get_sandbox
from populora.platform.sandbox.values import parse_literal

AZR_BANNED = ("logging", "random", "multiprocessing", "pebble", "subprocess", "threading", "datetime", "time",
              "hashlib", "hmac", "bcrypt", "calendar")
# an object's default repr, '<function f at 0x7f...>': a value that holds one is another in every process
ADDRESS = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")
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

    def said(self) -> str:
        """"status: reason", the status said once (a failed run's reason already starts with its status).

        >>> Verdict(False, None, "error", "error: TypeError: x").said(), Verdict(True, False, "wrong", "f(1) = 2").said()
        ('error: TypeError: x', 'wrong: f(1) = 2')
        """
        return self.reason if self.reason.startswith(f"{self.status}: ") else f"{self.status}: {self.reason}"


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


@dataclass(frozen=True)
class ProgramRules:
    """The static rules a proposed program must pass beyond parsing and defining ``f``: AZR's where it has one,
    each of ours a named switch (``tasks.*`` in the training config; the paper presets turn ours off)."""
    single_function: bool = False        # AZR reject_multiple_functions: more than one ``def`` anywhere is invalid
    extra_bans: bool = True              # ours: EXTRA_BANNED modules, banned builtins/attributes, any use; AZR: imports of AZR_BANNED only
    error_keywords: tuple[str, ...] = ()  # AZR banned_keywords_for_errors_and_exceptions: raise / assert / try / except
    code_f_distinct_outputs: bool = True  # ours (the code_f kind reads it): not every input may give the same output


AZR_RULES = ProgramRules(single_function=True, extra_bans=False, code_f_distinct_outputs=False)
_ERROR_NODES = {"raise": ast.Raise, "assert": ast.Assert, "try": ast.Try, "except": ast.ExceptHandler}
_DEF_LINE = re.compile(r"^\s*def\s+(\w+)\s*\(", re.M)  # AZR counts defs by this regex, nested and methods included
_INPUT_CALL = re.compile(r"input\(")


def azr_banned_import(tree: ast.AST) -> str | None:
    """AZR's ban: an import whose dotted name has a component in AZR_BANNED (uses outside imports pass)."""
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [a.name for a in node.names]
        for name in names:
            if any(part in AZR_BANNED for part in name.split(".")):
                return f"imports banned module {name!r}"
    return None


def azr_input_call(code: str) -> str | None:
    """AZR's executor refuses to run any code containing ``input(`` (python_executor.py:50-53), comments and
    strings included: a program or teacher input containing it is never a task, an answer program never right."""
    return "contains 'input(' (AZR's executor runs no such code)" if _INPUT_CALL.search(code) else None


def check_program(program: str, banned: tuple[str, ...] = DEFAULT_BANNED,
                  rules: ProgramRules = ProgramRules(), answer: bool = False) -> tuple[str, str] | None:
    """(status, reason) if the program cannot be a task, else None.

    >>> check_program("def f(x):\\n    def g(y):\\n        return y\\n    return g(x)", rules=AZR_RULES)
    ('invalid', 'program defines 2 functions (f, g); only one is allowed')
    """
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return "parse_error", f"program does not parse: {e}"
    if not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
        return "invalid", "program defines no top-level function f"
    defs = _DEF_LINE.findall(program)
    if rules.single_function and len(defs) > 1:
        return "invalid", f"program defines {len(defs)} functions ({', '.join(defs[:4])}); only one is allowed"
    for node in ast.walk(tree):
        word = next((w for w in rules.error_keywords if isinstance(node, _ERROR_NODES.get(w, ()))), None)
        if word:
            return "banned", f"uses the banned keyword {word!r}"
    if rules.extra_bans:
        reason = banned_reason(tree, banned)
    else:  # AZR bans imports in task programs only (reward_managers.py:223 vs :465, :493: none for answers)
        reason = azr_input_call(program) or (None if answer else azr_banned_import(tree))
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


def shape_of_input(args: str) -> tuple[str, str] | None:
    """Only that ``f(<args>)`` is one call (AZR's template pastes the input into it)."""
    if _call_tree(args) is None:
        return "invalid", f"input is not an argument list for f(...): {args[:200]!r}"
    return None


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


# ------------------------------------------------------------------------------ jobs: plain data, any process


@dataclass
class Validate:
    """Is ``program`` a task on ``input``: static checks, then f(input) twice in one process, same value both times."""
    program: str
    input: str
    rules: ProgramRules = ProgramRules()


@dataclass
class Check:
    """One answer check, as plain data (it crosses to Ray actors). A task kind builds it; :class:`Verifier` runs f
    of ``candidate`` (else of ``program``) on every argument list of ``calls`` and compares the canonical values
    with ``expected``. A failing run is the task's fault when the task's own program runs on its own inputs
    (then the verdict is invalid), the answer's otherwise (a wrong answer)."""
    program: str                       # the task's program; statically checked with ``inputs``
    inputs: list[str]                  # the task's own argument lists (teacher-written: any expression)
    calls: list[str]                   # argument lists f is run on; any not among ``inputs`` must be literals
    expected: list[str] | None = None  # canonical f(call) values; None: ``program``'s own (a reference run)
    candidate: str | None = None       # an answer's program, run instead of ``program`` (statically checked too)
    refusal: Verdict | None = None     # the kind's verdict before anything runs (e.g. the answer is no literal)
    what: str = "f(input)"             # how a wrong value is named in the verdict's reason
    ref_calls: list[str] | None = None  # argument lists the reference run uses when ``expected`` is None (default: calls)
    expressions: bool = False          # answer argument lists may be any expression (AZR), evaluated in the sandbox
    equality: str = "canonical"        # "canonical": strict canonical text; "python": Python == of the values (AZR)
    rules: ProgramRules = ProgramRules()  # the run's program rules (a task valid under them is checked under them)


Job = Validate | Check

# ------------------------------------------------------------------------------- plans: requests + verdict

Finish = Callable[[list[ExecResult]], Verdict]


def _failure(r: ExecResult) -> str:
    last = r.stderr.strip().splitlines()[-1:] or [f"exit code {r.returncode}"]
    return f"{r.status}: {last[0][:300]}"


def _run_failed(results: list[ExecResult]) -> ExecResult | None:
    return next((r for r in results if r.status != "ok" or r.values is None), None)


def _invalid(r: ExecResult, prefix: str = "") -> Verdict:
    """The task's own program failed on the task's own input: the task is at fault."""
    return Verdict(False, None, r.status if r.status != "ok" else "invalid", prefix + _failure(r))


def _now(verdict: Verdict) -> tuple[list[ExecRequest], Finish]:
    return [], lambda _: verdict


class Verifier:
    """Runs :class:`Validate` and :class:`Check` jobs in a :class:`Sandbox` (the shared default one unless given)."""

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

    def _static(self, program: str, inputs: list[str], rules: ProgramRules = ProgramRules()) -> Verdict | None:
        bad = check_program(program, self.banned, rules)
        for x in inputs:  # a teacher's input; AZR bans nothing in it but input(, so without our bans only its shape
            if rules.extra_bans:
                bad = bad or check_input(x, self.banned)
            else:
                bad = bad or shape_of_input(x) or (("banned", f"input {azr_input_call(x)}") if azr_input_call(x) else None)
        return Verdict(False, None, *bad) if bad else None

    # ---- the executions a job needs and how their results become a verdict

    def plan_validate(self, job: Validate) -> tuple[list[ExecRequest], Finish]:
        static = self._static(job.program, [job.input], job.rules)
        if static:
            return _now(static)

        def finish(results: list[ExecResult]) -> Verdict:
            r = results[0]
            if _run_failed(results):
                return _invalid(r)
            if len(set(r.values)) != 1:  # f(input) twice in one process, arguments rebuilt each time
                return Verdict(False, None, "nondeterministic", "f(input) gave different results on repeated calls")
            if ADDRESS.search(r.value or ""):  # equal twice in one process, but no other process prints it again
                return Verdict(False, None, "nondeterministic", "f(input)'s value holds an object's memory address "
                               "(as str(f) gives: '<function f at 0x...>'), which no answer run elsewhere can match")
            return Verdict(True, None, "ok", "ok", output=r.value)

        return [self._req(job.program, job.input, repeat=2)], finish

    def plan_check(self, job: Check) -> tuple[list[ExecRequest], Finish]:
        static = self._static(job.program, job.inputs, job.rules)
        if static or job.refusal:
            return _now(static or job.refusal)
        if not job.calls:  # nothing would run, and nothing run is nothing proven
            return _now(Verdict(False, None, "invalid", "task without inputs to check"))
        answer_bad = self._answer_calls(job)
        if answer_bad:
            return _now(answer_bad)
        # an answer's program runs alone in its own process: the run's rules, but any number of functions (AZR)
        answer_rules = replace(job.rules, single_function=False)
        bad = check_program(job.candidate, self.banned, answer_rules, answer=True) if job.candidate is not None else None
        if bad:
            return _now(Verdict(True, False, bad[0], f"answer: {bad[1]}"))
        ref_calls = job.ref_calls if job.ref_calls is not None else job.calls
        n = len(ref_calls)
        refs = [self._req(job.program, x) for x in ref_calls] if job.expected is None else []
        runs = [self._answer_req(job.program, x) if job.expressions and job.candidate is None and x not in job.inputs
                else self._req(job.candidate or job.program, x) for x in job.calls]
        task_runs = job.candidate is None and job.calls == job.inputs

        def finish(results: list[ExecResult]) -> Verdict:
            failed = _run_failed(results[:len(refs)] or (results if task_runs else []))
            if failed:
                return _invalid(failed, "reference program: " if refs else "")
            expected = job.expected if job.expected is not None else [r.value for r in results[:n]]
            return _compare(results[len(refs):], expected, job.what, job.equality == "python")

        return refs + runs, finish

    def _answer_req(self, program: str, args: str) -> ExecRequest:
        """``f(<args>)`` with a student's argument expressions evaluated apart from the program (a fresh
        namespace, so they cannot rebind what f uses, e.g. ``(len := ...)``) and required to be plain builtin
        values (an object with its own ``__add__`` could forge f's result)."""
        return ExecRequest(program + _ISOLATED_ARGS.format(args=repr(f"(lambda *a, **k: (a, k))({args})")),
                           call="*_populora_args[0], **_populora_args[1]", timeout_s=self.timeout_s, memory_mb=self.memory_mb)

    def _answer_calls(self, job: Check) -> Verdict | None:
        """A wrong verdict for an answer argument list that may not run: not literal (strict), or (expressions, as
        AZR lets any expression through) not one call of f or using something banned. Never a format error."""
        for x in (c for c in job.calls if c not in job.inputs):
            if not job.expressions and not literal_arguments(x):
                return Verdict(True, False, "bad_answer", "answer is not a literal argument list")
            bad = check_input(x, self.banned) if job.expressions else None
            if bad:
                return Verdict(True, False, bad[0], f"answer: {bad[1]}"[:300])
        return None

    def plan(self, job: Job) -> tuple[list[ExecRequest], Finish]:
        if isinstance(job, Validate):
            return self.plan_validate(job)
        if isinstance(job, Check):
            return self.plan_check(job)
        raise TypeError(f"not a verifier job: {type(job).__name__} (expected Validate or Check)")

    # ---- public API

    def validate(self, program: str, input: str) -> Verdict:
        return self.check(Validate(program, input))

    def check(self, job: Job) -> Verdict:
        return self.check_many([job])[0]

    def check_many(self, jobs: list[Job]) -> list[Verdict]:
        """All executions of all jobs go to the sandbox pool in one batch; verdicts in job order."""
        plans = [self.plan(j) for j in jobs]
        flat = [req for reqs, _ in plans for req in reqs]
        results = self._sb().execute_many(flat) if flat else []
        verdicts, i = [], 0
        for reqs, finish in plans:
            verdicts.append(finish(results[i:i + len(reqs)]))
            i += len(reqs)
        return verdicts


# Appended to the task's program for a student's code_i argument expressions (``Verifier._answer_req``).
_ISOLATED_ARGS = """

def _populora_plain(v, depth=0):
    t = type(v)
    if depth > 100:
        return False
    if t in (list, tuple, set, frozenset):
        return all(_populora_plain(x, depth + 1) for x in v)
    if t is dict:
        return all(_populora_plain(x, depth + 1) and _populora_plain(y, depth + 1) for x, y in v.items())
    return v is None or t in (bool, int, float, complex, str, bytes)


_populora_args = eval({args}, {{"__builtins__": __builtins__}})
if not _populora_plain(_populora_args):
    raise TypeError("the answer's arguments are not plain builtin values")
"""


def equal_values(got: str, want: str, python: bool) -> bool:
    """Canonical texts equal, or (``python``) the values they spell equal by Python ``==`` (AZR's check).

    >>> equal_values("2.0", "2", True), equal_values("2.0", "2", False), equal_values("float('nan')", "float('nan')", True)
    (True, False, False)
    """
    if not python:
        return got == want
    try:
        return bool(parse_literal(got) == parse_literal(want))
    except (ValueError, RecursionError, MemoryError):
        return False


def _compare(results: list[ExecResult], expected: list[str], what: str, python: bool = False) -> Verdict:
    """Correct iff every run succeeded and its value equals the expected one (canonical text, or Python ==)."""
    for r, want in zip(results, expected):
        if r.status != "ok" or r.value is None:
            return Verdict(True, False, r.status if r.status != "ok" else "error", f"{what}: {_failure(r)}")
        if not equal_values(r.value, want, python):
            return Verdict(True, False, "wrong", f"{what} = {r.value[:200]}, expected {want[:200]}")
    return Verdict(True, True, "ok", "ok")
