"""code_i (abduction): the student sees program + output and finds an input that produces it."""

from __future__ import annotations

from populora.training.tasks import code_o
from populora.training.tasks.parsing import call_arguments, first_line_or_block
from populora.training.tasks.prompts import chat, fenced
from populora.training.tasks.task import Task

KIND = "code_i"
propose_messages = code_o.propose_messages  # same proposal: a program and one input
parse_proposal = code_o.parse_proposal

# Worked examples: (program, output, an input giving it); a copy first, then an inversion.
DEMOS = [("def f(x):\n    return x", "'abc'", "'abc'"), ("def f(n):\n    return n + 1", "8", "7")]


def solve_messages(task: Task) -> tuple[list[dict], str]:
    def ask(program: str, output: str) -> str:
        return (f"{fenced('python', program)}\nFind arguments for f so that it returns {output}. "
                "Reply with the arguments in an ```input block.")

    shots = [(ask(program, y), fenced("input", x)) for program, y, x in DEMOS]
    return chat(shots, ask(task.program, task.output)), "```input\n"


def parse_answer(text: str) -> str | None:
    return call_arguments(first_line_or_block("```input\n" + text, "input"))


def check_request(task: Task, answer: str) -> dict:
    return {"type": "code_i", "program": task.program, "output": task.output, "answer": answer}
