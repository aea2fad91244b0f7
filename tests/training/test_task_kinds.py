"""Task kinds end to end: a student's completion parsed by the kind, judged by the real sandbox + verifier.

The student-side parser and the sandbox read one literal grammar, so an answer written the way the verifier
shows values (its canonical text) is always well-formed and judged on its value.
"""

from __future__ import annotations

import pytest

from populora.platform.sandbox import Sandbox, canonical
from populora.platform.sandbox.verifier import Check, Verifier
from populora.training.config import TasksConfig
from populora.training.tasks import KINDS, Task, TaskKind
from populora.training.tasks.parsing import literal


@pytest.fixture(scope="module")
def v():
    with Sandbox(workers=2, timeout_s=2.0) as sb:
        yield Verifier(sb, timeout_s=2.0)


def _judge(v, kind: str, task: Task, completion: str, mode: str = "strict", fmt: str = "direct"):
    """What the solve phase does with one completion: parse it, then check it; None when it does not parse."""
    answer = KINDS[kind].parse_answer(completion, fmt)
    return None if answer is None else v.check(KINDS[kind].check_answer(task, answer, mode))


def test_azr_check_judges_expressions_by_python_equality(v):
    # AZR's eval(gold) == eval(answer): an expression is an answer, and 2.0 is 2
    task = Task(id="t", kind="code_o", program="def f(s):\n    return s * 2", input="'ab'")
    task.output = v.validate(task.program, task.input).output
    for answer, right in (("'ab' * 2", True), ("'abab'", True), ("'ab'", False), ("1 / 0", False)):
        done = _judge(v, "code_o", task, f"reasoning</think>\n<answer>```output\n{answer}\n```</answer>", "azr", "azr")
        assert (done.valid, done.correct) == (True, right), (answer, done)
    two = Task(id="n", kind="code_o", program="def f(a):\n    return a + 1", input="1", output="2")
    assert _judge(v, "code_o", two, "2.0\n```", "azr").correct is True
    assert _judge(v, "code_o", two, "2.0\n```", "strict").correct is False
    # the last output block is the answer (AZR reads the last one)
    both = "x</think><answer>```output\n3\n```\nno wait\n```output\n2\n```</answer>"
    assert _judge(v, "code_o", two, both, "azr", "azr").correct is True


@pytest.mark.parametrize("returns, right, wrong", [
    ("float('nan')", "float('nan')", "float('inf')"),
    ("float('inf')", "float('inf')", "float('-inf')"),
    ("-a * float('inf')", "float('-inf')", "float('nan')"),
    ("frozenset({a})", "frozenset({1})", "{1}"),
    ("(frozenset(), {a: float('nan')})", "(frozenset(), {1: float('nan')})", "(set(), {1: float('nan')})"),
    ("complex(a, -2)", "complex(1.0, -2.0)", "complex(1.0, 2.0)"),
    ("bytes([a, 255])", "b'\\x01\\xff'", "'\\x01\\xff'"),
])
def test_code_o_canonical_answers_are_judged_on_their_value(v, returns, right, wrong):
    task = Task(id="t", kind="code_o", program=f"def f(a):\n    return {returns}", input="1")
    shown = v.validate(task.program, task.input).output  # the gold output, in canonical text
    assert shown == right
    good = _judge(v, "code_o", task, f"{right}\n```")
    assert good is not None and (good.valid, good.correct, good.status) == (True, True, "ok"), good
    bad = _judge(v, "code_o", task, f"{wrong}\n```")
    assert bad is not None and (bad.valid, bad.correct, bad.status) == (True, False, "wrong"), bad


def test_code_i_student_sees_canonical_output_and_answers(v):
    task = Task(id="t", kind="code_i", program="def f(x):\n    return x * float('inf')", input="2")
    task.output = v.validate(task.program, task.input).output
    assert task.output == "float('inf')"
    assert "float('inf')" in KINDS["code_i"].student_prompt(task, "direct")[0][-1]["content"]
    assert _judge(v, "code_i", task, "3\n```").correct is True
    assert _judge(v, "code_i", task, "-3\n```").correct is False


@pytest.mark.parametrize("value", [
    float("nan"), float("-inf"), -0.0, frozenset({1, 2}), {frozenset(): (b"x", None)}, set(), -(10**300), 2 - 1j,
    [(), (1,), {"a": [True, 1.5]}],
], ids=lambda x: type(x).__name__)
def test_every_canonical_text_is_a_well_formed_answer(value):
    # (within the answer length budget, parsing.MAX_ANSWER_CHARS: a size limit, not a grammar rule)
    assert literal(canonical(value)) == canonical(value)


def test_answers_outside_the_grammar_are_format_errors():
    for text in ("__import__('os')", "1 + 1", "[x for x in y]", "float(1)", "{[1]}"):
        assert literal(text) is None, text


def test_every_kind_implements_the_interface_and_builds_a_check():
    task = Task(id="t", kind="", program="def f(x):\n    return x", input="1", output="1",
                inputs=["1", "2", "3", "4"], outputs=["1", "2", "3", "4"])
    for name, kind in KINDS.items():
        assert isinstance(kind, TaskKind) and kind.name == name
        assert isinstance(kind.check_answer(task, "1" if name != "code_f" else task.program), Check)


class _Buffers:
    """Stands in for TaskBuffers: the one reference program every kind draws."""

    def __init__(self):
        self.ref = Task(id="r", kind="code_o", program="def f(a):\n    return a", input="[1, 2]", output="[1, 2]")

    def sample(self, kind, k, rng):
        return [self.ref][:k]

    def programs(self, rng):
        return self.ref


@pytest.mark.parametrize("kind, completion", [
    ("code_o", "s):\n    return s * 2\n```\n```input\n'ab'\n```"),
    ("code_i", "s):\n    return s * 2\n```\n```input\n'ab'\n```"),
    ("code_f", "1\n```\n```input\n[3]\n```\n```input\n'x'\n```\n```message\nechoes\n```"),
])
def test_teacher_prompt_and_proposal_per_kind(kind, completion):
    cfg = TasksConfig(format="direct", code_f_inputs=3)
    task = Task(id="t", kind=kind, program="")
    messages, prefill = KINDS[kind].teacher_prompt(task, _Buffers(), None, cfg)
    assert messages[0]["role"] == "system" and messages[-1]["role"] == "user" and prefill.startswith("```")
    KINDS[kind].parse_proposal(completion, task, cfg)
    assert task.reason == "" and task.program.startswith("def f(")
    assert (task.inputs == ["1", "[3]", "'x'"]) if kind == "code_f" else (task.input == "'ab'")


def test_the_three_azr_bugs_of_issue_32_stay_fixed(v):
    # AZR (custom_evaluate.py:86-98) reads after the last <answer>; evaluates a code_o answer as an expression
    # (python_executor.py:193), so a trailing comment is harmless; runs a code_f answer with the task program's
    # imports in front (python_executor.py:169-172)
    task = Task(id="t", kind="code_o", program="def f(s):\n    return s * 2", input="'ab'")
    task.output = v.validate(task.program, task.input).output
    mention = "I will give the <answer> at the end.</think>\n<answer>\n'abab'\n</answer>"
    assert _judge(v, "code_o", task, mention, "azr", "azr").correct is True
    commented = "x</think><answer>\n```output\n'abab'  # doubled\n```\n</answer>"
    assert _judge(v, "code_o", task, commented, "azr", "azr").correct is True
    imports = Task(id="m", kind="code_f", program="import math\ndef f(x):\n    return math.isqrt(x) + x % 3",
                   inputs=["17", "0", "5", "100"])
    answer = "x</think><answer>```python\ndef f(x):\n    return math.isqrt(x) + x % 3\n```</answer>"
    assert _judge(v, "code_f", imports, answer, "azr", "azr").correct is True
    # an empty or unparseable answer in a good layout is wrong (-0.5), not a format error (-1)
    for empty in ("x</think><answer></answer>", "x</think><answer>```input\n(\n```</answer>"):
        done = _judge(v, "code_i", Task(id="i", kind="code_i", program=task.program, output=task.output), empty, "azr", "azr")
        assert done is not None and done.correct is False
