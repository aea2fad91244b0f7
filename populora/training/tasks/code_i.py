"""code_i (abduction): the student sees program + output and finds an input that produces it.

The teacher proposes what a code_o teacher does (a program and one input) but is asked for it in its own words:
the task is hard when the function is hard to invert, not when its output is hard to compute.
"""

from __future__ import annotations

from populora.platform.sandbox.values import canonical_literal
from populora.platform.verifier import Check, Verdict
from populora.training.tasks import code_o
from populora.training.tasks.parsing import call_arguments, last_line_or_block
from populora.training.tasks.prompts import LAYOUT, azr_prompt, chat, fenced, unwrap
from populora.training.tasks.task import Prompt, Task

KIND = "code_i"
SOLVE_PREFILL = "```input\n"
parse_proposal = code_o.parse_proposal  # same proposal: a program and one input
PROPOSE_ASK = (
    "Write a new Python function named f, unlike the ones before, and one input for it, so that finding an input "
    "that makes f return the same value takes careful reasoning. Put the function in a ```python block and the "
    "arguments of the call in an ```input block. No imports, no randomness, no printing."
)
ABDUCTION = (
    "## Task: write an abduction task (code_i)\n"
    "Write a new Python function `f` and one input for it. A solver will be shown your function and the value f "
    "returns on your input, but not the input, and must find an input that makes f return that value (any such "
    "input counts). Your reward is highest when a strong solver sometimes fails: make f hard to run backwards "
    "(information mixed across the input, several chained transformations, conditions the input must satisfy), "
    "while your own input shows that an answer exists.\n"
    "The task must be new: it must compute something different from every reference task below, not the same "
    "logic with other names or values.\n"
)


def propose_messages(references: list[Task], fmt: str = "direct") -> Prompt:
    return code_o.propose_messages(references, PROPOSE_ASK, fmt, ABDUCTION)


# Worked examples (direct format): (program, output, an input giving it); a copy first, then an inversion.
DEMOS = [("def f(x):\n    return x", "'abc'", "'abc'"), ("def f(n):\n    return n + 1", "8", "7")]


def solve_question(task: Task) -> str:
    return (
        "## Task: find an input\n"
        "Find an input on which the Python function f below returns the given output, step by step; you cannot run "
        f"code. Any input that gives this output counts.\n{fenced('python', task.program)}\n"
        f"{fenced('output', task.output)}\n"
        f"{LAYOUT} Inside <answer>, give only the arguments of the call f(...), separated by commas with strings "
        "quoted, in an input block:\n```input\narg1, arg2, ...\n```"
    )


def solve_messages(task: Task, fmt: str = "direct") -> Prompt:
    if fmt == "azr":
        return azr_prompt(solve_question(task))

    def ask(program: str, output: str) -> str:
        return (f"{fenced('python', program)}\nFind arguments for f so that it returns {output}. "
                "Reply with the arguments in an ```input block.")

    shots = [(ask(program, y), fenced("input", x)) for program, y, x in DEMOS]
    return chat(shots, ask(task.program, task.output)), SOLVE_PREFILL


def parse_answer(text: str, fmt: str = "direct") -> str | None:
    body = unwrap(text, fmt, SOLVE_PREFILL)
    return None if body is None else call_arguments(last_line_or_block(body, "input"))


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
    ask, intro = PROPOSE_ASK, ABDUCTION

    def student_prompt(self, task, fmt) -> Prompt:
        return solve_messages(task, fmt)

    def parse_answer(self, text, fmt) -> str | None:
        return parse_answer(text, fmt)

    def check_answer(self, task, answer, mode="azr") -> Check:
        return check(task.program, task.output, answer, mode)

    def check_json(self, record, mode="azr") -> Check:
        return check(record["program"], record["output"], record["answer"], mode)
