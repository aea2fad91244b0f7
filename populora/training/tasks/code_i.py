"""code_i (abduction): the student sees program + output and finds an input that produces it."""

from __future__ import annotations

from populora.platform.sandbox.values import canonical_literal
from populora.platform.verifier import Check, Verdict
from populora.training.tasks import code_o
from populora.training.tasks.parsing import call_arguments, first_line_or_block
from populora.training.tasks.prompts import chat, fenced
from populora.training.tasks.task import Prompt, Task

KIND = "code_i"
propose_messages = code_o.propose_messages  # same proposal: a program and one input
parse_proposal = code_o.parse_proposal

# Worked examples: (program, output, an input giving it); a copy first, then an inversion.
DEMOS = [("def f(x):\n    return x", "'abc'", "'abc'"), ("def f(n):\n    return n + 1", "8", "7")]


def solve_messages(task: Task) -> Prompt:
    def ask(program: str, output: str) -> str:
        return (f"{fenced('python', program)}\nFind arguments for f so that it returns {output}. "
                "Reply with the arguments in an ```input block.")

    shots = [(ask(program, y), fenced("input", x)) for program, y, x in DEMOS]
    return chat(shots, ask(task.program, task.output)), "```input\n"


def parse_answer(text: str) -> str | None:
    return call_arguments(first_line_or_block("```input\n" + text, "input"))


def check(program: str, output: str, answer: str) -> Check:
    """f(answer) must give the task's output; the answer must be literal arguments (the verifier insists)."""
    try:
        expected, refusal = [canonical_literal(output)], None
    except ValueError as e:
        expected, refusal = [], Verdict(False, None, "invalid", f"task output is not a literal: {e}")
    return Check(program, [], [answer], expected, refusal=refusal, what="f(answer)")


class CodeI(code_o.CodeO):
    """code_o's proposal (a program and one input); the student goes the other way."""
    name, json_keys = KIND, ("program", "output", "answer")

    def student_prompt(self, task) -> Prompt:
        return solve_messages(task)

    def parse_answer(self, text) -> str | None:
        return parse_answer(text)

    def check_answer(self, task, answer) -> Check:
        return check(task.program, task.output, answer)

    def check_json(self, record) -> Check:
        return check(record["program"], record["output"], record["answer"])
