"""code_o (deduction): the student sees program + input and predicts the output.

Also home of the program + input proposal that code_o and code_i share (code_i asks for it in its own words).
"""

from __future__ import annotations

from populora.platform.sandbox.values import canonical_literal
from populora.platform.verifier import Check, Verdict
from populora.training.tasks.parsing import (MAX_ANSWER_CHARS, call_arguments, first_block, first_line_or_block,
                                              last_line_or_block, parseable_program)
from populora.training.tasks.prompts import LAYOUT, azr_prompt, chat, fenced, rules, unwrap
from populora.training.tasks.task import Prompt, Task, TaskKind

KIND = "code_o"
PROPOSE_PREFILL = "```python\ndef f("
SOLVE_PREFILL = "```output\n"
# direct format: one short ask per kind (a tiny model copies the few-shot turns more than it reads them)
PROPOSE_ASK = (
    "Write a new Python function named f, unlike the ones before, and one input for it, so that working out what "
    "f returns on it takes several careful steps. Put the function in a ```python block and the arguments of the "
    "call in an ```input block. No imports, no randomness, no printing."
)
INPUT_RULE = ("The input is the argument list of one call f(...): separate arguments with commas and quote strings; "
              "do not write the input into the program.")
PROPOSAL_LAYOUT = (f"{LAYOUT} Inside <answer>, write the program and the input as two blocks:\n"
                   "```python\ndef f(...):\n    ...\n    return ...\n```\n```input\narg1, arg2, ...\n```")

DEDUCTION = (
    "## Task: write a deduction task (code_o)\n"
    "Write a new Python function `f` and one input for it. A solver will be shown your function and your input and "
    "must work out the value f returns, by reasoning alone, without running code. Your reward is highest when a "
    "strong solver sometimes fails: make the output take many steps of careful reasoning to work out (state "
    "carried through loops, nested data structures, recursion, several chained transformations), while it stays "
    "fully determined by the code.\n"
    "The task must be new: it must compute something different from every reference task below, not the same "
    "logic with other names or values.\n"
)


def references_text(references: list[Task]) -> str:
    """The K reference tasks of a propose prompt, each program with its input and the output it gives."""
    if not references:
        return ""
    parts = [f"<reference {i}>\n{fenced('python', t.program)}\n{fenced('input', t.input)}\n{fenced('output', t.output)}\n"
             f"</reference {i}>" for i, t in enumerate(references, 1)]
    return "### Reference tasks (yours must differ from every one)\n" + "\n".join(parts) + "\n\n"


def propose_question(intro: str, references: list[Task]) -> str:
    return f"{intro}\n{rules(INPUT_RULE)}\n{references_text(references)}### Answer layout\n{PROPOSAL_LAYOUT}"


def propose_messages(references: list[Task], ask: str = PROPOSE_ASK, fmt: str = "direct", intro: str = DEDUCTION) -> Prompt:
    if fmt == "azr":
        return azr_prompt(propose_question(intro, references))
    shots = [(ask, fenced("python", t.program) + "\n" + fenced("input", t.input)) for t in references]
    return chat(shots, ask), PROPOSE_PREFILL


def read_proposal(text: str | None, task: Task) -> Task:
    """Fill ``task.program`` / ``task.input`` from the fenced blocks of ``text``; reason set on failure."""
    if text is None:
        task.reason = "format: no <think>...</think> <answer>...</answer> layout"
        return task
    code = first_block(text, "python", "py", "")
    program = parseable_program(code) if code else None
    after = text.split("```input", 1)[1] if "```input" in text else ""
    arguments = call_arguments(first_line_or_block("```input" + after, "input")) if after else None
    task.program, task.input = program or (code or ""), arguments or ""
    if program is None:
        task.reason = "format: no parseable program defining f"
    elif arguments is None:
        task.reason = "format: no ```input block with valid arguments"
    return task


def parse_proposal(text: str, task: Task, fmt: str = "direct") -> Task:
    """Fill ``task`` from a teacher's completion (the direct prefill is prepended, azr reads the answer block)."""
    return read_proposal(unwrap(text, fmt, PROPOSE_PREFILL), task)


# Worked examples shown before the question (direct format): (program, input, output). The first is a copy, so
# even a tiny model has a strategy that is right on the simplest tasks; the second shows a real transformation.
DEMOS = [("def f(a):\n    return a", "[1, 2]", "[1, 2]"), ("def f(s):\n    return s + '!'", "'hi'", "'hi!'")]


def solve_question(task: Task) -> str:
    return (
        "## Task: deduce the output\n"
        "Work out the value the Python function f below returns on the given input, step by step; you cannot run "
        f"code.\n{fenced('python', task.program)}\n{fenced('input', task.input)}\n"
        f"{LAYOUT} Inside <answer>, give only the value, as a Python literal (quote strings, a tuple for several "
        "values), in an output block:\n```output\nvalue\n```"
    )


def solve_messages(task: Task, fmt: str = "direct") -> Prompt:
    if fmt == "azr":
        return azr_prompt(solve_question(task))

    def ask(program: str, arguments: str) -> str:
        return f"{fenced('python', program)}\nWhat does f({arguments}) return? Reply with the value in an ```output block."

    shots = [(ask(program, x), fenced("output", y)) for program, x, y in DEMOS]
    return chat(shots, ask(task.program, task.input)), SOLVE_PREFILL


def parse_answer(text: str, fmt: str = "direct") -> str | None:
    """The output block's text (AZR: any non-empty answer is well-formed; what it evaluates to is the check's
    business, so ``'ab' * 2`` is an answer and ``f(`` a wrong one, not a format error)."""
    body = unwrap(text, fmt, SOLVE_PREFILL)
    if body is None:
        return None
    answer = last_line_or_block(body, "output")
    return answer if answer and len(answer) <= MAX_ANSWER_CHARS else None


# The answer is evaluated by itself, as the lone argument list of this identity (``1, 2`` is a tuple, as
# ``eval`` reads it), without the task's program in scope: AZR evaluates it next to f, where ``f(3)`` would be a
# right answer to every task on input 3.
IDENTITY = "def f(*value):\n    return value[0] if len(value) == 1 else value"


def check(program: str, input: str, answer: str, gold: str | None = None, mode: str = "azr") -> Check:
    """The answer's value must equal f(input) (``gold`` when known, else the program is run on its input; if f
    fails on its own input, the task is at fault). ``mode`` (``tasks.answer_check``): azr, any expression
    evaluated in the sandbox, Python equality (AZR's ``eval(gold) == eval(answer)``); strict, a literal, equal
    canonical text (strict types)."""
    if mode == "strict":
        try:
            expected, refusal = [canonical_literal(answer)], None
        except ValueError as e:
            expected, refusal = [], Verdict(True, False, "bad_answer", f"answer is not a literal: {e}")
        return Check(program, [input], [input], expected, refusal=refusal)
    expected = [gold] if gold is not None else None
    return Check(program, [input], [answer], expected, candidate=IDENTITY, what="the answer",
                 ref_calls=[input], expressions=True, equality="python")


class CodeO(TaskKind):
    name, json_keys = KIND, ("program", "input", "answer")
    ask, intro = PROPOSE_ASK, DEDUCTION  # code_i swaps in its own words for the same program + input proposal

    def teacher_prompt(self, task, buffers, rng, cfg) -> Prompt:
        return propose_messages(buffers.sample(self.name, cfg.references, rng), self.ask, cfg.format, self.intro)

    def parse_proposal(self, text, task, cfg) -> Task:
        return parse_proposal(text, task, cfg.format)

    def student_prompt(self, task, fmt) -> Prompt:
        return solve_messages(task, fmt)

    def parse_answer(self, text, fmt) -> str | None:
        return parse_answer(text, fmt)

    def check_answer(self, task, answer, mode="azr") -> Check:
        return check(task.program, task.input, answer, task.output or None, mode)

    def check_json(self, record, mode="azr") -> Check:
        return check(record["program"], record["input"], record["answer"], None, mode)
