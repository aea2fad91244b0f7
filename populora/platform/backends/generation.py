"""Tokenizer-side pieces every backend shares: the chat template, the end-of-turn stop tokens, per-row seeds,
batched sampling, EOS trimming.

A torch backend supplies only ``run_generate(enc, adapters, kwargs)``, the call that routes each row to its
adapter (PEFT's ``adapter_names=``, or the multi-LoRA slot router); batching, seeding, stop strings and decoding
are here, so every backend turns the same prompts into the same token sequences. The vLLM backend takes its stop
tokens (``stop_token_ids``, owned by ``populora.platform.model.chat_template``) and per-row seeds (``row_seeds``)
from here too: one owner for when a turn ends.
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from populora.platform import progress
from populora.platform.backends.base import Generation
from populora.platform.model.chat_template import stop_token_ids


def encode_chat(tokenizer, messages: list[dict], prefill: str = "") -> str:
    """Apply the chat template (same for every adapter) and append an assistant prefill."""
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant: "
    return text + prefill


def row_seeds(seed: int | None, n: int) -> list[int | None]:
    """One seed per row, all distinct, reproducible from ``seed`` (None: unseeded rows).

    vLLM seeds a separate generator per request from its ``SamplingParams.seed``, so rows sharing a seed and a
    prompt (a task's ``rollouts`` answers) would come out identical; the torch path seeds once per batch and
    draws each row from the same stream, so it needs none of this.

    >>> row_seeds(7, 3) == row_seeds(7, 3), len(set(row_seeds(7, 3))), row_seeds(None, 2)
    (True, 3, [None, None])
    """
    if seed is None:
        return [None] * n
    return [(seed * 1_000_003 + i) % 2**63 for i in range(n)]


RunGenerate = Callable[[object, list, dict], torch.Tensor]  # (encoded batch, adapters, generate kwargs) -> (B, T)


@torch.no_grad()
def generate(tokenizer, device, run_generate: RunGenerate, prompts: list[str], adapters: list[str | None],
             max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
             stop: tuple[str, ...] = (), batch_size: int = 16) -> list[Generation]:
    """Sample one completion per prompt, row i with adapter ``adapters[i]`` (None = bare base).

    Rows are batched in order of prompt length (longest first), so a batch pads little and the longest batch,
    which sets the memory peak, comes first; results come back in the callers' order."""
    assert len(prompts) == len(adapters), "one adapter name per prompt"
    if seed is not None:
        torch.manual_seed(seed)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))  # stable: equal lengths keep their order
    stops = stop_token_ids(tokenizer)
    out: list[Generation | None] = [None] * len(prompts)
    progress.generated(0, len(order))  # the trainer's step progress (a no-op outside a trainer): "solving 16/32"
    for i in range(0, len(order), batch_size):
        rows = order[i:i + batch_size]
        counter = _TokenCount(i, len(order), max_new_tokens) if progress.active() else None
        gens = _generate_batch(tokenizer, device, run_generate, [prompts[r] for r in rows], [adapters[r] for r in rows],
                               max_new_tokens, temperature, top_p, stop, stops, counter)
        for r, g in zip(rows, gens):
            out[r] = g
        progress.generated(i + len(rows), len(order))
    return out


class _TokenCount(StoppingCriteria):
    """Never stops anything: called by ``generate`` at each decoding step, it tells the trainer's progress how many
    new tokens the batch has (one batch of a 135M model on a CPU is minutes of "proposing 0/4 tasks" otherwise).
    It draws no random numbers, so the samples are the same with it or without."""

    def __init__(self, done: int, total: int, max_new_tokens: int):
        self.done, self.total, self.max_new, self.width = done, total, max_new_tokens, None

    def __call__(self, input_ids, scores, **kwargs):
        self.width = self.width or input_ids.shape[1] - 1  # the first call follows the first new token
        progress.generated(self.done, self.total, input_ids.shape[1] - self.width, self.max_new)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _generate_batch(tok, device, run_generate, prompts, adapters, max_new_tokens, temperature, top_p, stop,
                    stops, counter: _TokenCount | None = None) -> list[Generation]:
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, eos_token_id=stops)
    if counter is not None:
        kwargs["stopping_criteria"] = StoppingCriteriaList([counter])
    # top_k=0: sample from the whole distribution the trainer's log-probs are of (HF's default top_k=50 truncates it)
    kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0) if temperature > 0 else kwargs.update(do_sample=False)
    if stop:
        kwargs.update(stop_strings=list(stop), tokenizer=tok)
    seqs = run_generate(enc, adapters, kwargs)
    gens = []
    width = enc.input_ids.shape[1]
    for row, prompt in enumerate(prompts):
        prompt_ids = enc.input_ids[row][enc.attention_mask[row].bool()].tolist()
        completion = strip_after_eos(seqs[row, width:].tolist(), stops, tok.pad_token_id)
        gens.append(Generation(prompt, tok.decode(completion, skip_special_tokens=True), prompt_ids, completion))
    return gens


def strip_after_eos(ids: list[int], eos: int | list[int] | None, pad: int | None) -> list[int]:
    """Keep tokens up to and including the first stop token (EOS or end of turn); drop trailing padding.

    >>> strip_after_eos([5, 6, 2, 7], eos=2, pad=0)
    [5, 6, 2]
    >>> strip_after_eos([5, 9, 2, 7], eos=[2, 9], pad=0)
    [5, 9]
    >>> strip_after_eos([5, 6, 0, 0], eos=2, pad=0)
    [5, 6]
    """
    stops = set([eos] if isinstance(eos, int) else eos or [])
    for i, t in enumerate(ids):
        if t in stops:
            return ids[: i + 1]
    while ids and ids[-1] == pad:
        ids = ids[:-1]
    return ids
