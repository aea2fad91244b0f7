"""code_f (induction): the teacher writes inputs + a message for a buffered program; the student writes the
program from the shown input/output pairs, and must reproduce the held-out ones.

AZR's rules: the teacher writes exactly ``tasks.code_f_inputs`` inputs (AZR: 10), every one must run, the first
half is shown to the student (AZR: ``len // 2``) and the rest are held out.
"""

from __future__ import annotations

from populora.platform.sandbox.verifier import Check, Verdict
from populora.training.tasks.code_o import EXAMPLE_INPUT
from populora.training.tasks.parsing import (azr_blocks, azr_code_blocks, azr_message, blocks, call_arguments,
                                              first_block, imports_of, last_block, parseable_program)
from populora.training.tasks.prompts import azr_prompt, chat, fenced, program_requirements, unwrap
from populora.training.tasks.task import Prompt, Task, TaskKind

KIND = "code_f"
PROPOSE_PREFILL = "```input\n"
SOLVE_PREFILL = "```python\ndef f("

DEMO_PROGRAM = "def f(xs):\n    return [x * 2 for x in xs if x > 0]"
DEMO_INPUTS = ["[1, -2, 3]", "[]", "[5]", "[-1, 4, 0]", "[2, 2]", "[-3]", "[10, -10, 7]", "[0]", "[6, 1]", "[-5, -6, 8]"]
DEMO_OUTPUTS = ["[2, 6]", "[]", "[10]", "[8]"]
DEMO_MESSAGE = "Doubles the positive numbers of a list."


def split(n_inputs: int) -> tuple[int, int]:
    """(shown, held out) of ``n_inputs`` inputs, as AZR splits them.

    >>> split(10)
    (5, 5)
    """
    shown = max(1, n_inputs // 2)
    return shown, n_inputs - shown


def propose_question(program: str, n: int) -> str:
    """AZR's code_f proposer prompt, in our words: n inputs giving diverse outputs, and a message; the program is
    shown with the call its inputs are plugged into."""
    return (
        f"## Task: write {n} inputs for the program below that produce diverse outputs, and a message about it (induction)\n"
        f"Design {n} inputs that can be plugged into the program below so that together they produce a diverse set "
        "of outputs. A test subject will be given a subset of your inputs with the outputs they deterministically "
        "produce, and has to deduce the program; think of it as an IQ test. You may also leave the test subject a "
        "message that helps them deduce the program.\n\n"
        "### Input requirements\n"
        f"- Give {n} valid inputs for the program.\n"
        "- In each input, separate several arguments with commas.\n"
        "- Put quotes around string arguments.\n"
        "- Put each input in its own ```input block.\n\n"
        "### Message requirements\n"
        "- Leave the test subject a message that helps them deduce the program, in a ```message block.\n"
        "- The message can take any form: a coding question, or a plain-language description of what the program "
        "does, for instance.\n"
        "- The message must not contain the program.\n\n"
        f"### Layout\n- Each input in a block like this:\n{fenced('input', 'arg1, arg2, ...')}\n\n"
        f"### Example of the layout\n{fenced('input', code_o_example())}\n{fenced('input', EXAMPLE_INPUT_2)}\n\n"
        "### What makes a good submission\n"
        "- It executes: the program runs on every one of your inputs.\n"
        "- Coverage: the inputs and outputs span the program's input space, enough to deduce the program from them.\n"
        "- Creativity: the inputs are clearly different from each other.\n"
        "- The inputs and the message together make the task challenging for the test subject, but not impossible.\n"
        "Start with a clear plan: understand the program, then say how your inputs cover it well and why they are "
        "challenging and creative. Then write the inputs and the message, each input in an ```input block and the "
        "message in a ```message block.\n\n"
        f"### Program\n{fenced('python', program + CALL_SUFFIX)}\n"
    )


EXAMPLE_INPUT_2 = "['green'], {'green': 1}"
CALL_SUFFIX = "\nf(<|YOUR INPUT WILL BE PLUGGED HERE|>)"  # where the inputs go, as AZR shows it


def code_o_example() -> str:
    return EXAMPLE_INPUT


def _propose_ask(program: str, n_inputs: int) -> str:
    return (f"{fenced('python', program)}\nWrite {n_inputs} different inputs for f that show what it does, each "
            "in its own ```input block, then a one-line hint about what f does in a ```message block.")


def propose_messages(source: Task, n_inputs: int, fmt: str = "direct") -> Prompt:
    if fmt == "azr":
        return azr_prompt(propose_question(source.program, n_inputs))
    demo = "\n".join(fenced("input", x) for x in DEMO_INPUTS[:n_inputs]) + "\n" + fenced("message", DEMO_MESSAGE)
    return chat([(_propose_ask(DEMO_PROGRAM, n_inputs), demo)], _propose_ask(source.program, n_inputs)), PROPOSE_PREFILL


def read_proposal(text: str | None, task: Task, n_inputs: int, distinct: bool = True, need_message: bool = False) -> Task:
    """Fill ``task.inputs`` and ``task.message``; fewer than ``n_inputs`` is a format error (AZR: the count must be
    reached). ``distinct`` (ours): the first ``n_inputs`` distinct well-formed argument lists; else AZR's
    ``parse_inputs_message``: the last ``n_inputs`` input blocks, duplicates allowed (one that is no argument list
    fails in the sandbox, making the task invalid). ``need_message`` (AZR): no message block is a format error.
    The program comes from the buffer."""
    if text is None:
        task.reason = "format: no <think>...</think> <answer>...</answer> layout"
        return task
    found: list[str] = []
    for label, body in blocks(text):
        if label != "input":
            continue
        args = call_arguments(body)
        if distinct and args is not None and args not in found:
            found.append(args)
        elif not distinct:
            found.append(args if args is not None else body.strip())
    task.inputs = found[:n_inputs] if distinct else found[-n_inputs:]
    message = first_block(text, "message")
    task.message = (message or "").strip()[:300]
    if len(task.inputs) < n_inputs:
        task.reason = f"format: {len(task.inputs)} {'distinct ' if distinct else ''}valid inputs, need {n_inputs}"
    elif need_message and message is None:
        task.reason = "format: no ```message block (required)"
    return task


def read_azr_proposal(text: str | None, task: Task, n_inputs: int, distinct: bool = False,
                      need_message: bool = True) -> Task:
    """AZR's reading (parse_inputs_message, code_reward.py:397-453): its ```input blocks taken as written, the last
    ``n_inputs`` (``distinct``, ours: the first ``n_inputs`` distinct argument lists); the message from a
    ```message block, <message> tags or a ``# Message:`` line, possibly empty."""
    if text is None:
        task.reason = "format: no <think>...</think> <answer>...</answer> layout"
        return task
    found = azr_blocks(text, "input")
    if distinct:
        found = list(dict.fromkeys(a for a in map(call_arguments, found) if a is not None))
    task.inputs = found[:n_inputs] if distinct else found[-n_inputs:]
    message = azr_message(text)
    task.message = (message or "")[:300]
    if len(task.inputs) < n_inputs:
        task.reason = f"format: {len(task.inputs)} {'distinct ' if distinct else ''}```input blocks, need {n_inputs}"
    elif need_message and message is None:
        task.reason = "format: no message (a ```message block, <message> tags or a # Message: line)"
    return task


def parse_proposal(text: str, task: Task, n_inputs: int, fmt: str = "direct", distinct: bool = True,
                   need_message: bool = False) -> Task:
    read = read_azr_proposal if fmt == "azr" else read_proposal
    return read(unwrap(text, fmt, PROPOSE_PREFILL), task, n_inputs, distinct, need_message)


def judge_inputs(task: Task, checked: list[tuple[str, Verdict]], distinct_outputs: bool = True) -> Task:
    """Validity from the sandbox's run of f on every input: all must run (AZR drops a task when one fails), and
    (``distinct_outputs``, ours) the outputs must differ somewhere, or there is nothing to induce."""
    bad = next(((x, v) for x, v in checked if not v.valid), None)
    task.outputs = [v.output for _, v in checked] if bad is None else []
    if not checked:
        task.valid, task.reason = False, "no inputs to run"
    elif bad is not None:
        x, v = bad
        task.valid, task.reason = False, f"input {x[:60]} does not run ({v.said()})"[:300]
    elif distinct_outputs and len(set(task.outputs)) < 2:
        task.valid, task.reason = False, "every input gives the same output: nothing to induce"
    else:
        task.valid, task.reason = True, "ok"
    return task


def solve_question(task: Task, seconds: float = 10.0) -> str:
    """AZR's code_f solver prompt, in our words: infer a program from input/output pairs and the message."""
    pairs = "\n".join(f"{fenced(f'input_{i}', x)}\n{fenced(f'output_{i}', y)}" for i, (x, y) in enumerate(task.shown))
    return (
        "# Task: deduce the program that turned the inputs into the outputs\n"
        "Below are input/output pairs and a message describing the program. Think the problem through step by step "
        "and deduce a general program that produces the hidden outputs from the hidden inputs, as the original "
        "program that generated these pairs does. It can help to check your program on each pair in turn, and to "
        "revise it until it matches them all. Your final program is what gets evaluated: put it in a ```python "
        "block.\n\n"
        f"# Program requirements\n{program_requirements(seconds)}\n"
        f"# Input and output pairs\n{pairs}\n\n"
        f"# Message\n{fenced('message', task.message)}\n\n"
        f"# Example of the answer\n{fenced('python', 'def f(a):' + chr(10) + '    return a')}\n\n"
        "Remember: the entry function must be named `f`.\n"
    )


def _solve_ask(pairs: list[tuple[str, str]], message: str) -> str:
    examples = "\n".join(f"f({i}) == {o}" for i, o in pairs)
    hint = f"\nHint: {message}" if message else ""
    return f"Write a Python function f that satisfies:\n{examples}{hint}\nReply with a ```python block."


def solve_messages(task: Task, fmt: str = "direct") -> Prompt:
    if fmt == "azr":
        return azr_prompt(solve_question(task))
    demo_pairs = list(zip(DEMO_INPUTS[:2], DEMO_OUTPUTS[:2]))
    shots = [(_solve_ask(demo_pairs, DEMO_MESSAGE), fenced("python", DEMO_PROGRAM))]
    return chat(shots, _solve_ask(task.shown, task.message)), SOLVE_PREFILL


def read_answer(body: str, fmt: str = "direct") -> str | None:
    """azr: the last fenced block, as written (AZR's parse_code_function, code_reward.py:456-474; any label but
    ``python`` stays in the code); no fenced block is a format error, code that does not run a wrong answer.
    direct: the last python block, cut to the part that parses."""
    if fmt == "azr":
        codes = azr_code_blocks(body)
        return codes[-1] if codes else None
    code = last_block(body, "python", "py", "")
    return parseable_program(code) if code else None


def parse_answer(text: str, fmt: str = "direct") -> str | None:
    body = unwrap(text, fmt, SOLVE_PREFILL)
    return None if body is None else read_answer(body, fmt)


def check(program: str, inputs: list[str], answer: str, outputs: list[str] | None = None, mode: str = "azr") -> Check:
    """The answer's f must give the reference program's values on the held-out ``inputs``; ``outputs``
    (canonical, e.g. from validation) spares re-running the reference. ``mode`` azr: Python equality (AZR's
    ``gold == f(input)``); strict: equal canonical text."""
    refusal = None if inputs else Verdict(False, None, "invalid", "code_f task without inputs")
    # the answer runs with the task program's imports in front of it, as AZR runs it (python_executor.py:169-172)
    candidate = "\n".join(imports_of(program) + [answer])
    return Check(program, inputs, inputs, outputs, candidate=candidate, refusal=refusal, what="candidate f(input)",
                 equality="canonical" if mode == "strict" else "python")


class CodeF(TaskKind):
    name, json_keys = KIND, ("program", "inputs", "answer")
    writes_program = False

    def teacher_prompt(self, task, buffers, rng, cfg) -> Prompt:
        source = buffers.programs(rng)  # the teacher writes inputs for a program from the buffers
        task.program = source.program
        return propose_messages(source, cfg.code_f_inputs, cfg.format)

    def parse_proposal(self, text, task, cfg) -> Task:
        return parse_proposal(text, task, cfg.code_f_inputs, cfg.format, cfg.code_f_distinct_inputs,
                              cfg.code_f_message_required)

    def student_prompt(self, task, fmt) -> Prompt:
        return solve_messages(task, fmt)

    def parse_answer(self, text, fmt) -> str | None:
        return parse_answer(text, fmt)

    def read_answer(self, body, fmt) -> str | None:
        return read_answer(body, fmt)

    def check_answer(self, task, answer, mode="azr") -> Check:
        half = len(task.inputs) - len(task.held_out)
        return check(task.program, task.held_out, answer, task.outputs[half:] or None, mode)

    def check_json(self, record, mode="azr") -> Check:
        return check(record["program"], list(record["inputs"]), record["answer"], record.get("outputs"), mode)

    def validation_inputs(self, task) -> list[str]:
        return list(task.inputs)  # every input must run: the gold outputs of the shown and the held-out ones

    def judge_validation(self, task, checked, rules=None) -> None:
        judge_inputs(task, checked, rules is None or rules.code_f_distinct_outputs)
