"""AZR's decision functions, ported as the reference our task rules are tested against.

Source: LeapLabTHU/Absolute-Zero-Reasoner, branch ``paper``, commit 41ed983cdf541cfcd2f963f33c055d50074f3c90
(paths below are under ``absolute_zero_reasoner/``), run as ``scripts/selfplay/7b.sh`` configures it on top of
``configs/azr_ppo_trainer.yaml``. Each function cites the lines it ports. What AZR decides in-process from model
text (its ``exec``/``eval`` of programs and answers) runs here in forked children with a wall-clock limit
(``azr_runner.py``), never in the test process. The port keeps AZR's defects (they are what it does); the
differential test lists where we depart from them on purpose.

Checked once against AZR's own modules (``compare_upstream.py``, run by hand with the mirror: CI has none).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

COMMIT = "41ed983cdf541cfcd2f963f33c055d50074f3c90"

# configs/azr_ppo_trainer.yaml:237-254 (data_selection_strategy.banned_words)
BANNED_WORDS = ["logging", "random", "multiprocessing", "pebble", "subprocess", "threading", "datetime", "time",
                "hashlib", "hmac", "bcrypt", "os.sys", "os.path", "sys.exit", "os.environ", "calendar", "datetime"]
TIMEOUT_S = 10.0        # configs/azr_ppo_trainer.yaml:209 (execute_max_timeout)
NUM_INPUTS = 10         # configs/azr_ppo_trainer.yaml:236 (num_inputs)
N_SAMPLES = 8           # scripts/selfplay/7b.sh (azr.reward.n_samples=8)
SPLITTER = "Assistant:"  # configs/azr_ppo_trainer.yaml:186 (reward_fn.splitter)
TRUNCATE = 400          # python_executor.py:352 (truncate max_length)

# ----------------------------------------------------------------------------------------- the executor


class Executor:
    """``PythonExecutor(timeout_length=10, ast_check=True)`` (trainer/ppo/azr_ray_trainer.py:590-594; 7b.sh sets
    ``azr.ast_check=True``): ``apply`` runs a snippet in a child process (``azr_runner.py``)."""

    def __init__(self, timeout_s: float = TIMEOUT_S):
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("azr_runner.py"))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)

    def _job(self, job: dict) -> dict:
        self.proc.stdin.write(json.dumps({**job, "timeout": self.timeout_s}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def apply(self, code: str) -> tuple[str, str]:
        """``apply`` / ``batch_apply`` (python_executor.py:348-417): (result, report), both stripped and cut to
        400 characters."""
        out = self._job({"op": "exec", "code": code})
        return truncate(out["result"].strip()), truncate(out["report"].strip())

    def trainer_truthy(self, expr: str, **names: str) -> bool | None:
        """An ``eval`` AZR runs in the trainer itself: its truth, None if it raised."""
        out = self._job({"op": "eval", "expr": expr, "names": names})
        return None if out["raised"] else out["truthy"]

    # python_executor.py:260-300, check_error=False (reward_managers.py:226: only code_e checks errors)
    def check_all(self, code: str, inputs: str, banned_keywords: list[str], imports: list[str]) -> tuple[bool, str | None]:
        if imports:
            code = "\n".join(imports) + "\n" + code
        if contains_banned_imports(code, banned_keywords):
            return False, None
        snippet = CHECK_DETERMINISM_TEMPLATE.format(code=code, inputs=inputs)
        if not parses(snippet):
            return False, "error"
        output, status = self.apply(snippet)
        return "error" not in status.lower(), output

    def _truth_of(self, snippet: str) -> float | None:
        """The tail of eval_input/output_prediction (python_executor.py:179-189, :207-217): 0 if the report says
        error, else the truth of ``eval(correct)`` in the trainer; when that eval raises, AZR retries three
        times and returns None."""
        correct, status = self.apply(snippet)
        if "error" in status.lower():
            return 0.0
        truth = {"True": True, "False": False}.get(correct)
        if truth is None:
            truth = self.trainer_truthy(correct)
        return None if truth is None else (1.0 if truth else 0.0)

    # python_executor.py:168-189
    def eval_input_prediction(self, code: str, gold_output: str, agent_input: str, imports: list[str]) -> float | None:
        if imports:
            code = "\n".join(imports) + "\n" + code
        snippet = EVAL_INPUT_PREDICTION_TEMPLATE.format(code=code, gold_output=gold_output, agent_input=agent_input)
        if not parses(snippet):
            return 0.0
        return self._truth_of(snippet)

    # python_executor.py:191-217
    def eval_output_prediction(self, code: str, gold_output: str, agent_output: str, imports: list[str]) -> float | None:
        # the fast path runs in the trainer, where the method's locals are in scope (python_executor.py:192-196)
        if self.trainer_truthy("eval(gold_output) == eval(agent_output)", code=code, gold_output=gold_output,
                               agent_output=agent_output):
            return 1.0
        if imports:
            code = "\n".join(imports) + "\n" + code
        snippet = EVAL_OUTPUT_PREDICTION_TEMPLATE.format(code=code, gold_output=gold_output, agent_output=agent_output)
        if not parses(snippet):
            return 0.0
        return self._truth_of(snippet)


def truncate(s: str, max_length: int = TRUNCATE) -> str:
    """python_executor.py:351-356"""
    half = max_length // 2
    return s[:half] + "..." + s[-half:] if len(s) > max_length else s


def parses(code: str) -> bool:
    """The ``ast_check`` (python_executor.py:147-151 and the like): a snippet that does not parse never runs."""
    try:
        ast.parse(code)
        return True
    except BaseException:  # AZR's bare except (SyntaxError, ValueError on NUL bytes, RecursionError, ...)
        return False


# utils/code_utils/templates.py:4-20
RUN_CODE_TEMPLATE = "{code}\nrepr(f({inputs}))"
EVAL_INPUT_PREDICTION_TEMPLATE = "{code}\n{gold_output} == f({agent_input})"
EVAL_OUTPUT_PREDICTION_TEMPLATE = "{code}\neval({gold_output}) == eval({agent_output})"
CHECK_DETERMINISM_TEMPLATE = ("{code}\nreturns = f({inputs})\nif returns != f({inputs}):\n"
                              "    raise Exception('Non-deterministic code')\nrepr(returns)")

# ---------------------------------------------------------------------------------------- static checks


def contains_banned_imports(code: str, banned_keywords: list[str]) -> bool:
    """checks.py:20-57 (without the error keywords: reward_managers.py:227 passes them for code_e only)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return any(re.search(rf"\b{re.escape(b)}\b", code) for b in banned_keywords)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(any(b in alias.name.split(".") for b in banned_keywords) for alias in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            module = node.module.split(".") if node.module else []
            if any(b in module for b in banned_keywords):
                return True
            if any(any(b in alias.name.split(".") for b in banned_keywords) for alias in node.names):
                return True
    return False


def parse_imports(code: str) -> list[str]:
    """parsers.py:6-33"""
    imports = []
    try:
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                imports.append("import " + ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names))
            elif isinstance(node, ast.ImportFrom):
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
                imports.append(f"from {'.' * node.level}{node.module or ''} import {names}")
    except Exception:
        imports = [i.strip() for i in re.findall(r"^\s*(?:from|import)\s+.*$", code, re.MULTILINE)]
    return imports


# ------------------------------------------------------------------------------------------------ parsing


def generation_of(response: str) -> str:
    """What the reward manager reads (reward_managers.py:133-142): the decoded prompt + response split at the
    ``Assistant:`` that ends the prompt (process_data.py:51), so the text starts with the prompt's ``<think>``
    and ends at any later ``Assistant:``; then stripped of whitespace and quotes."""
    return ("Assistant: <think>" + response).split(SPLITTER)[1].strip().strip("\"'")


def extract_answer(text: str) -> str:
    """custom_evaluate.py:86-98 (extraction_type ``answer_conditional``, 7b.sh; boxed_retry False): after the
    last ``<answer>``, up to the next ``</answer>``."""
    if "<answer>" not in text:
        return ""
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def format_ok(generation: str) -> bool:
    """get_format_reward, custom_evaluate.py:113-123 (``re.match``: anchored at the start only)."""
    return re.match(r"(?s)<think>.*?</think>\s*<answer>.*?</answer>", generation) is not None


_FLAGS = re.DOTALL | re.IGNORECASE


def extract_input_output(content: str, want: str) -> str:
    """reward_managers.py:76-119: the last ``input``/``output`` block, else the fallbacks in order, else the
    whole answer. ``want``: ``input`` or ``output``."""
    patterns = [rf"```{want}\s*\n?(.*?)\n?```", rf"# {want.capitalize()}:\s*(.*?)(?=\n```|$)",
                rf"{want}\s*\((.*?)\)", rf"<{want}>\s*(.*?)(?:</{want}>|\s*$)", rf"the {want} is\s*(.*?)\.?$"]
    for pattern in patterns:
        matches = list(re.finditer(pattern, content, _FLAGS))
        if matches:
            return matches[-1].group(1)
    return content


def parse_code_input_output(text: str) -> tuple[bool, dict]:
    """code_reward.py:291-394 with AZR's settings (azr_ppo_trainer.yaml:264-275, 7b.sh): parse_output False,
    reject_multiple_functions True, f_replace_location not_first, nothing removed."""
    code_match = re.search(r"```(?:python\s*)?\n?(.*?)\n?```", text, _FLAGS)
    input_match = re.search(r"```input\s*\n?(.*?)\n?```", text, _FLAGS)
    if not input_match:
        input_match = re.search(r"# Input:\s*(.*?)(?=\n```|$)", text, _FLAGS)
    if not code_match or not input_match:
        return False, {}
    code, inputs = code_match.group(1).strip(), input_match.group(1).strip()
    defs = re.findall(r"^\s*def\s+(\w+)\s*\(", code, re.MULTILINE)
    if not defs or len(defs) > 1:
        return False, {}
    if defs[0] != "f":
        code = re.sub(rf"def\s+{re.escape(defs[0])}\s*\(", "def f(", code)
        code = re.sub(rf"\b{re.escape(defs[0])}\s*\(", "f(", code)
    return True, {"code": code, "input": inputs, "imports": parse_imports(code)}


def parse_inputs_message(text: str, num_inputs: int = NUM_INPUTS) -> tuple[bool, dict]:
    """code_reward.py:397-453 (its ``# Input:`` fallback never runs: ``re.finditer`` is never falsy)."""
    inputs = [m.group(1).strip() for m in re.finditer(r"```input\s*\n?(.*?)\n?```", text, _FLAGS)]
    if len(inputs) < num_inputs:
        return False, {}
    message = (re.search(r"```message\s*\n?(.*?)\n?```", text, _FLAGS)
               or re.search(r"<message>\s*(.*?)\s*</message>", text, _FLAGS)
               or re.search(r"# Message:\s*(.*?)(?=\n```|$)", text, _FLAGS))
    if not message:
        return False, {}
    return True, {"inputs": inputs[-num_inputs:], "message": message.group(1).strip()}


def parse_code_function(text: str) -> tuple[bool, str]:
    """code_reward.py:456-474: the last fenced block, of any label."""
    matches = list(re.finditer(r"```(?:python\s*)?\n?(.*?)\n?```", text, _FLAGS))
    return (True, matches[-1].group(1).strip()) if matches else (False, "")


# ------------------------------------------------------------------------------------------ decisions


@dataclass
class Task:
    """A valid task as AZR stores it (reward_managers.py:234-241, :274-281): the program, its imports, and
    golds as repr text."""
    kind: str
    program: str
    imports: list[str] = field(default_factory=list)
    input: str = ""
    output: str = ""
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    message: str = ""

    @property
    def hidden(self) -> list[tuple[str, str]]:
        """reward_managers.py:591-596: the second half of the inputs and outputs is held out."""
        half = len(self.inputs) // 2
        return list(zip(self.inputs[half:], self.outputs[len(self.outputs) // 2:]))


@dataclass
class Proposal:
    format_ok: bool            # data_dict['format_score'] > 0
    valid: bool                # data_dict['code_validity']
    task: Task | None = None   # set when valid (AZR keeps valid programs even with a bad layout)


def judge_proposal(ex: Executor, kind: str, response: str, source: Task | None = None) -> Proposal:
    """A proposer's response (after the prompt's ``<think>``): reward_managers.py:185-250 (code_i/code_o) and
    :252-289 (code_f, inputs for ``source``, checked with no banned words and the source's imports)."""
    generation = generation_of(response)
    content = extract_answer(generation)
    if kind == "code_f":
        ok, parsed = parse_inputs_message(content)
        if not ok or len(parsed["inputs"]) != NUM_INPUTS:
            return Proposal(False, False)
        outputs = []
        for x in parsed["inputs"]:
            valid, output = ex.check_all(source.program, x, [], source.imports)
            if not valid:
                return Proposal(False, False)
            outputs.append(output)
        task = Task("code_f", source.program, source.imports, inputs=parsed["inputs"], outputs=outputs,
                    message=parsed["message"])
        return Proposal(format_ok(generation), True, task)
    ok, parsed = parse_code_input_output(content)
    if not ok:
        return Proposal(False, False)
    valid, output = ex.check_all(parsed["code"], parsed["input"], BANNED_WORDS, list(dict.fromkeys(parsed["imports"])))
    if not valid:
        return Proposal(False, False)
    task = Task(kind, parsed["code"], parsed["imports"], input=parsed["input"], output=output)
    return Proposal(format_ok(generation), True, task)


def code_f_accuracy(ex: Executor, task: Task, program: str) -> float:
    """One code_f program's binary accuracy on the held-out pairs (reward_managers.py:489-503, :783-798):
    None results are left out of the mean; no results at all is 0."""
    accs = [ex.eval_input_prediction(program, y, x, list(dict.fromkeys(task.imports))) for x, y in task.hidden]
    accs = [a for a in accs if a is not None]
    mean = sum(accs) / len(accs) if accs else 0.0
    return 1.0 if mean == 1.0 else 0.0  # code_f_reward_type: binary (7b.sh)


def answer_accuracy(ex: Executor, task: Task, content: str) -> float | None:
    """The accuracy of an answer (the text inside its ``<answer>``), as the solver's reward and the estimate
    both compute it (reward_managers.py:294-332 parse, :464-509 and :745-798 check). None: AZR's ``None``."""
    imports = list(dict.fromkeys(task.imports))
    if task.kind == "code_i":
        return ex.eval_input_prediction(task.program, task.output, extract_input_output(content, "input"), imports)
    if task.kind == "code_o":
        return ex.eval_output_prediction(task.program, task.output, extract_input_output(content, "output"), imports)
    ok, program = parse_code_function(content)
    return code_f_accuracy(ex, task, program) if ok else None


def solver_reward(ex: Executor, task: Task, response: str) -> float:
    """A solver's reward on the train split (reward_managers.py:292-332 and :451-519): -1 for a format error
    (the layout, or for code_f no fenced block), -0.5 for a well-formed answer that is not right, else its
    accuracy (1)."""
    generation = generation_of(response)
    content = extract_answer(generation)
    if not format_ok(generation):
        return -1.0
    if task.kind == "code_f" and not parse_code_function(content)[0]:
        return -1.0
    acc = answer_accuracy(ex, task, content)
    acc = 0.0 if acc is None else acc  # reward_managers.py:467-469, :477-479
    return acc if acc > 0 else -0.5


def solve_rate(ex: Executor, task: Task, responses: list[str]) -> float:
    """The teacher's solve-rate estimate (reward_managers.py:720-799): every response's answer read without the
    format check (:689-693, :728-734), identical answers cached (:735), None results left out (:754-756)."""
    accs, cache = [], {}
    for response in responses:
        content = extract_answer(response)
        if task.kind == "code_f":
            ok, program = parse_code_function(content)
            accs.append(code_f_accuracy(ex, task, program) if ok else 0.0)
            continue
        answer = extract_input_output(content, "input" if task.kind == "code_i" else "output")
        if answer not in cache:
            cache[answer] = answer_accuracy(ex, task, content)
        if cache[answer] is not None:
            accs.append(cache[answer])
    return sum(accs) / len(accs) if accs else 0.0


def proposer_reward(proposal: Proposal, acc: float | None) -> float:
    """reward_managers.py:818-819 (one_minus) and :391-436 (no intrinsic rewards: 7b.sh disables them):
    -1 unless well-formed and valid; 1 - acc for 0 < acc < 1; else -0.5."""
    if not (proposal.format_ok and proposal.valid):
        return -1.0
    reward = (1 - acc) if acc > 0 else 0.0
    return reward if reward > 0 else -0.5
