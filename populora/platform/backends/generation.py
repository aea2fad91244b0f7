"""Tokenizer-side pieces every torch backend shares: the chat template, batched sampling, EOS trimming.

A backend supplies only ``run_generate(enc, adapters, kwargs)``, the call that routes each row to its adapter
(PEFT's ``adapter_names=``, or the multi-LoRA slot router); batching, seeding, stop strings and decoding are here,
so every backend turns the same prompts into the same token sequences.
"""

from __future__ import annotations

from typing import Callable

import torch

from populora.platform.backends.base import Generation


def encode_chat(tokenizer, messages: list[dict], prefill: str = "") -> str:
    """Apply the chat template (same for every adapter) and append an assistant prefill."""
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant: "
    return text + prefill


RunGenerate = Callable[[object, list, dict], torch.Tensor]  # (encoded batch, adapters, generate kwargs) -> (B, T)


@torch.no_grad()
def generate(tokenizer, device, run_generate: RunGenerate, prompts: list[str], adapters: list[str | None],
             max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
             stop: tuple[str, ...] = (), batch_size: int = 16) -> list[Generation]:
    """Sample one completion per prompt, row i with adapter ``adapters[i]`` (None = bare base)."""
    assert len(prompts) == len(adapters), "one adapter name per prompt"
    if seed is not None:
        torch.manual_seed(seed)
    out: list[Generation] = []
    for i in range(0, len(prompts), batch_size):
        out += _generate_batch(tokenizer, device, run_generate, prompts[i:i + batch_size], adapters[i:i + batch_size],
                               max_new_tokens, temperature, top_p, stop)
    return out


def _generate_batch(tok, device, run_generate, prompts, adapters, max_new_tokens, temperature, top_p, stop) -> list[Generation]:
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
    kwargs.update(do_sample=True, temperature=temperature, top_p=top_p) if temperature > 0 else kwargs.update(do_sample=False)
    if stop:
        kwargs.update(stop_strings=list(stop), tokenizer=tok)
    seqs = run_generate(enc, adapters, kwargs)
    gens = []
    width = enc.input_ids.shape[1]
    for row, prompt in enumerate(prompts):
        prompt_ids = enc.input_ids[row][enc.attention_mask[row].bool()].tolist()
        completion = strip_after_eos(seqs[row, width:].tolist(), tok.eos_token_id, tok.pad_token_id)
        gens.append(Generation(prompt, tok.decode(completion, skip_special_tokens=True), prompt_ids, completion))
    return gens


def strip_after_eos(ids: list[int], eos: int | None, pad: int | None) -> list[int]:
    """Keep tokens up to and including the first EOS; drop trailing padding.

    >>> strip_after_eos([5, 6, 2, 7], eos=2, pad=0)
    [5, 6, 2]
    >>> strip_after_eos([5, 6, 0, 0], eos=2, pad=0)
    [5, 6]
    """
    for i, t in enumerate(ids):
        if t == eos:
            return ids[: i + 1]
    while ids and ids[-1] == pad:
        ids = ids[:-1]
    return ids
