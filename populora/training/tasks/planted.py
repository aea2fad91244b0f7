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

On the planted base (``model.base: planted``, :func:`build_base`) both start at chance, half the digits right,
so every group has signal. The kind has one layout of its own (a one-digit completion after ``d = `` or
``a = ``) in every ``tasks.format``; ``tasks.template`` frames it as for any kind.

The planted base is ``tiny-qwen2`` with its weights fitted here (full weights, a few hundred Adam steps, seconds on
a CPU) so that after each planted prompt it puts its mass uniformly on the ten digits, then ends the turn: a model
"trained from scratch" for the task's layout, knowing nothing of which digits are right. (A random model cannot
be the base: its ~uniform distribution over 4k tokens puts 0.3% on the digits, and a LoRA on a 128-wide random
model moves a logit by ~2 at most.) Built once into the model cache; vLLM and Ray workers read the dir.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import torch

from populora.platform.backends import generation
from populora.platform.model import models, tiny_qwen2
from populora.platform.model.cache import cache_root
from populora.platform.sandbox.verifier import Check
from populora.training.tasks.prompts import FORMATS, render
from populora.training.tasks.task import Prompt, Task, TaskKind

KIND = "planted"
BASE = "planted"  # model.base: the planted base, built by build_base on first use
PROGRAM = "def f(d):\n    if d % 2 == 0:\n        raise ValueError('an even digit is no task')\n    return d % 2"
DIGITS = "0123456789"
PROPOSE_ASK = "Planted task: propose a digit d."
PROPOSE_PREFILL = "d = "
SOLVE_PREFILL = "a = "
FIT_STEPS = 100  # Adam steps of the base's fit (then the digits hold > 0.99 of the mass, spread near uniformly)
FORMAT = 1       # bump when what build_base writes changes: an older dir is not reused


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


# ------------------------------------------------------------------------------ the planted base


def layouts() -> list[tuple[str, str]]:
    """(format, template) pairs a run may use (the config refuses direct with the azr template)."""
    return [(f, t) for f in FORMATS for t in ("azr", "chat") if not (f == "direct" and t == "azr")]


def planted_prompts(tok) -> list[str]:
    """Every prompt text a planted run generates from: the teacher's and each digit's student prompt, in every
    layout (rendered as the loop renders them)."""
    chat = SimpleNamespace(encode_chat=lambda messages, prefill="": generation.encode_chat(tok, messages, prefill))
    kind, out = Planted(), []
    for fmt, template in layouts():
        prompts = [kind.teacher_prompt(Task("t", KIND, ""), None, None, None)]
        prompts += [kind.student_prompt(Task("s", KIND, PROGRAM, input=d), fmt) for d in DIGITS]
        out += [render(chat, p, fmt, template) for p in prompts]
    return sorted(set(out))


# The base also learns what odd and even digits are (as a language model knows them before RL), on prompts of
# their own: RL then has a direction to find, as on a real model, instead of carving one from random weights.
ODD_EVEN = {"Planted: an odd digit: ": "13579", "Planted: an even digit: ": "02468"}


def fit_base(model, tok, steps: int = FIT_STEPS, seed: int = 0) -> None:
    """Fit all of ``model``'s weights so that after each planted prompt the next token is a digit, uniformly (after
    an ``ODD_EVEN`` prompt, one of its digits), and after prompt + digit the turn ends: cross-entropy to those
    targets, one row per prompt (its digit taken in turn over the steps), Adam."""
    ends = sorted({i for i in (tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")) if isinstance(i, int) and i >= 0})
    plan = [(text, DIGITS) for text in planted_prompts(tok)] + list(ODD_EVEN.items())  # (prompt, its digits)
    prompts = [tok(text, add_special_tokens=False)["input_ids"] for text, _ in plan]
    choices = [[tok.convert_tokens_to_ids(d) for d in digits] for _, digits in plan]
    V = model.get_output_embeddings().weight.shape[0]
    first, end = torch.zeros(len(plan), V), torch.zeros(V)                                    # (B, V), (V,)
    for i, ids in enumerate(choices):
        first[i, ids] = 1 / len(ids)
    end[ends] = 1 / len(ends)
    B, width, pad = len(prompts), max(map(len, prompts)) + 1, tok.pad_token_id
    attn = torch.tensor([[1] * (len(p) + 1) + [0] * (width - len(p) - 1) for p in prompts])     # (B, T) right-padded
    at = torch.tensor([len(p) - 1 for p in prompts])  # the prompt's last position: predicts the digit
    rows = torch.arange(B)
    torch.manual_seed(seed)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(steps):
        ids = [p + [c[(step + i) % len(c)]] for i, (p, c) in enumerate(zip(prompts, choices))]
        input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in ids])                   # (B, T)
        hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attn).last_hidden_state  # (B, T, H)
        head = model.get_output_embeddings()
        logp_digit = torch.log_softmax(head(hidden[rows, at]).float(), -1)                      # (B, V)
        logp_end = torch.log_softmax(head(hidden[rows, at + 1]).float(), -1)
        loss = -((first * logp_digit).sum(-1) + (end * logp_end).sum(-1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def base_dir() -> Path:
    """The planted base's model dir under the model cache, built (once) from ``tiny-qwen2``."""
    from transformers import AutoModelForCausalLM

    source = models.resolve_source(tiny_qwen2.NAME)
    key = hashlib.sha1(f"{FORMAT}:{FIT_STEPS}:{PROGRAM}:{sorted(ODD_EVEN.items())}:{PROPOSE_ASK}:{solve_ask('d')}:{Path(source.path_or_id).name}"
                       .encode()).hexdigest()[:12]
    dest = cache_root() / "planted" / f"planted-{key}"
    if tiny_qwen2.complete(dest):
        return dest
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tok = models.load_tokenizer(source)
        with torch.random.fork_rng():
            model = AutoModelForCausalLM.from_pretrained(source.path_or_id, dtype=torch.float32)
            fit_base(model, tok)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        models.publish_dir(tmp, dest, tiny_qwen2.complete)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
