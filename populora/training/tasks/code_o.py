"""code_o (deduction): the student sees program + input and predicts the output.

Also home of the program + input proposal that code_o and code_i share (code_i asks for it in its own words).
"""

from __future__ import annotations

import re

from populora.platform.sandbox.values import canonical_literal
from populora.platform.sandbox.verifier import Check, Verdict
from populora.training.tasks.parsing import (MAX_ANSWER_CHARS, azr_blocks, azr_code_blocks, azr_line, azr_value,
                                              call_arguments, first_block, first_line_or_block, last_line_or_block,
                                              parseable_program)
from populora.platform.sandbox.verifier import AZR_BANNED
from populora.training.tasks.prompts import azr_prompt, banned_text, chat, fenced, program_requirements, unwrap
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
# azr format: AZR's proposer prompt for code_o / code_i (data_construction/prompts.py), point by point in our
# words. The two kinds differ in what the test subject is given and must find; everything else is shared.
GOALS = {
    "code_o": ("deduction", "work out the output from the input",
               "the input is handed to a test subject, who has to deduce the output f produces on it",
               "how hard it is to predict the output from your code and your input"),
    "code_i": ("abduction", "work out an input from an output",
               "the output f produces on it is handed to a test subject, who has to come up with any input that "
               "makes f produce that same output",
               "how hard it is to come up with your input from your code and the output it deterministically gives"),
}
EXAMPLE_PROGRAM = "def f(words: list, scores: dict):\n    # the logic goes here\n    return result"
EXAMPLE_INPUT = "['red', 'blue'], {'red': 3, 'blue': 5}"
EXAMPLE_OUTPUT = "{'red': 3, 'blue': 5}"


def propose_question(kind: str, references: list[Task], banned: str, seconds: float) -> str:
    name, aim, subject, difficulty = GOALS[kind]
    return (
        f"## Task: write a new Python program with one matching input ({name})\n"
        "Custom classes are allowed; define them at the top of the program.\n"
        "Taking the reference programs below as examples, design a new, unique Python program that takes deep "
        f"algorithmic reasoning to {aim}. Give the program and one test input for it: the input is plugged into "
        f"the program to produce an output, and {subject}. Think of it as an IQ test.\n\n"
        "### Program requirements\n"
        f"{program_requirements(seconds)}"
        "- Make the program track state across several data transformations, so that the task takes long, "
        "multi-step reasoning.\n\n"
        "### Input requirements\n"
        "- Give exactly one test input for f.\n"
        "- Separate several arguments with commas.\n"
        "- Put quotes around string arguments.\n\n"
        "### Layout\n"
        "- The program goes in a block like this:\n```python\ndef f(...):\n    # your code\n    return ...\n```\n"
        "- The input goes in a block like this:\n```input\narg1, arg2, ...\n```\n\n"
        f"### Example of the layout\n{fenced('python', EXAMPLE_PROGRAM)}\n\n{fenced('input', EXAMPLE_INPUT)}\n\n"
        "### What makes a good submission\n"
        "- It executes: your code runs on your input.\n"
        f"- Difficulty: {difficulty}. Aim for algorithmic reasoning or intricate logic, e.g. your own data structure "
        "classes (trees, heaps, stacks, queues, graphs, ...) and operations on them, or involved control flow "
        "(dynamic programming, recursion, divide and conquer, greedy search, backtracking, ...).\n"
        "- Creativity: the code is clearly different from the reference programs.\n"
        f"- Restricted words: none of these may appear anywhere, in any form, comments included: {banned}\n\n"
        "Start with a clear plan: how your program will be challenging, how it differs from the references, what "
        "makes it creative. Then write the program and its input.\n\n"
        f"### Reference programs\n{references_text(references)}"
    )


def references_text(references: list[Task]) -> str:
    """The K reference tasks of a propose prompt, each program with its input and the output it gives."""
    parts = [f"<reference_{i}>\n{fenced('python', t.program)}\n{fenced('input', t.input)}\n{fenced('output', t.output)}\n"
             f"</reference_{i}>" for i, t in enumerate(references)]
    return "\n".join(parts) + "\n"


def propose_messages(references: list[Task], ask: str = PROPOSE_ASK, fmt: str = "direct", kind: str = KIND,
                     banned: str = "", seconds: float = 10.0) -> Prompt:
    if fmt == "azr":
        return azr_prompt(propose_question(kind, references, banned, seconds))
    shots = [(ask, fenced("python", t.program) + "\n" + fenced("input", t.input)) for t in references]
    return chat(shots, ask), PROPOSE_PREFILL


def read_proposal(text: str | None, task: Task, rename: bool = False) -> Task:
    """Fill ``task.program`` / ``task.input`` from the fenced blocks of ``text``; reason set on failure.
    ``rename`` (``tasks.rename_to_f``, AZR): the first function defined is the entry function, renamed to ``f``."""
    if text is None:
        task.reason = "format: no <think>...</think> <answer>...</answer> layout"
        return task
    code = first_block(text, "python", "py", "")
    code = rename_first_function(code) if code and rename else code
    program = parseable_program(code) if code else None
    after = text.split("```input", 1)[1] if "```input" in text else ""
    arguments = call_arguments(first_line_or_block("```input" + after, "input")) if after else None
    task.program, task.input = program or (code or ""), arguments or ""
    if program is None:
        task.reason = "format: no parseable program defining f"
    elif arguments is None:
        task.reason = "format: no ```input block with valid arguments"
    return task


def read_azr_proposal(text: str | None, task: Task, rename: bool = False) -> Task:
    """AZR's reading of a program + input proposal (code_reward.py:291-394): the first fenced block read as code
    (any label but ``python`` stays in it), the first ```input block or else a ``# Input:`` line, both taken as
    written (an input ``f(5)`` is the call ``f(f(5))``, an empty one ``f()``); no ``def`` is a format error. What
    the program and input do is the sandbox's business."""
    if text is None:
        task.reason = "format: no <think>...</think> <answer>...</answer> layout"
        return task
    codes, inputs = azr_code_blocks(text), azr_blocks(text, "input")
    arguments = inputs[0] if inputs else azr_line(text, "Input")
    if not codes or arguments is None:
        task.reason = "format: needs a ```python block and an ```input block (or a # Input: line)"
        return task
    code = rename_first_function(codes[0]) if rename else codes[0]
    task.program, task.input = code, arguments.strip()
    if not re.search(r"^\s*def\s+\w+\s*\(", code, re.M):
        task.reason = "format: the python block defines no function"
    return task


def parse_proposal(text: str, task: Task, fmt: str = "direct", rename: bool = False) -> Task:
    """Fill ``task`` from a teacher's completion (the direct prefill is prepended, azr reads the answer block as
    AZR does)."""
    if fmt == "azr":
        return read_azr_proposal(unwrap(text, fmt, PROPOSE_PREFILL), task, rename)
    return read_proposal(unwrap(text, fmt, PROPOSE_PREFILL), task, rename)


def rename_first_function(code: str) -> str:
    """AZR's ``f_replace_location=not_first``: the first ``def`` (by AZR's regex) is renamed to ``f``, with every
    call of that name (recursion).

    >>> rename_first_function("def solve(n):\\n    return n and solve(n - 1)")
    'def f(n):\\n    return n and f(n - 1)'
    """
    names = re.findall(r"^\s*def\s+(\w+)\s*\(", code, re.M)
    if not names or names[0] == "f":
        return code
    code = re.sub(rf"def\s+{re.escape(names[0])}\s*\(", "def f(", code)
    return re.sub(rf"\b{re.escape(names[0])}\s*\(", "f(", code)


# Worked examples shown before the question (direct format): (program, input, output). The first is a copy, so
# even a tiny model has a strategy that is right on the simplest tasks; the second shows a real transformation.
DEMOS = [("def f(a):\n    return a", "[1, 2]", "[1, 2]"), ("def f(s):\n    return s + '!'", "'hi'", "'hi!'")]


def solve_question(task: Task) -> str:
    """AZR's code_o solver prompt, in our words: deduce f's output on the input, step by step, in an output block."""
    return (
        "# Task: deduce what a Python program outputs, given the program and an input\n"
        "Think step by step about the program and the input below, then give the output the program produces when "
        "the input is plugged into it, in an ```output block. Quote the output if it is a string; if the function "
        "returns several values, wrap them in a tuple.\n\n"
        f"# Program\n{fenced('python', task.program)}\n\n# Input\n{fenced('input', task.input)}\n\n"
        f"# Example of the answer\n{fenced('output', EXAMPLE_OUTPUT)}\n"
    )


def solve_messages(task: Task, fmt: str = "direct") -> Prompt:
    if fmt == "azr":
        return azr_prompt(solve_question(task))

    def ask(program: str, arguments: str) -> str:
        return f"{fenced('python', program)}\nWhat does f({arguments}) return? Reply with the value in an ```output block."

    shots = [(ask(program, x), fenced("output", y)) for program, x, y in DEMOS]
    return chat(shots, ask(task.program, task.input)), SOLVE_PREFILL


def read_answer(body: str, fmt: str = "direct") -> str | None:
    """The answer in a well-laid-out completion's answer text. azr: AZR's extraction (``parsing.azr_value``),
    never None: what it evaluates to is the check's business, so ``'ab' * 2`` is an answer and ``f(`` or an
    empty answer a wrong one, not a format error. direct: the output block's text, non-empty."""
    if fmt == "azr":
        return azr_value(body, "output")
    answer = last_line_or_block(body, "output")
    return answer if answer and len(answer) <= MAX_ANSWER_CHARS else None


def parse_answer(text: str, fmt: str = "direct") -> str | None:
    body = unwrap(text, fmt, SOLVE_PREFILL)
    return None if body is None else read_answer(body, fmt)


# The answer is evaluated by itself, as the lone argument of this identity (``1, 2`` is a tuple, as ``eval``
# reads it), without the task's program in scope: so does AZR's check, which evaluates it in its trainer process
# (python_executor.py:192-196), where ``f(3)`` names nothing.
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
    refusal = None if answer.strip() else Verdict(True, False, "wrong", "the answer is empty")
    # the answer is one expression, as eval reads it: on lines of its own, so a trailing comment ends there
    return Check(program, [input], [f"(\n{answer}\n)"], expected, candidate=IDENTITY, what="the answer",
                 ref_calls=[input], expressions=True, equality="python", refusal=refusal)


class CodeO(TaskKind):
    name, json_keys = KIND, ("program", "input", "answer")
    ask = PROPOSE_ASK  # code_i swaps in its own words for the same program + input proposal

    def teacher_prompt(self, task, buffers, rng, cfg) -> Prompt:
        return propose_messages(buffers.sample(self.name, cfg.references, rng), self.ask, cfg.format, self.name,
                                banned_text(AZR_BANNED), cfg.timeout_s)

    def parse_proposal(self, text, task, cfg) -> Task:
        return parse_proposal(text, task, cfg.format, cfg.rename_to_f)

    def student_prompt(self, task, fmt) -> Prompt:
        return solve_messages(task, fmt)

    def parse_answer(self, text, fmt) -> str | None:
        return parse_answer(text, fmt)

    def read_answer(self, body, fmt) -> str | None:
        return read_answer(body, fmt)

    def check_answer(self, task, answer, mode="azr") -> Check:
        return check(task.program, task.input, answer, task.output or None, mode)

    def check_json(self, record, mode="azr") -> Check:
        return check(record["program"], record["input"], record["answer"], None, mode)
