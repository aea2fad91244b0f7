"""code_i (abduction): the student sees program + output and finds an input that produces it."""

from __future__ import annotations

from populora.training.tasks import code_o
from populora.training.tasks.parsing import call_arguments, first_line_or_block
from populora.training.tasks.prompts import chat, fenced
from populora.training.tasks.task import Task

KIND = "code_i"
propose_messages = code_o.propose_messages  # same proposal: a program and one input
parse_proposal = code_o.parse_proposal

DEMO = ("def f(n):\n    return n * 3 + 1", "13", "4")


def solve_messages(task: Task) -> tuple[list[dict], str]:
    def ask(program: str, output: str) -> str:
        return (f"{fenced('python', program)}\nFind arguments for f so that it returns {output}. "
                "Reply with the arguments in an ```input block.")

    shots = [(ask(DEMO[0], DEMO[1]), fenced("input", DEMO[2]))]
    return chat(shots, ask(task.program, task.output)), "```input\n"


def parse_answer(text: str) -> str | None:
    return call_arguments(first_line_or_block("```input\n" + text, "input"))


def check_request(task: Task, answer: str) -> dict:
    return {"type": "code_i", "program": task.program, "output": task.output, "answer": answer}
