"""Torch generation where each row samples from its own seeded generator, whatever batch it lands in.

The local torch path seeds once per call and every row draws from that one stream, so a row's completion depends
on which rows share its call. Data-parallel workers each get a share of a call's rows, so the same step on 1 or 2
workers would sample differently. Here row i draws from ``torch.Generator().manual_seed(seeds[i])`` (the driver
gives each row its seed from ``generation.row_seeds``, by its place in the whole call, as vLLM's per-request seeds
are given), so a row's completion is the same on any worker count.

How: transformers (5.x, ``GenerationMixin._get_logits_processor``) applies user logits processors *before* its
temperature / top-p warpers and then draws one ``torch.multinomial`` for the whole batch from the global RNG.
So generation runs greedy (``do_sample=False``) and ``RowSampler`` does the sampling itself as the last processor:
temperature and top-p with transformers' own warpers, one draw per row from the row's generator, and it returns
scores where only the drawn token is finite, which greedy decoding then picks.
"""

from __future__ import annotations

import torch

from populora.platform.backends import generation
from populora.platform.backends.base import Generation


class RowSampler:
    """A ``LogitsProcessor``: temperature, top-p, then one draw per row from that row's generator."""

    def __init__(self, seeds: list[int], temperature: float, top_p: float, device):
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

        self.warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)] if temperature != 1.0 else [])
        if top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p=top_p))
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:  # scores: (B, V)
        probs = torch.softmax(self.warpers(input_ids, scores).float(), dim=-1)
        picked = torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(self.generators)])
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(len(picked), device=scores.device), picked] = 0.0
        return out


@torch.no_grad()
def generate(backend, prompts: list[str], adapters: list[str | None], seeds: list[int], max_new_tokens: int,
             temperature: float = 1.0, top_p: float = 1.0, stop: tuple[str, ...] = (),
             batch_size: int = 16) -> list[Generation]:
    """``MultiLoraBackend.generate`` with row i sampled from ``seeds[i]`` (greedy when ``temperature`` is 0).

    Rows are batched by prompt length, longest first, as ``generation.generate`` batches them."""
    from transformers import LogitsProcessorList

    assert len(prompts) == len(adapters) == len(seeds), "one adapter and one seed per prompt"
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    stops = generation.stop_token_ids(backend.tokenizer)
    out: list[Generation | None] = [None] * len(prompts)
    for k in range(0, len(order), batch_size):
        rows = order[k:k + batch_size]

        def run(enc, row_adapters, kwargs, rows=rows):
            if temperature > 0:  # sample in RowSampler; greedy then takes its one finite token
                for key in ("temperature", "top_p"):
                    kwargs.pop(key, None)
                sampler = RowSampler([seeds[r] for r in rows], temperature, top_p, backend.device)
                kwargs.update(do_sample=False, logits_processor=LogitsProcessorList([sampler]))
            return backend._run_generate(enc, row_adapters, kwargs)

        gens = generation._generate_batch(backend.tokenizer, backend.device, run, [prompts[r] for r in rows],
                                          [adapters[r] for r in rows], max_new_tokens, temperature, top_p, stop, stops)
        for r, g in zip(rows, gens):
            out[r] = g
    return out
