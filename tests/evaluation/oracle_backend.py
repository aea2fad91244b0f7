"""The oracle backend (tests only): a scripted stand-in for a model that answers every benchmark item with its
reference, a harmlessly rewritten reference, a known-wrong answer, or a completion cut by the token budget.

It finds the item a prompt asks about by the item's own text inside the prompt (the longest match, so a question
that is a prefix of another is not taken for it), whatever the template around it. The answer mode is chosen per
adapter, by the name of the adapter dir it was loaded from (``reference``, ``rewritten``, ``wrong``,
``truncated``, ``sampled``); the bare base model answers in ``base_mode``. ``sampled`` answers k of the n
samples of an item right (the first k times it is asked, with the reference; then the wrong answer), k given per
benchmark and item position by ``right_of`` ({benchmark: [k of item 0, k of item 1, ...]}, 0 beyond the list),
so sampled evaluation's pass@1 per problem is known exactly: k / n. With it the evaluation pipeline can be checked
against known scores (100 % for references, 0 % for wrong answers) although no model here can solve anything.

References: math, the gold answer; HumanEval+ / MBPP+, EvalPlus's canonical solution; LiveCodeBench (our copy
has no reference solutions), a program that looks up each public test's input and prints its expected output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

from populora.evaluation.harness import benchmarks as B
from populora.evaluation.harness import evalplus_suite, livecodebench
from populora.evaluation.harness import math_grading as G
from populora.platform.backends import Generation

MODES = ("reference", "rewritten", "wrong", "truncated")
SAMPLED = "sampled"
WRONG_MATH = "-7919.5"


def rewrite_gold(gold: str) -> str:
    """A harmless rewrite of a math answer: 27 <-> 27.0, \\frac <-> \\dfrac, (a, b) -> \\left(a, b\\right).

    >>> rewrite_gold("27.0"), rewrite_gold("5"), rewrite_gold(r"\\frac{1}{2}")
    ('27', '5.0', '\\\\dfrac{1}{2}')
    """
    g = gold.strip()
    if re.fullmatch(r"-?\d+", g):
        return g + ".0"
    if re.fullmatch(r"-?\d+\.0+", g):
        return g.split(".")[0]
    out = g.replace("\\dfrac", "\\frac") if "\\dfrac" in g else g.replace("\\frac", "\\dfrac")
    if out.startswith("(") and out.endswith(")") and out.count("(") == 1 and out.count(")") == 1:
        out = "\\left(" + out[1:-1] + "\\right)"
    return out


def _lookup_program(record: dict, wrong: bool, rewritten: bool) -> str:
    tests = livecodebench.tests(record)
    method = livecodebench.method_name(record.get("starter_code") or "")
    if method is not None and all(t["testtype"] == "functional" for t in tests):
        table = {json.dumps([json.loads(line) for line in t["input"].split("\n") if line.strip()]): t["output"] for t in tests}
        body = "return '__wrong__'" if wrong else "import json\n        return json.loads(_T[json.dumps(list(args))])"
        return f"_T = {table!r}\nclass Solution:\n    def {method}(self, *args):\n        {body}\n"
    table = {t["input"].strip(): t["output"] for t in tests}
    if wrong:
        return "print('__wrong__')\n"
    tail = "print('\\n'.join(line + '  ' for line in out.split('\\n')) + '\\n')" if rewritten else "print(out)"
    return f"import sys\n_T = {table!r}\nout = _T[sys.stdin.read().strip()]\n{tail}\n"


class OracleBackend:
    """Backend stand-in: ``generate`` answers from the references; adapters are just names."""

    def __init__(self, data_dir: Path, names: list[str], base_mode: str = "wrong",
                 right_of: dict[str, list[int]] | None = None):
        self.tokenizer = SimpleNamespace(eos_token_id=0, pad_token_id=0)
        self.modes: dict[str | None, str] = {None: base_mode}
        self.calls: list[dict] = []
        self.right_of = right_of or {}
        self.asked: dict[tuple, int] = {}  # (adapter, benchmark, item position): times asked so far (mode sampled)
        self.keys: list[tuple[str, str, object, int]] = []  # (text to find, benchmark, item, its position)
        for name in names:
            if name in evalplus_suite.DATASETS:
                items = [(p["prompt"].strip(), p) for p in evalplus_suite.problems(name, data_dir).values()]
            elif name == livecodebench.NAME:
                items = [(r["problem"].strip(), r) for r in livecodebench.problems(data_dir)]
            else:
                items = [(G.question(name, r).strip(), r) for r in B.read_records(data_dir, name)]
            self.keys += [(text, name, item, i) for i, (text, item) in enumerate(items)]
        self.keys.sort(key=lambda k: -len(k[0]))

    # ---- what the evaluation calls
    def encode_chat(self, messages, prefill=""):
        return f"<|user|>{messages[0]['content']}<|assistant|>{prefill}"

    def add_adapter(self, name, from_dir=None, **_):
        mode = Path(from_dir).name
        assert mode in MODES + (SAMPLED,), f"oracle adapters are dirs named {MODES + (SAMPLED,)}, got {from_dir}"
        self.modes[name] = mode

    def remove_adapter(self, name):
        self.modes.pop(name, None)

    def generate(self, prompts, adapters, max_new_tokens, temperature=1.0, top_p=1.0, seed=None, stop=(), batch_size=16):
        self.calls.append({"rows": len(prompts), "adapters": list(adapters), "max_new_tokens": max_new_tokens,
                           "temperature": temperature})
        out = []
        for prompt, adapter in zip(prompts, adapters):
            mode = self.modes[adapter]
            if mode == "truncated":  # ran out of budget mid-thought: no answer, every token used
                out.append(Generation(prompt, "Let me think about this for a long", [], [7] * max_new_tokens))
                continue
            if mode == SAMPLED:
                name, _, pos = self.find(prompt, with_position=True)
                asked = self.asked.get((adapter, name, pos), 0)
                self.asked[(adapter, name, pos)] = asked + 1
                k = self.right_of.get(name, [])
                mode = "reference" if asked < (k[pos] if pos < len(k) else 0) else "wrong"
            out.append(Generation(prompt, self.answer(prompt, mode), [], [7, 0]))
        return out

    # ---- the answers
    def find(self, prompt: str, with_position: bool = False) -> tuple:
        for text, name, item, pos in self.keys:
            if text and text in prompt:
                return (name, item, pos) if with_position else (name, item)
        raise AssertionError(f"the oracle knows no item in this prompt: {prompt[:200]!r}")

    def answer(self, prompt: str, mode: str) -> str:
        name, item = self.find(prompt)
        wrong, rewritten = mode == "wrong", mode == "rewritten"
        if name in evalplus_suite.DATASETS:
            ep = item["entry_point"]
            if wrong:
                return f"def {ep}(*args, **kwargs):\n    raise ValueError('wrong')\n```\n"
            canonical = item["canonical_solution"]
            code = canonical if f"def {ep}" in canonical else item["prompt"] + canonical
            return ("# solution\nimport math  # not needed\n\n" if rewritten else "") + code + "\n```\n"
        if name == livecodebench.NAME:
            return _lookup_program(item, wrong, rewritten) + "```\n"
        gold = G.gold_answer(name, item)
        answer = WRONG_MATH if wrong else rewrite_gold(gold) if rewritten else gold
        return f"<think>Work it out.</think> <answer>The answer is \\boxed{{{answer}}}</answer>"
