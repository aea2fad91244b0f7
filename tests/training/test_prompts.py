"""Reasoning format (azr | direct), prompts per kind and role, ``populora prompts``, code_f validation and
step-0 seeding of the buffers by the base model (bounded, with a tagged hand-written fallback)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import cli_in_process
from populora.platform import config as config_io
from populora.platform.backends import BASE, Generation
from populora.platform.sandbox import Sandbox
from populora.platform.sandbox.verifier import Verifier
from populora.training.phases.buffers import AZR_SEED, TaskBuffers
from populora.training.config import TasksConfig, TrainConfig
from populora.training.phases.seeding import initial_buffers, seed_buffers
from populora.training.tasks import KINDS, Task
from populora.training.tasks.show import build
from populora.training.phases.validate import validate

CONFIGS = Path(__file__).parents[2] / "configs"


@pytest.fixture(scope="module")
def v():
    with Sandbox(workers=2, timeout_s=2.0) as sb:
        yield Verifier(sb, timeout_s=2.0)


# ------------------------------------------------------------------------------------------------ format config
def test_format_defaults_azr_except_for_the_embedded_model_and_explicit_values_win():
    assert TrainConfig().tasks.format == "direct"  # embedded base, field not set
    assert TrainConfig(model={"base": "Qwen/Qwen2.5-7B"}).tasks.format == "azr"
    assert TrainConfig(tasks={"format": "azr"}).tasks.format == "azr"
    assert config_io.load(TrainConfig, str(CONFIGS / "smoke.yaml"), []).tasks.format == "direct"
    for preset in ("paper-1t1s", "paper-4t4s", "paper-4t8s", "paper-baseline"):
        tc = config_io.load(TrainConfig, str(CONFIGS / f"{preset}.yaml"), []).tasks
        assert (tc.format, tc.code_f_inputs) == ("azr", 10), preset
    # smoke.yaml names its format itself (the demo's reduction is written down, not implied)
    assert "format: direct" in (CONFIGS / "smoke.yaml").read_text()


# ------------------------------------------------------------------------------------------------ prompts
def test_paper_prompts_azr_template_three_distinct_teacher_prompts_and_reasoning_students(v):
    cfg = config_io.load(TrainConfig, str(CONFIGS / "paper-4t4s.yaml"), [])
    shown = build(cfg, ["code_o", "code_i", "code_f"], ["teacher", "student"], v)
    assert (shown["format"], shown["template"]) == ("azr", "azr")
    teacher = {p["kind"]: p["messages"][-1]["content"] for p in shown["prompts"] if p["role"] == "teacher"}
    student = {p["kind"]: p for p in shown["prompts"] if p["role"] == "student"}
    assert len(set(teacher.values())) == 3
    assert "deduction" in teacher["code_o"] and "abduction" in teacher["code_i"] and "induction" in teacher["code_f"]
    for kind in ("code_o", "code_i"):  # AZR's proposer requirements, point by point
        text = teacher[kind]
        assert "<reference_0>" in text and "different from the reference programs" in text
        assert "Custom classes are allowed" in text and "nested inside `f`" in text and "10 seconds" in text
        assert "multi-step reasoning" in text and "Start with a clear plan" in text
        assert "hashlib" in text and "comments included" in text  # the banned-keyword list is shown
    assert "Give 10 valid inputs" in teacher["code_f"] and "```message" in teacher["code_f"]
    assert "must not contain the program" in teacher["code_f"] and "f(<|YOUR INPUT WILL BE PLUGGED HERE|>)" in teacher["code_f"]
    for p in shown["prompts"]:  # AZR's template: one plain message, no system turn, ends in "Assistant: <think>"
        (m,) = p["messages"]
        assert m["role"] == "user" and p["prefill"] == "<think>"
        assert m["content"].startswith("This is a dialogue between a User and an Assistant") and "<answer>" in m["content"]
        assert (m["content"] + p["prefill"]).endswith("\nAssistant: <think>")
        assert "<|im_start|>" not in m["content"] and "reward" not in m["content"].lower()
    # each student sees what its kind needs and nothing more
    assert "```input" in student["code_o"]["messages"][-1]["content"]
    assert "```output" in student["code_i"]["messages"][-1]["content"]
    assert "def f(a)\n    return a\n```\n\n# Input" not in student["code_f"]["messages"][-1]["content"]


def test_chat_template_puts_the_layout_in_a_system_turn_and_azr_refuses_the_direct_format():
    from populora.platform.config import ConfigError
    from populora.training.tasks.prompts import frame

    task = Task(id="t", kind="code_o", program="def f(a):\n    return a", input="1", output="1")
    messages, prefill = frame(KINDS["code_o"].student_prompt(task, "azr"), "azr", "chat")
    assert [m["role"] for m in messages] == ["system", "user"] and prefill == "<think>"
    assert TrainConfig().tasks.template == "chat"  # embedded model: direct format, chat template
    assert TrainConfig(model={"base": "Qwen/Qwen2.5-7B"}).tasks.template == "azr"
    with pytest.raises(ConfigError, match="tasks.template"):
        config_io.load(TrainConfig, None, ["tasks.format=direct", "tasks.template=azr"])


def test_direct_prompts_are_prefilled_fences_and_distinct_per_kind(v):
    cfg = config_io.load(TrainConfig, str(CONFIGS / "smoke.yaml"), [])
    shown = build(cfg, ["code_o", "code_i", "code_f"], ["teacher", "student"], v)
    asks = {(p["kind"], p["role"]): p for p in shown["prompts"]}
    assert asks["code_o", "teacher"]["messages"][-1] != asks["code_i", "teacher"]["messages"][-1]
    assert all(p["prefill"].startswith("```") for p in shown["prompts"])
    assert not any("<think>" in m["content"] for p in shown["prompts"] for m in p["messages"])


def test_prompts_cli_json_contract(mlflow_store, capsys):
    code = cli_in_process("prompts", "--config", str(CONFIGS / "paper-4t4s.yaml"), "--json")
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    shown = json.loads(out.out.strip().splitlines()[-1])
    assert (shown["format"], shown["template"]) == ("azr", "azr")
    assert "reward" not in json.dumps(shown).lower()  # AZR's proposer never hears its reward rule
    assert [(p["kind"], p["role"]) for p in shown["prompts"]] == [
        (k, r) for k in ("code_o", "code_i", "code_f") for r in ("teacher", "student")]
    for p in shown["prompts"]:
        assert set(p) == {"kind", "role", "messages", "prefill"}
        assert all(set(m) == {"role", "content"} for m in p["messages"])
    code = cli_in_process("prompts", "--config", str(CONFIGS / "smoke.yaml"), "--kind", "code_f", "--role", "student", "--json")
    one = capsys.readouterr()
    assert code == 0, one.err[-2000:]
    assert "a reduction" in one.out  # the direct format is named as one
    shown = json.loads(one.out.strip().splitlines()[-1])
    assert shown["format"] == "direct" and [(p["kind"], p["role"]) for p in shown["prompts"]] == [("code_f", "student")]


# ------------------------------------------------------------------------------------------------ code_f validation
def _code_f(inputs: list[str], program: str = "def f(x):\n    return 10 // x") -> Task:
    return Task(id="t", kind="code_f", program=program, inputs=list(inputs), teacher="T0", step=1)


def test_code_f_ten_inputs_five_shown_five_held_out(v):
    task = _code_f([str(i) for i in range(1, 11)])
    validate(v, [task], TaskBuffers(["code_f"], 8), set())
    assert task.valid and task.reason == "ok"
    assert task.outputs == [str(10 // i) for i in range(1, 11)]
    assert [x for x, _ in task.shown] == [str(i) for i in range(1, 6)]
    assert task.held_out == [str(i) for i in range(6, 11)]
    prompt = KINDS["code_f"].student_prompt(task, "azr")[0][-1]["content"]
    assert all(f"```input_{i - 1}\n{i}\n```" in prompt for i in range(1, 6))
    assert "```input_5" not in prompt and "```input_4\n10\n" not in prompt  # the held-out ones stay hidden


def test_code_f_one_failing_input_invalidates_the_task(v):
    task = _code_f([str(i) for i in range(0, 10)])  # f(0) divides by zero
    buffers = TaskBuffers(["code_f"], 8)
    validate(v, [task], buffers, set())
    assert not task.valid and "input 0 does not run" in task.reason
    assert len(buffers) == 0
    same = _code_f(["1", "2", "3", "4"], program="def f(x):\n    return 7")
    validate(v, [same], buffers, set())
    assert not same.valid and "nothing to induce" in same.reason


# ------------------------------------------------------------------------------------------------ seeding
class ScriptedBase:
    """Stands in for the model backend at step 0: answers every propose prompt from a script, records calls."""

    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def encode_chat(self, messages, prefill=""):
        return messages[-1]["content"] + "\n" + prefill

    def generate(self, prompts, adapters, max_new_tokens, **kwargs):
        self.calls.append((len(prompts), list(adapters), kwargs.get("stop")))
        return [Generation(p, self.reply(p, i), [1], [2]) for i, p in enumerate(prompts)]


def _azr_reply(prompt: str, i: int) -> str:
    if "induction" in prompt:
        body = "\n".join(f"```input\n{i + 100 * k}\n```" for k in range(10)) + "\n```message\nsame\n```"
    else:
        body = f"```python\ndef f(x):\n    return x * {i + 2} + {len(prompt) % 7}\n```\n```input\n{i}\n```"
    return f"plan</think>\n<answer>\n{body}\n</answer>"


def test_seeding_fills_each_buffer_with_base_model_proposals(v):
    tc = TasksConfig(format="azr", seed_buffer=5, seed_rounds=3)
    buffers = initial_buffers(v, ["code_o", "code_i", "code_f"], 64)
    assert {k: buffers.count(k) for k in buffers.kinds} == {"code_o": 1, "code_i": 1, "code_f": 1}  # AZR's seed
    base = ScriptedBase(_azr_reply)
    report = seed_buffers(base, v, buffers, tc, np.random.default_rng(0), seed=0)
    assert {k: buffers.count(k) for k in buffers.kinds} == {"code_o": 5, "code_i": 5, "code_f": 5}
    assert report.fallback == [] and report.rounds == 1 and report.valid == {"code_o": 4, "code_i": 4, "code_f": 4}
    (n, adapters, stop), = base.calls
    assert n == 12 and set(adapters) == {BASE} and stop == ("</answer>",)
    assert all(t.teacher in ("seed", "base") for k in buffers.kinds for t in buffers.buffers[k])


def test_seeding_is_bounded_and_falls_back_to_handwritten_programs(v):
    tc = TasksConfig(format="azr", seed_buffer=6, seed_rounds=2)
    buffers = initial_buffers(v, ["code_o", "code_i", "code_f"], 64)
    base = ScriptedBase(lambda p, i: "I am not sure what to write.")
    report = seed_buffers(base, v, buffers, tc, np.random.default_rng(0), seed=0)
    assert len(base.calls) == 2  # seed_rounds bounds the tries
    assert report.fallback == ["code_o", "code_i"] and "hand-written fallback" in report.summary()
    assert buffers.count("code_o") > 1 and buffers.count("code_i") > 1
    handwritten = [t for t in buffers.buffers["code_o"] if t.teacher == "handwritten"]
    assert handwritten and all(t.valid and t.output for t in handwritten)
    assert AZR_SEED[0] in [t.program for t in buffers.buffers["code_o"]]


def test_report_names_the_tasks_format():
    from populora.evaluation.cli import _format_note

    assert "direct (a reduction" in _format_note({"populora.tasks_format": "direct"})
    assert _format_note({"populora.tasks_format": "azr"}) == "tasks format: azr\n\n"
    assert _format_note({}) == ""  # runs from before the tag: nothing claimed


def test_code_f_azr_rules_last_inputs_duplicates_message_required_same_outputs_allowed(v):
    from populora.training.phases.validate import program_rules

    blocks = "\n".join(f"```input\n{i}\n```" for i in [1, 2, 3, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    azr = TasksConfig(format="azr", code_f_distinct_inputs=False, code_f_message_required=True,
                      code_f_distinct_outputs=False, single_function=True, extra_bans=False)
    task = KINDS["code_f"].parse_proposal(f"p</think><answer>{blocks}\n```message\nhi\n```</answer>",
                                          _code_f([]), azr)
    assert task.reason == "" and task.inputs == ["3", "3", "4", "5", "6", "7", "8", "9", "10", "11"]  # the last 10
    ours = KINDS["code_f"].parse_proposal(f"p</think><answer>{blocks}</answer>", _code_f([]), TasksConfig(format="azr"))
    assert ours.reason == "" and ours.inputs == [str(i) for i in range(1, 11)]  # the first 10 distinct
    silent = KINDS["code_f"].parse_proposal(f"p</think><answer>{blocks}</answer>", _code_f([]), azr)
    assert silent.reason.startswith("format: no message")
    same = _code_f(["1", "2", "3", "4"], program="def f(x):\n    return 7")
    validate(v, [same], TaskBuffers(["code_f"], 8), set(), program_rules(azr))
    assert same.valid  # AZR has no different-outputs rule


def test_azr_renames_the_first_function_to_f(v):
    text = "p</think><answer>```python\ndef solve(n):\n    return n and solve(n - 1)\n```\n```input\n3\n```</answer>"
    azr = KINDS["code_o"].parse_proposal(text, Task(id="t", kind="code_o", program=""), TasksConfig(format="azr", rename_to_f=True))
    assert azr.reason == "" and azr.program == "def f(n):\n    return n and f(n - 1)"
    ours = KINDS["code_o"].parse_proposal(text, Task(id="t", kind="code_o", program=""), TasksConfig(format="azr"))
    # without the rename the program is read as AZR reads it, and the sandbox refuses it: it defines no f
    assert ours.reason == "" and ours.program.startswith("def solve")
    assert "no top-level function f" in v.validate(ours.program, ours.input).reason


def test_azr_seeding_shares_one_pool_between_code_o_and_code_i(v):
    tc = TasksConfig(format="azr", seed_buffer=5, seed_rounds=1, seed_shared=True, kinds=["code_o", "code_i"])
    buffers = initial_buffers(v, ["code_o", "code_i"], 64)
    # the model writes nothing valid for code_i: its buffer fills from the code_o proposals
    base = ScriptedBase(lambda p, i: "no idea" if "abduction" in p else _azr_reply(p, i))
    seed_buffers(base, v, buffers, tc, np.random.default_rng(0), seed=0)
    programs = {k: [t.program for t in buffers.buffers[k]] for k in ("code_o", "code_i")}
    assert buffers.count("code_o") == buffers.count("code_i") == 5 and programs["code_o"] == programs["code_i"]
