"""One paper-4t4s step at Qwen2.5-7B's shapes with random bf16 weights: no download, no vLLM.

    python scripts/gpu_shapes.py [--config configs/paper-4t4s.yaml] [--cut 8] [--gen-cut 64] [--dry-run] [--json]

The question at scale is step time and peak GPU memory against ``populora plan``'s figures. Random weights at the
base's shapes (read from ``populora plan``'s architecture: the shipped table for Qwen/Qwen2.5-7B) answer both
without the weights: the cost of a forward, a backward or a decoded token does not depend on what the weights are.
The step is the preset's own work (``populora.training.compute.workload``: rows, prompt and completion lengths,
micro-batch, activation checkpointing, LoRA rank and targets, 8 adapters on one batched multi-LoRA backend), cut:

* generation (torch: vLLM cannot be carried to a lent GPU): a random model never stops, and 1,152 rows x 8,096
  tokens of HF decoding at 7B would take hours. It runs ``ceil(rows / gen_cut)`` rows of ``new_tokens / gen_cut``
  tokens, batched as the trainer batches (``plan.GEN_BATCH``), and scales the time by both cuts (decoding time is
  about linear in rows and in tokens at a fixed batch; the KV cache of a full-length row is not reached);
* the update trains every adapter on ``rows / cut`` sequences of the preset's full trained length (the memory peak
  is one micro-batch of full-length sequences, whatever the row count), and scales its time by ``cut``.

Printed: each phase's measured time, its scaled estimate of the whole step, and ``torch.cuda.max_memory_allocated``
per phase, beside the plan's step-time split and memory total (for torch and for vLLM generation).

``--dry-run``: the same code on the CPU at tiny shapes (hidden 64, 2 layers) and a cut to a few rows and tokens, so
CI runs it (tests/platform/test_gpu_shapes.py) and it cannot rot; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

from populora.platform import config as config_io
from populora.platform import plan
from populora.platform.backends import LoraSpec, MultiLoraBackend, TrainSample
from populora.platform.backends.checkpointing import enable as enable_checkpointing
from populora.platform.model.models import load_tokenizer, resolve_source
from populora.training import TrainConfig
from populora.training.compute.workload import make_plan, workload

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=4352)  # --dry-run's shapes (GQA kept; the vocabulary holds every tiny-qwen2 token id, padding included)


def qwen2_config(arch: plan.Architecture, dry_run: bool):
    """A Qwen2 config of ``arch``'s shapes (biases on q/k/v are Qwen2's own), or tiny ones for a dry run."""
    from transformers import Qwen2Config

    shapes = TINY if dry_run else {k: getattr(arch, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                                  "num_attention_heads", "num_key_value_heads", "vocab_size")}
    return Qwen2Config(**shapes, tie_word_embeddings=arch.tie_word_embeddings, max_position_embeddings=32768,
                       rope_theta=1_000_000.0, rms_norm_eps=1e-6, use_sliding_window=False)


def random_model(config, dtype: torch.dtype, device: torch.device):
    """Random weights made on the device itself (a 7B model never passes through host RAM)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


class Phase:
    """Wall time (CUDA synchronised) and peak allocated GPU memory of one phase."""

    def __init__(self, device: torch.device):
        self.device, self.cuda = device, device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.seconds = time.perf_counter() - self.t0
        self.peak_gb = torch.cuda.max_memory_allocated(self.device) / plan.GB if self.cuda else None
        return False


def random_ids(n: int, vocab: int, gen: torch.Generator) -> list[int]:
    return torch.randint(300, vocab - 300, (n,), generator=gen).tolist()


def decode_ms(run, device, tokens: int) -> float:
    """Milliseconds per decoded token of ``run(max_new_tokens)`` (a warm-up first): the time of ``tokens`` new
    tokens less the time of one (the prefill), over ``tokens - 1``."""
    run(2)
    times = {}
    for n in (1, tokens):
        with Phase(device) as ph:
            run(n)
        times[n] = ph.seconds
    return 1000 * (times[tokens] - times[1]) / (tokens - 1)


def probe_decode(model, tok, device, prompt_len: int, tokens: int, gen: torch.Generator, backend=None,
                 names: list[str] | None = None) -> dict:
    """Where torch generation's time goes, per decoded token at one generate batch (``plan.GEN_BATCH`` rows):
    HF ``generate`` on the bare model (before any LoRA is attached: ``backend`` None), then through the batched
    multi-LoRA backend with every row on the base and with the rows spread over every adapter."""
    prompts = [tok.decode(random_ids(prompt_len, len(tok) - 64, gen)) for _ in range(plan.GEN_BATCH)]
    if backend is None:
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)

        def bare(n):
            return model.generate(**enc, max_new_tokens=n, min_new_tokens=n, do_sample=True, temperature=1.0,
                                  pad_token_id=tok.pad_token_id)

        return {"hf_generate_bare_ms": decode_ms(bare, device, tokens)}
    out = {}
    for what, adapters in (("backend_base_rows_ms", [None] * len(prompts)),
                           ("backend_mixed_adapters_ms", [names[i % len(names)] for i in range(len(prompts))])):
        out[what] = decode_ms(lambda n: backend.generate(prompts, adapters, n, temperature=1.0, seed=0,
                                                         batch_size=plan.GEN_BATCH), device, tokens)
    return out


def step(cfg, work: plan.Workload, model, tok, device, cut: int, gen_cut: int, max_len: int,
         probe_tokens: int = 0) -> dict:
    """Generation (propose, solve) and the update of one step, cut; {phase: {seconds, scaled_s, peak_gb, ...}}.
    ``probe_tokens`` > 0: first ``probe_decode``'s per-token times (key ``decode_probe``)."""
    mc = cfg.model
    g = torch.Generator().manual_seed(0)
    probe = probe_decode(model, tok, device, min(work.solve_prompt, max_len // 2), probe_tokens, g) if probe_tokens else None
    names = [f"M{i}" for i in range(work.adapters)]
    backend = MultiLoraBackend(model, tok, LoraSpec(mc.lora_rank, mc.lora_alpha, 0.0, tuple(mc.target_modules)),
                               work.lora_slots)
    for i, n in enumerate(names):
        backend.add_adapter(n, seed=i)
        backend.init_optimizer(n, cfg.optim)
        # B != 0: a fresh adapter's B is zero and its update would be the base's
        backend.set_adapter_state(n, {k: torch.randn(v.shape, generator=g) * 0.01 for k, v in backend.adapter_state(n).items()})
    out = {}
    if probe is not None:
        probe.update(probe_decode(model, tok, device, min(work.solve_prompt, max_len // 2), probe_tokens, g, backend, names))
        out["decode_probe"] = probe
    text_vocab = len(tok) - 64  # prompts from the tokenizer's own ids (the model's vocabulary may be larger)
    for phase, rows, prompt, new in (("propose", work.propose_rows, work.propose_prompt, work.propose_new),
                                     ("solve", work.solve_rows, work.solve_prompt, work.solve_new)):
        n, tokens = max(1, math.ceil(rows / gen_cut)), max(1, new // gen_cut)
        prompts = [tok.decode(random_ids(min(prompt, max_len // 2), text_vocab, g)) for _ in range(n)]
        adapters = [names[i % len(names)] for i in range(n)]
        with Phase(device) as ph:
            gens = backend.generate(prompts, adapters, tokens, temperature=1.0, seed=0, batch_size=plan.GEN_BATCH)
        made = sum(len(x.completion_ids) for x in gens)
        out[f"generate_{phase}"] = {"seconds": ph.seconds, "scaled_s": ph.seconds * (rows / n) * (new / tokens),
                                    "peak_gb": ph.peak_gb, "rows": n, "new_tokens": tokens, "generated": made}
    batches = {}
    per_adapter = [(r / work.adapters, p, nw) for r, p, nw in plan.trained_rows(work)]
    for i, n in enumerate(names):
        samples = []
        for rows, p, nw in per_adapter:
            k = max(1, math.ceil(rows / cut))
            length = min(work.trained_len(p, nw), max_len)
            completion = min(nw, length - min(p, length // 2))
            samples += [TrainSample(random_ids(length - completion, len(tok) - 64, g), random_ids(completion, len(tok) - 64, g),
                                    1.0 if j % 2 else -1.0) for j in range(k)]
        batches[n] = samples
    rows_trained = sum(len(s) for s in batches.values())
    full_rows = sum(r for r, _, _ in plan.trained_rows(work))
    with Phase(device) as ph:
        backend.train_step(batches, micro_batch=cfg.optim.micro_batch, max_len=max_len, grad_clip=cfg.optim.grad_clip,
                           kl_coef=cfg.optim.kl_coef, log_kl=False, mini_batches=cfg.optim.mini_batches,
                           clip_ratio=cfg.optim.clip_ratio, clip_ratio_high=cfg.optim.clip_ratio_high,
                           entropy_coef=cfg.optim.entropy_coef)
    out["update"] = {"seconds": ph.seconds, "scaled_s": ph.seconds * full_rows / rows_trained, "peak_gb": ph.peak_gb,
                     "rows": rows_trained, "tokens": sum(len(x.prompt_ids) + len(x.completion_ids)
                                                         for s in batches.values() for x in s)}
    return out


def planned(cfg, generation: str) -> dict:
    c = cfg.model_copy(deep=True)
    c.model.generation = generation
    p = make_plan(c, gpu="h100-80gb")
    return {"memory_gb": p["memory_gb"]["total"], "step_time_s": p["step_time_s"],
            "generate_s": p["step_time_split_s"]["generate"], "train_s": p["step_time_split_s"]["train"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "paper-4t4s.yaml"), help="the preset whose step is run")
    ap.add_argument("--cut", type=int, default=8, help="the update trains rows / CUT sequences per adapter (full length)")
    ap.add_argument("--gen-cut", type=int, default=64, help="generation runs rows / GEN_CUT rows of new_tokens / GEN_CUT tokens")
    ap.add_argument("--decode-probe", type=int, default=0, metavar="TOKENS",
                    help="first time TOKENS decoded tokens per row at one generate batch: bare HF generate, the "
                         "multi-LoRA backend on base rows and on mixed adapters (ms per token)")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (CI): checks the script, measures nothing")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = ap.parse_args(argv)
    cfg = config_io.load(TrainConfig, args.config, [])
    if not args.dry_run and not torch.cuda.is_available():
        print("error: no CUDA GPU visible; run with --dry-run for the CPU check", file=sys.stderr)
        return 1
    device = torch.device("cpu" if args.dry_run else "cuda")
    cut, gen_cut = (10**6, 10**4) if args.dry_run else (args.cut, args.gen_cut)
    max_len = 64 if args.dry_run else cfg.optim.max_seq_len
    arch, source = plan.find_architecture(cfg.model.base)
    model = random_model(qwen2_config(arch, args.dry_run), getattr(torch, cfg.model.dtype), device)
    if cfg.model.activation_checkpointing:
        enable_checkpointing(model)
    tok = load_tokenizer(resolve_source("tiny-qwen2"))  # Qwen2.5's special tokens and template; ids < any vocab here
    work = workload(cfg)
    measured = step(cfg, work, model, tok, device, cut, gen_cut, max_len, args.decode_probe)
    probe = measured.pop("decode_probe", None)
    result = {"config": cfg.name, "model": cfg.model.base, "architecture_from": source, "dry_run": args.dry_run,
              "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu", "cut": cut, "gen_cut": gen_cut,
              "params_b": sum(p.numel() for p in model.parameters()) / 1e9, "phases": measured, "decode_probe": probe,
              "scaled_step_s": sum(v["scaled_s"] for v in measured.values()),
              "max_memory_allocated_gb": max((v["peak_gb"] or 0) for v in measured.values()) if device.type == "cuda" else None,
              "plan": {"torch": planned(cfg, "torch"), cfg.model.generation: planned(cfg, cfg.model.generation)}}
    print(json.dumps(result) if args.json else render(result))
    return 0


def render(r: dict) -> str:
    lines = [f"{r['config']} at {r['model']}'s shapes ({r['params_b']:.2f}B params, random {'' if not r['dry_run'] else 'tiny '}"
             f"weights, {r['device']}); update cut {r['cut']}, generation cut {r['gen_cut']} (rows and tokens)"]
    lines.append(f"  {'phase':18} {'measured s':>10} {'step est. s':>12} {'peak GB':>8}  work")
    for name, v in r["phases"].items():
        work = (f"{v['rows']} rows x {v['new_tokens']} tokens" if "new_tokens" in v else f"{v['rows']} rows, {v['tokens']} tokens")
        peak = "-" if v["peak_gb"] is None else f"{v['peak_gb']:.1f}"
        lines.append(f"  {name:18} {v['seconds']:10.2f} {v['scaled_s']:12.0f} {peak:>8}  {work}")
    if r.get("decode_probe"):
        lines.append(f"  decode, ms per token at {plan.GEN_BATCH} rows: " + ", ".join(f"{k[:-3]} {v:.1f}" for k, v in r["decode_probe"].items()))
    mem = r["max_memory_allocated_gb"]
    lines.append(f"  step estimate {r['scaled_step_s']:.0f} s; torch.cuda.max_memory_allocated {'-' if mem is None else f'{mem:.1f} GB'}")
    for gen, p in r["plan"].items():
        lines.append(f"  populora plan ({gen} generation, h100-80gb): {p['step_time_s']:.0f} s/step (generate "
                     f"{p['generate_s']:.0f}, train {p['train_s']:.0f}), {p['memory_gb']:.1f} GB")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
