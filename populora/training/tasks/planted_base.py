"""The planted base (``model.base: planted``): ``tiny-qwen2`` with its weights fitted so that after each planted
prompt it puts its mass uniformly on the ten digits, then ends the turn (planted.py says why a random model cannot
be the base). Built once into the model cache; the loop resolves ``model.base: planted`` to :func:`base_dir`.
Apart from the task kind (planted.py) because it loads torch, which the kind's registry must not."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import torch

from populora.platform.backends import generation
from populora.platform.model import models, tiny_qwen2
from populora.platform.model.cache import cache_root
from populora.training.tasks.planted import DIGITS, KIND, PROGRAM, PROPOSE_ASK, Planted, solve_ask
from populora.training.tasks.prompts import FORMATS, render
from populora.training.tasks.task import Task

FIT_STEPS = 100  # Adam steps of the base's fit (then the digits hold > 0.99 of the mass, spread near uniformly)
FORMAT = 1       # bump when what base_dir writes changes: an older dir is not reused


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
