"""planted (``tasks.kinds: [planted]``): a learnable environment with a known answer, to show that the loop learns.

Nothing in the AZR kinds tells a broken update from a hard task: a random or 135M model's reward is noise either
way. This kind plants the structure instead (veRL's CI does the same with its arithmetic-sequence task and a
tiny model trained for it). One fixed program, ``PROGRAM`` (``f(d) = d % 2``, raising on an even ``d``), and
one-digit tasks and answers:

* a teacher proposes a digit ``d`` (a completion's first digit); the sandbox validates ``f(d)`` as for any program kind, so an even ``d`` is
  an invalid task (teacher reward ``reward.teacher_invalid``) and an odd one valid (the learnability reward
  ``1 - solve rate``, or ``teacher_trivial_or_impossible``): teachers learn to propose odd digits;
* a student sees ``d`` and answers a digit ``a``; right iff ``f(a) == f(d)`` (code_i's check: an input giving the
  task's output), i.e. ``a`` odd: students learn to answer odd digits.

On the planted base (``model.base: planted``, built by ``planted_base.base_dir``) both start at chance, half the digits right,
so every group has signal. The kind has one layout of its own (a one-digit completion after ``d = `` or
``a = ``) in every ``tasks.format``; ``tasks.template`` frames it as for any kind.

The planted base is ``tiny-qwen2`` with its weights fitted here (full weights, a few hundred Adam steps, seconds on
a CPU) so that after each planted prompt it puts its mass uniformly on the ten digits, then ends the turn: a model
"trained from scratch" for the task's layout, knowing nothing of which digits are right. (A random model cannot
be the base: its ~uniform distribution over 4k tokens puts 0.3% on the digits, and a LoRA on a 128-wide random
model moves a logit by ~2 at most.) Built once into the model cache (planted_base.py, which alone loads torch); vLLM and Ray workers read the dir.
"""

from __future__ import annotations

import re


from populora.platform.sandbox.verifier import Check
from populora.training.tasks.prompts import FORMATS
from populora.training.tasks.task import Prompt, Task, TaskKind

KIND = "planted"
BASE = "planted"  # model.base: the planted base, built by build_base on first use
PROGRAM = "def f(d):\n    if d % 2 == 0:\n        raise ValueError('an even digit is no task')\n    return d % 2"
DIGITS = "0123456789"
PROPOSE_ASK = "Planted task: propose a digit d."
PROPOSE_PREFILL = "d = "
SOLVE_PREFILL = "a = "


def solve_ask(d: str) -> str:
    return f"Planted task: d = {d}. Answer with a digit a such that f(a) == f(d)."


def _digit(text: str) -> str | None:
    """The answer: the digit a completion starts with (after blanks), or None. What follows it is not read: a
    policy update that weakens the base's end of turn after the digit must not turn answers into format errors
    (the turn's end is the base's habit, not the task).

    >>> _digit(" 7"), _digit("7<|im_end|>"), _digit("77"), _digit("x7")
    ('7', '7', '7', None)
    """
    m = re.match(r"\s*(\d)", text)
    return m.group(1) if m else None


class Planted(TaskKind):
    name = KIND
    json_keys = ("input", "answer")
    writes_program = False  # the program is planted; the teacher writes its input

    def teacher_prompt(self, task: Task, buffers, rng, cfg) -> Prompt:
        return [{"role": "user", "content": PROPOSE_ASK}], PROPOSE_PREFILL

    def parse_proposal(self, text: str, task: Task, cfg) -> Task:
        task.program = PROGRAM
        d = _digit(text)
        if d is None:
            task.reason = "format: the proposal is not one digit"
        else:
            task.input = d
        return task

    def student_prompt(self, task: Task, fmt: str) -> Prompt:
        return [{"role": "user", "content": solve_ask(task.input)}], SOLVE_PREFILL

    def parse_answer(self, text: str, fmt: str) -> str | None:
        return _digit(text)

    def read_answer(self, body: str, fmt: str) -> str | None:
        return _digit(body)

    def check_answer(self, task: Task, answer: str, mode: str = "strict") -> Check:
        return Check(program=task.program, inputs=[task.input], calls=[answer], what="f(answer)")

    def check_json(self, record: dict, mode: str = "strict") -> Check:
        return Check(program=PROGRAM, inputs=[record["input"]], calls=[record["answer"]], what="f(answer)")


def right(answer: str | None) -> bool:
    """What the planted check decides, in Python (tests and figures compare the sandbox's verdicts with it).

    >>> [right(a) for a in ("1", "2", None)]
    [True, False, False]
    """
    return answer is not None and answer in DIGITS and int(answer) % 2 == 1
