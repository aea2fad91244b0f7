"""Lenient-but-safe parsing of model output for every task kind."""

from populora.training.config import TasksConfig
from populora.training.tasks import KINDS, Task
from populora.training.tasks.parsing import blocks, call_arguments, literal, parseable_program


def test_blocks_handles_unterminated_and_adjacent_fences():
    text = "```python\ndef f(a):\n    return a\n```\n```input\n3\n```\n```output\n[1"
    assert blocks(text) == [("python", "def f(a):\n    return a"), ("input", "3"), ("output", "[1")]


def test_parseable_program_drops_trailing_prose_but_needs_f():
    assert parseable_program("def f(x):\n    return x\nSure! This function returns x.") == "def f(x):\n    return x"
    assert parseable_program("def g(x):\n    return x") is None
    assert parseable_program("def f(x) return") is None


def test_literal_and_call_arguments():
    assert literal("{'a': (1, 2.5)}") == "{'a': (1, 2.5)}"
    assert literal("__import__('os')") is None
    assert literal("x" * 5000) is None
    assert call_arguments("f('ab', [1])") == "'ab', [1]"
    assert call_arguments("x = 5") == "5"
    assert call_arguments(")(") is None
    assert call_arguments("") is None


def test_code_o_proposal_from_prefilled_completion():
    # The prompt ends in "```python\ndef f(", so the completion starts mid-definition.
    text = "s):\n    return s * 2\n```\n\n```input\n'ab'\n```\nThis doubles s."
    task = KINDS["code_o"].parse_proposal(text, Task(id="t", kind="code_o", program=""), TasksConfig())
    assert task.program == "def f(s):\n    return s * 2"
    assert task.input == "'ab'"
    assert task.reason == ""


def test_proposal_without_input_is_a_format_failure():
    task = KINDS["code_i"].parse_proposal("n):\n    return n\n```\nno input here", Task(id="t", kind="code_i", program=""),
                                     TasksConfig())
    assert task.reason.startswith("format:")


def test_code_f_proposal_keeps_distinct_valid_inputs():
    text = "1\n```\n```input\n1\n```\n```input\nf(2)\n```\n```input\n)bad(\n```\n```message\nadds one\n```"
    task = KINDS["code_f"].parse_proposal(text, Task(id="t", kind="code_f", program="def f(x):\n    return x + 1"),
                                          TasksConfig(code_f_inputs=4))
    assert task.inputs == ["1", "2"]
    assert task.message == "adds one"


def test_answers_per_kind():
    assert KINDS["code_o"].parse_answer("[3, 4]\n```") == "[3, 4]"
    assert KINDS["code_o"].parse_answer("the answer is 4") is None
    # the verifier's canonical forms are answers too (they used to be format errors: -1 for a right answer)
    for canonical in ("float('nan')", "float('-inf')", "frozenset({1})", "set()", "complex(1.0, 2.0)"):
        assert KINDS["code_o"].parse_answer(canonical + "\n```") == canonical
    assert KINDS["code_i"].parse_answer("f(7)\n```") == "7"
    assert KINDS["code_f"].parse_answer("x):\n    return x + 1\n```") == "def f(x):\n    return x + 1"
    assert KINDS["code_f"].parse_answer("I cannot") is None


def test_solve_prompts_show_what_the_student_needs():
    task = Task(id="t", kind="code_f", program="def f(x):\n    return x + 1", inputs=["1", "2", "3", "4"],
                outputs=["2", "3", "4", "5"], message="adds one")
    messages, prefill = KINDS["code_f"].student_prompt(task)
    question = messages[-1]["content"]
    assert "f(1) == 2" in question and "f(2) == 3" in question
    assert "f(3)" not in question and "f(4)" not in question  # held out
    assert "return x + 1" not in question  # the program itself is hidden
    assert prefill.startswith("```python")
    assert task.held_out == ["3", "4"]
