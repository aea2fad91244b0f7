"""The generator-vs-trainer mismatch on vLLM's CPU engine, the figures behind ``monitors.OUT_OF_SYNC_K3``.

The embedded SmolLM2-135M, one LoRA adapter (rank 8, B drawn at random so it is not the base), sampled by the vLLM
engine and scored by the fp32 multi-LoRA trainer, per sampled token (rollout_correction.py): k3, max |diff|,
perplexity ratio. Cases: the engine in float32 (numerics alone), in bfloat16 (a bf16 engine beside an fp32
trainer), and the bugs the flag is for, on the fp32 engine: a stale adapter (the trainer's moved by one
``lr``-sized step in every LoRA weight) and samples at another temperature (0.7) scored at 1.

    .venv-vllm/bin/python scripts/mismatch_figures.py [--rows 16] [--tokens 48]
"""

from __future__ import annotations

import argparse
import json
import tempfile

import populora  # noqa: F401  (OMP_WAIT_POLICY before torch loads)
import torch

from populora.platform.backends import LoraSpec, rollout_correction
from populora.platform.backends.factory import vllm_max_loras
from populora.platform.backends.multilora import MultiLoraBackend
from populora.platform.backends.vllm import VllmBackend
from populora.platform.model.models import cached_source, load_base, resolve_source

QUESTIONS = ("Write a Python function that reverses a list.", "What is 17 * 23?", "Name three prime numbers.",
             "def f(x):\n    return x * 2\nWhat is f(21)?")


def perturbed(state: dict, seed: int, scale: float) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=gen) * scale if ".lora_B." in k else v) for k, v in state.items()}


def mismatch(trainer, gens, adapter: str) -> dict:
    ids, comps = [g.prompt_ids for g in gens], [g.completion_ids for g in gens]
    logp, mask = trainer.rows_logprobs([adapter] * len(gens), ids, comps)
    gen, has = rollout_correction.generator_logp([g.logprobs for g in gens], logp.shape[1], logp.device)
    c = rollout_correction.correct(logp, gen, has, mask, "tis", 2.0)
    tally = rollout_correction.MismatchTally()
    for i in range(len(gens)):
        tally.add_row(c.rows, i)
    return {k: round(v, 8) for k, v in tally.stats().items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    source = resolve_source("embedded")
    base, tok = load_base(source, "float32", "cpu")
    trainer = MultiLoraBackend(base, tok, LoraSpec(rank=8, alpha=16.0), 2)
    trainer.add_adapter("A", seed=0)
    trainer.set_adapter_state("A", perturbed(trainer.adapter_state("A"), 1, 0.3))
    model_dir = cached_source(source, need_weights=True).path_or_id
    rows = [trainer.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
    rows = (rows * (args.rows // len(rows) + 1))[:args.rows]
    out = {}
    for dtype in ("float32", "bfloat16"):
        engine = VllmBackend(trainer, model_dir, tempfile.mkdtemp(), vllm_max_loras(2), 8, max_model_len=256, dtype=dtype)
        try:
            gens = engine.generate(rows, ["A"] * len(rows), args.tokens, temperature=1.0, seed=0)
            out[f"{dtype} engine"] = mismatch(trainer, gens, "A")
            if dtype == "float32":
                t07 = engine.generate(rows, ["A"] * len(rows), args.tokens, temperature=0.7, seed=0)
                out["fp32 engine, sampled at T=0.7, scored at T=1"] = mismatch(trainer, t07, "A")
                state = trainer.adapter_state("A")
                # AdamW's first step moves every weight by lr * sign(grad): a stale engine is that far behind
                for lr in (1e-6, 1e-5, 1e-4):
                    moved = {k: v + lr * torch.sign(torch.randn_like(v)) for k, v in state.items()}
                    trainer.set_adapter_state("A", moved)  # the trainer moved on, the engine serves the old copy
                    out[f"fp32 engine, adapter one Adam step of lr {lr:g} stale"] = mismatch(trainer, gens, "A")
                trainer.set_adapter_state("A", state)
        finally:
            engine.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
