"""``populora bench scale``: one step's generation and update on 1, 2, ... data-parallel workers, timed, and
checked against the first worker count (the same completions, losses, LoRA weights and optimizer steps).

The step is the backend's share of a training step (no sandbox): every member generates ``--rows`` rows from one
seeded call, and each member's rows are trained with fixed advantages (mini-batches and clipping as the loop's
defaults). On CPU the workers share the machine's cores, so more workers are not faster there (2 cores: the
speed-up is ~1 at best); on a GPU node each worker has its own GPU (``--device cuda``: one GPU per worker).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch

from populora.platform.backends import AdamConfig, BackendConfig, LoraSpec, RaySpec, TrainSample, make_backend

MEMBERS = ("T0", "T1", "S0", "S1")


def _backend(workers: int, args):
    gpus = 1.0 if args.device.startswith("cuda") else 0.0
    ray = RaySpec(args.address, num_cpus=max(os.cpu_count() or 1, math.ceil(workers * args.cpus_per_worker)),
                  model_workers=workers, gpus_per_worker=gpus, cpus_per_worker=args.cpus_per_worker,
                  placement="data_parallel")
    return make_backend(BackendConfig(base=args.base, tiny_random=args.tiny, device=args.device, dtype=args.dtype,
                                      lora=LoraSpec(rank=8), slots=len(MEMBERS), ray=ray))


def _samples(gens, adapters):
    """Each member's rows as train samples with fixed advantages (alternating signs, varying sizes)."""
    out = {m: [] for m in MEMBERS}
    for i, (g, m) in enumerate(zip(gens, adapters)):
        if g.completion_ids:
            out[m].append(TrainSample(g.prompt_ids, g.completion_ids, (-1) ** i * (0.5 + (i % 3) / 2)))
    return out


def one(workers: int, args) -> dict:
    """Time one generation + update on ``workers`` workers; return the figures and what the checks compare."""
    backend = _backend(workers, args)
    try:
        for i, m in enumerate(MEMBERS):
            backend.add_adapter(m, seed=10 + i)
            backend.init_optimizer(m, AdamConfig(lr=1e-3))
        prompts = [backend.encode_chat([{"role": "user", "content": f"Write a Python function number {i}."}])
                   for i in range(args.rows * len(MEMBERS))]
        adapters = list(MEMBERS) * args.rows
        backend.generate(prompts[:2 * workers], adapters[:2 * workers], 2, seed=0)  # warm-up: first calls, allocator
        warm = [w["rows"]["generated"] for w in backend.where()]
        t0 = time.perf_counter()
        gens = backend.generate(prompts, adapters, args.new_tokens, temperature=1.0, seed=1)
        t1 = time.perf_counter()
        stats = backend.train_step(_samples(gens, adapters), micro_batch=4, max_len=512, mini_batches=2)
        t2 = time.perf_counter()
        states = {m: backend.adapter_states(m) for m in MEMBERS}
        return {"generate_s": t1 - t0, "train_s": t2 - t1, "step_s": t2 - t0,
                "rows_per_worker": [w["rows"]["generated"] - n for w, n in zip(backend.where(), warm)],
                "_gens": [g.completion_ids for g in gens], "_stats": stats,
                "_states": {m: s[0] for m, s in states.items()},
                "workers_identical": all(torch.equal(s[0][k], other[k]) for s in states.values() for other in s[1:]
                                         for k in s[0]),
                "_optim_steps": {m: backend.optimizer_state(m)["step"] for m in MEMBERS}}
    finally:
        backend.shutdown()


def checks(ref: dict, res: dict) -> dict:
    """The equality of one worker count's step with the reference's (the first worker count)."""
    lora_diff = max(float((v - res["_states"][m][k]).abs().max()) for m, s in ref["_states"].items() for k, v in s.items())
    loss_diff = max(abs(a["loss"] - b["loss"]) / max(abs(a["loss"]), 1e-8)
                    for n in ref["_stats"] for a, b in zip(ref["_stats"][n]["per_mini_batch"], res["_stats"][n]["per_mini_batch"]))
    return {"same_generations": ref["_gens"] == res["_gens"], "max_lora_diff": lora_diff, "max_loss_rel_diff": loss_diff,
            "same_optimizer_steps": ref["_optim_steps"] == res["_optim_steps"], "workers_identical": res["workers_identical"]}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="populora bench scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2", help="worker counts to compare, e.g. 1,2,4 (the first is the reference)")
    p.add_argument("--rows", type=int, default=4, help="rows each member generates and trains (4 members)")
    p.add_argument("--new-tokens", type=int, default=16, help="tokens per completion")
    p.add_argument("--tiny", action="store_true", help="tiny random model instead of the embedded one (quick check)")
    p.add_argument("--base", default="embedded", help="model.base (default: the embedded SmolLM2-135M)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu", help="cpu, or cuda (one GPU per worker)")
    p.add_argument("--address", default="local", help="Ray address: local, auto or ray://host:port")
    p.add_argument("--cpus-per-worker", type=float, default=1.0)
    p.add_argument("--json", action="store_true", help="last line: one JSON object of the figures")
    args = p.parse_args(argv)
    try:
        counts = [int(w) for w in args.workers.split(",")]
        assert counts and all(w >= 1 for w in counts)
    except (ValueError, AssertionError):
        print(f"error: --workers {args.workers!r}: give worker counts >= 1 separated by commas, e.g. 1,2", file=sys.stderr)
        return 2
    results = {w: one(w, args) for w in counts}
    ref = results[counts[0]]
    figures = {"workers": {}, "checks": {}}
    for w, r in results.items():
        figures["workers"][str(w)] = {k: v for k, v in r.items() if not k.startswith("_")}
        figures["checks"][str(w)] = checks(ref, r)
        c = figures["checks"][str(w)]
        print(f"bench scale: {w} worker(s): step {r['step_s']:.2f} s (generate {r['generate_s']:.2f} s, train "
              f"{r['train_s']:.2f} s), rows per worker {r['rows_per_worker']}; vs {counts[0]}: same generations "
              f"{c['same_generations']}, max LoRA diff {c['max_lora_diff']:.2e}, max loss rel diff "
              f"{c['max_loss_rel_diff']:.2e}, same optimizer steps {c['same_optimizer_steps']}, workers identical "
              f"{c['workers_identical']}", flush=True)
    if args.json:
        print(json.dumps(figures))
    return 0
