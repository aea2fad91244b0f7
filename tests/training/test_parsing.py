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
    task = KINDS["code_o"].parse_proposal(text, Task(id="t", kind="code_o", program=""), TasksConfig(format="direct"))
    assert task.program == "def f(s):\n    return s * 2"
    assert task.input == "'ab'"
    assert task.reason == ""


def test_proposal_without_input_is_a_format_failure():
    task = KINDS["code_i"].parse_proposal("n):\n    return n\n```\nno input here", Task(id="t", kind="code_i", program=""),
                                     TasksConfig(format="direct"))
    assert task.reason.startswith("format:")


def test_code_f_proposal_keeps_distinct_valid_inputs():
    text = "1\n```\n```input\n1\n```\n```input\nf(2)\n```\n```input\n)bad(\n```\n```message\nadds one\n```"
    task = KINDS["code_f"].parse_proposal(text, Task(id="t", kind="code_f", program="def f(x):\n    return x + 1"),
                                          TasksConfig(code_f_inputs=2, format="direct"))
    assert task.inputs == ["1", "2"]
    assert task.message == "adds one"
    assert task.reason == ""


def test_code_f_proposal_needs_exactly_the_asked_number_of_inputs():
    # AZR drops a code_f proposal whose input count is not num_inputs; extra inputs beyond it are not kept
    text = "1\n```\n```input\n1\n```\n```input\nf(2)\n```\n```input\n)bad(\n```\n```message\nadds one\n```"
    task = KINDS["code_f"].parse_proposal(text, Task(id="t", kind="code_f", program="def f(x):\n    return x + 1"),
                                          TasksConfig(code_f_inputs=4, format="direct"))
    assert task.inputs == ["1", "2"] and task.reason == "format: 2 distinct valid inputs, need 4"
    ten = "\n".join(f"```input\n{i}\n```" for i in range(12)) + "\n```message\ncounts\n```"
    task = KINDS["code_f"].parse_proposal(f"ok</think><answer>{ten}</answer>", Task(id="t", kind="code_f", program="p"),
                                          TasksConfig(format="azr"))
    assert task.inputs == [str(i) for i in range(10)] and task.reason == "" and task.message == "counts"


def test_answers_per_kind():
    assert KINDS["code_o"].parse_answer("[3, 4]\n```", "direct") == "[3, 4]"
    # AZR: any non-empty answer is well-formed; "the answer is 4" is a wrong answer (the check), not a format error
    assert KINDS["code_o"].parse_answer("the answer is 4", "direct") == "the answer is 4"
    assert KINDS["code_o"].parse_answer("\n```", "direct") is None
    # the verifier's canonical forms are answers too (they used to be format errors: -1 for a right answer)
    for canonical in ("float('nan')", "float('-inf')", "frozenset({1})", "set()", "complex(1.0, 2.0)"):
        assert KINDS["code_o"].parse_answer(canonical + "\n```", "direct") == canonical
    assert KINDS["code_i"].parse_answer("f(7)\n```", "direct") == "7"
    assert KINDS["code_f"].parse_answer("x):\n    return x + 1\n```", "direct") == "def f(x):\n    return x + 1"
    assert KINDS["code_f"].parse_answer("I cannot", "direct") is None


def test_azr_answers_are_read_from_the_answer_block_only():
    think = "f adds one to 3, so 4.</think>\n"
    assert KINDS["code_o"].parse_answer(think + "<answer>\n```output\n4\n```\n</answer>", "azr") == "4"
    assert KINDS["code_o"].parse_answer(think + "<answer>4</answer>", "azr") == "4"
    # AZR takes a code_i answer as written (reward_managers.py:76-101): f(3) is the call f(f(3)), not 3
    assert KINDS["code_i"].parse_answer(think + "<answer>```input\nf(3)\n```</answer>", "azr") == "f(3)"
    code = "<answer>```python\ndef f(x):\n    return x + 1\n```</answer>"
    assert KINDS["code_f"].parse_answer(think + code, "azr") == "def f(x):\n    return x + 1"
    # AZR's fallbacks: "The output is X.", <input> tags; the answer after the last <answer>
    assert KINDS["code_o"].parse_answer(think + "<answer>The output is 'ab'.</answer>", "azr") == "'ab'"
    assert KINDS["code_i"].parse_answer(think + "<answer><input>3</input></answer>", "azr") == "3"
    assert KINDS["code_o"].parse_answer("an <answer> comes.</think><answer>4</answer>", "azr") == "4"
    # reasoning text is not an answer; a missing or malformed layout is a format error
    for bad in ("```output\n4\n```", think + "<answer>4", "<answer>4</answer>", think + "The answer is 4."):
        assert KINDS["code_o"].parse_answer(bad, "azr") is None, bad
    # an empty answer in a well-formed layout is a wrong answer (AZR: -0.5), not a format error
    assert KINDS["code_o"].parse_answer(think + "<answer></answer>", "azr") == ""
    # code_f: no fenced block is AZR's format error (code_reward.py:456-474)
    assert KINDS["code_f"].parse_answer(think + "<answer>def f(x):\n    return x</answer>", "azr") is None
    # the direct format's prefilled fence means nothing in azr: the same text is a format error there
    assert KINDS["code_o"].parse_answer("[3, 4]\n```", "azr") is None


def test_azr_proposal_from_the_answer_block():
    text = ("I will nest two loops.</think>\n<answer>\n```python\ndef f(n):\n    return sum(i * j for i in range(n) "
            "for j in range(i))\n```\n```input\n4\n```\n</answer>")
    task = KINDS["code_i"].parse_proposal(text, Task(id="t", kind="code_i", program=""), TasksConfig(format="azr"))
    assert task.reason == "" and task.program.startswith("def f(n):") and task.input == "4"
    # a program in the reasoning but not in the answer does not count
    task = KINDS["code_o"].parse_proposal("```python\ndef f(a):\n    return a\n```\n```input\n1\n```</think>",
                                          Task(id="t", kind="code_o", program=""), TasksConfig(format="azr"))
    assert task.reason.startswith("format:")


def test_solve_prompts_show_what_the_student_needs():
    task = Task(id="t", kind="code_f", program="def f(x):\n    return x + 1", inputs=["1", "2", "3", "4"],
                outputs=["2", "3", "4", "5"], message="adds one")
    messages, prefill = KINDS["code_f"].student_prompt(task, "direct")
    question = messages[-1]["content"]
    assert "f(1) == 2" in question and "f(2) == 3" in question
    assert "f(3)" not in question and "f(4)" not in question  # held out
    assert "return x + 1" not in question  # the program itself is hidden
    assert prefill.startswith("```python")
    assert task.held_out == ["3", "4"]
