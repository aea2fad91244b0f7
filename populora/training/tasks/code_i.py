"""code_i (abduction): the student sees program + output and finds an input that produces it.

The teacher proposes what a code_o teacher does (a program and one input) but is asked for it in its own words:
the task is hard when the function is hard to invert, not when its output is hard to compute.
"""

from __future__ import annotations

from populora.platform.sandbox.values import canonical_literal
from populora.platform.sandbox.verifier import Check, Verdict
from populora.training.tasks import code_o
from populora.training.tasks.parsing import azr_value, call_arguments, last_line_or_block
from populora.training.tasks.prompts import azr_prompt, chat, fenced, unwrap
from populora.training.tasks.task import Prompt, Task

KIND = "code_i"
SOLVE_PREFILL = "```input\n"
parse_proposal = code_o.parse_proposal  # same proposal: a program and one input
PROPOSE_ASK = (
    "Write a new Python function named f, unlike the ones before, and one input for it, so that finding an input "
    "that makes f return the same value takes careful reasoning. Put the function in a ```python block and the "
    "arguments of the call in an ```input block. No imports, no randomness, no printing."
)


def propose_messages(references: list[Task], fmt: str = "direct", banned: str = "", seconds: float = 10.0) -> Prompt:
    return code_o.propose_messages(references, PROPOSE_ASK, fmt, KIND, banned, seconds)


# Worked examples (direct format): (program, output, an input giving it); a copy first, then an inversion.
DEMOS = [("def f(x):\n    return x", "'abc'", "'abc'"), ("def f(n):\n    return n + 1", "8", "7")]


def solve_question(task: Task) -> str:
    """AZR's code_i solver prompt, in our words: find one input that gives the output, in an input block."""
    return (
        "# Task: give one input a Python program turns into a given output\n"
        "Think step by step about the program and the output below, then give one input that produces this output, "
        "in an ```input block. Quote string arguments, and separate several arguments with commas.\n\n"
        f"# Program\n{fenced('python', task.program)}\n\n# Output\n{fenced('output', task.output)}\n\n"
        f"# Layout of the answer\n{fenced('input', 'arg1, arg2, ...')}\n"
        f"# Example of the answer\n{fenced('input', code_o.EXAMPLE_INPUT)}\n"
    )


def solve_messages(task: Task, fmt: str = "direct") -> Prompt:
    if fmt == "azr":
        return azr_prompt(solve_question(task))

    def ask(program: str, output: str) -> str:
        return (f"{fenced('python', program)}\nFind arguments for f so that it returns {output}. "
                "Reply with the arguments in an ```input block.")

    shots = [(ask(program, y), fenced("input", x)) for program, y, x in DEMOS]
    return chat(shots, ask(task.program, task.output)), SOLVE_PREFILL


def read_answer(body: str, fmt: str = "direct") -> str | None:
    """azr: AZR's extraction (``parsing.azr_value``), taken as written and never None (``f(5)`` is the call
    ``f(f(5))``; what does not parse is a wrong answer); direct: the input block's argument list, leniently."""
    if fmt == "azr":
        return azr_value(body, "input")
    return call_arguments(last_line_or_block(body, "input"))


def parse_answer(text: str, fmt: str = "direct") -> str | None:
    body = unwrap(text, fmt, SOLVE_PREFILL)
    return None if body is None else read_answer(body, fmt)


def check(program: str, output: str, answer: str, mode: str = "azr") -> Check:
    """f(answer) must give the task's output. ``mode`` (``tasks.answer_check``): azr, any argument expressions
    (evaluated in the sandbox), Python equality (AZR's ``gold == f(answer)``); strict, literal arguments only, equal
    canonical text."""
    try:
        expected, refusal = [canonical_literal(output)], None
    except ValueError as e:
        expected, refusal = [], Verdict(False, None, "invalid", f"task output is not a literal: {e}")
    azr = mode != "strict"
    return Check(program, [], [answer], expected, refusal=refusal, what="f(answer)", expressions=azr,
                 equality="python" if azr else "canonical")


class CodeI(code_o.CodeO):
    """code_o's proposal (a program and one input) asked for as an abduction task; the student goes the other way."""
    name, json_keys = KIND, ("program", "output", "answer")
    ask = PROPOSE_ASK

    def student_prompt(self, task, fmt) -> Prompt:
        return solve_messages(task, fmt)

    def parse_answer(self, text, fmt) -> str | None:
        return parse_answer(text, fmt)

    def read_answer(self, body, fmt) -> str | None:
        return read_answer(body, fmt)

    def check_answer(self, task, answer, mode="azr") -> Check:
        return check(task.program, task.output, answer, mode)

    def check_json(self, record, mode="azr") -> Check:
        return check(record["program"], record["output"], record["answer"], mode)
