"""code_o (deduction): the student sees program + input and predicts the output.

Also home of the program+input proposal that code_o and code_i share.
"""

from __future__ import annotations

from populora.platform.sandbox.values import canonical_literal
from populora.platform.verifier import Check, Verdict
from populora.training.tasks.parsing import call_arguments, first_block, first_line_or_block, literal, parseable_program
from populora.training.tasks.prompts import chat, fenced
from populora.training.tasks.task import Prompt, Task, TaskKind

KIND = "code_o"
PROPOSE_PREFILL = "```python\ndef f("
PROPOSE_ASK = (
    "Write a new, different Python function named f and one input for it. Put the function in a ```python "
    "block and the arguments of the call in an ```input block. No imports, no randomness, no printing."
)


def propose_messages(references: list[Task]) -> Prompt:
    shots = [(PROPOSE_ASK, fenced("python", t.program) + "\n" + fenced("input", t.input)) for t in references]
    return chat(shots, PROPOSE_ASK), PROPOSE_PREFILL


def parse_proposal(text: str, task: Task) -> Task:
    """Fill ``task.program`` / ``task.input`` from the completion (prefill included); reason set on failure."""
    full = PROPOSE_PREFILL + text
    code = first_block(full, "python", "py", "")
    program = parseable_program(code) if code else None
    after = full.split("```input", 1)[1] if "```input" in full else ""
    arguments = call_arguments(first_line_or_block("```input" + after, "input")) if after else None
    task.program, task.input = program or (code or ""), arguments or ""
    if program is None:
        task.reason = "format: no parseable program defining f"
    elif arguments is None:
        task.reason = "format: no ```input block with valid arguments"
    return task


# Worked examples shown before the question: (program, input, output). The first is a copy, so even a tiny
# model has a strategy that is right on the simplest tasks; the second shows a real transformation.
DEMOS = [("def f(a):\n    return a", "[1, 2]", "[1, 2]"), ("def f(s):\n    return s + '!'", "'hi'", "'hi!'")]


def solve_messages(task: Task) -> Prompt:
    def ask(program: str, arguments: str) -> str:
        return f"{fenced('python', program)}\nWhat does f({arguments}) return? Reply with the value in an ```output block."

    shots = [(ask(program, x), fenced("output", y)) for program, x, y in DEMOS]
    return chat(shots, ask(task.program, task.input)), "```output\n"


def parse_answer(text: str) -> str | None:
    return literal(first_line_or_block("```output\n" + text, "output"))


def check(program: str, input: str, answer: str) -> Check:
    """f(input) must give the value the answer writes; if f fails on its own input, the task is at fault."""
    try:
        expected, refusal = [canonical_literal(answer)], None
    except ValueError as e:
        expected, refusal = [], Verdict(True, False, "bad_answer", f"answer is not a literal: {e}")
    return Check(program, [input], [input], expected, refusal=refusal)


class CodeO(TaskKind):
    name, json_keys = KIND, ("program", "input", "answer")

    def teacher_prompt(self, task, buffers, rng, cfg) -> Prompt:
        return propose_messages(buffers.sample(self.name, cfg.references, rng))

    def parse_proposal(self, text, task, cfg) -> Task:
        return parse_proposal(text, task)

    def student_prompt(self, task) -> Prompt:
        return solve_messages(task)

    def parse_answer(self, text) -> str | None:
        return parse_answer(text)

    def check_answer(self, task, answer) -> Check:
        return check(task.program, task.input, answer)

    def check_json(self, record) -> Check:
        return check(record["program"], record["input"], record["answer"])
