"""code_f (induction): the teacher writes inputs + a hint for a buffered program; the student writes the program
from the shown input/output pairs, and must reproduce the held-out ones."""

from __future__ import annotations

from populora.platform.verifier import Check, Verdict
from populora.training.tasks.parsing import blocks, call_arguments, first_block, parseable_program
from populora.training.tasks.prompts import chat, fenced
from populora.training.tasks.task import Prompt, Task, TaskKind

KIND = "code_f"

DEMO_PROGRAM = "def f(xs):\n    return [x * 2 for x in xs if x > 0]"
DEMO_INPUTS = ["[1, -2, 3]", "[]", "[5]", "[-1, 4, 0]"]
DEMO_OUTPUTS = ["[2, 6]", "[]", "[10]", "[8]"]
DEMO_MESSAGE = "Doubles the positive numbers of a list."


def _propose_ask(program: str, n_inputs: int) -> str:
    return (f"{fenced('python', program)}\nWrite {n_inputs} different inputs for f, each in its own ```input "
            "block, then a one-line hint about what f does in a ```message block.")


def propose_messages(program: Task, n_inputs: int) -> Prompt:
    demo = "\n".join(fenced("input", x) for x in DEMO_INPUTS[:n_inputs]) + "\n" + fenced("message", DEMO_MESSAGE)
    return chat([(_propose_ask(DEMO_PROGRAM, n_inputs), demo)], _propose_ask(program.program, n_inputs)), "```input\n"


def parse_proposal(text: str, task: Task, n_inputs: int) -> Task:
    """Fill ``task.inputs`` (distinct, valid argument lists) and ``task.message``; program comes from the buffer."""
    full = "```input\n" + text
    found: list[str] = []
    for label, body in blocks(full):
        args = call_arguments(body) if label == "input" else None
        if args is not None and args not in found:
            found.append(args)
    task.inputs = found[:n_inputs]
    task.message = (first_block(full, "message") or "").strip()[:300]
    if len(task.inputs) < 2:
        task.reason = f"format: {len(task.inputs)} distinct valid inputs, need at least 2"
    return task


def _solve_ask(pairs: list[tuple[str, str]], message: str) -> str:
    examples = "\n".join(f"f({i}) == {o}" for i, o in pairs)
    hint = f"\nHint: {message}" if message else ""
    return f"Write a Python function f that satisfies:\n{examples}{hint}\nReply with a ```python block."


def solve_messages(task: Task) -> Prompt:
    demo_pairs = list(zip(DEMO_INPUTS[:2], DEMO_OUTPUTS[:2]))
    shots = [(_solve_ask(demo_pairs, DEMO_MESSAGE), fenced("python", DEMO_PROGRAM))]
    return chat(shots, _solve_ask(task.shown, task.message)), "```python\ndef f("


def parse_answer(text: str) -> str | None:
    code = first_block("```python\ndef f(" + text, "python")
    return parseable_program(code) if code else None


def check(program: str, inputs: list[str], answer: str, outputs: list[str] | None = None) -> Check:
    """The answer's f must give the reference program's values on the held-out ``inputs``; ``outputs``
    (canonical, e.g. from validation) spares re-running the reference."""
    refusal = None if inputs else Verdict(False, None, "invalid", "code_f task without inputs")
    return Check(program, inputs, inputs, outputs, candidate=answer, refusal=refusal, what="candidate f(input)")


class CodeF(TaskKind):
    name, json_keys = KIND, ("program", "inputs", "answer")

    def teacher_prompt(self, task, buffers, rng, cfg) -> Prompt:
        source = buffers.programs(rng)  # the teacher writes inputs for a program from the buffers
        task.program = source.program
        return propose_messages(source, cfg.code_f_inputs)

    def parse_proposal(self, text, task, cfg) -> Task:
        return parse_proposal(text, task, cfg.code_f_inputs)

    def student_prompt(self, task) -> Prompt:
        return solve_messages(task)

    def parse_answer(self, text) -> str | None:
        return parse_answer(text)

    def check_answer(self, task, answer) -> Check:
        return check(task.program, task.held_out, answer)

    def check_json(self, record) -> Check:
        return check(record["program"], list(record["inputs"]), record["answer"], record.get("outputs"))
