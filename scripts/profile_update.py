"""Profile one demo-shaped update (configs/smoke.yaml's shapes) with torch.profiler: where the update's time goes.

    python scripts/profile_update.py [--backend multilora|peft] [--tiny] [--rows 6] [--top 20]

2 teachers x 3 proposals (prompt ~500 tokens with its references, completion up to 128) and 2 students x 6
answers (prompt ~300, completion up to 48), the demo's optimizer settings (3 mini-batches, micro-batch 4, entropy
bonus 0.001, KL logged). Prints the step's wall time, peak RSS growth and the top ops by self CPU time.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

from populora.platform.backends import AdamConfig, LoraSpec, MultiLoraBackend, PeftBackend, TrainSample
from populora.platform.model.models import load_base, resolve_source


def demo_batches(tok, teachers: int = 2, students: int = 2, proposals: int = 3, answers: int = 6, seed: int = 0):
    """Rollouts of the demo's shape: varied prompt and completion lengths, advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    ids = lambda n: torch.randint(10, tok.vocab_size - 10, (n,), generator=g).tolist()
    rand = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=g))
    batches = {}
    for t in range(teachers):
        batches[f"T{t}"] = [TrainSample(ids(rand(420, 560)), ids(rand(80, 128)), 1.0 if i % 2 else -0.5) for i in range(proposals)]
    for s in range(students):
        batches[f"S{s}"] = [TrainSample(ids(rand(250, 330)), ids(rand(8, 48)), 1.0 if i % 2 else -0.5) for i in range(answers)]
    return batches


def make_backend(kind: str, model, tok, names, rank: int = 8):
    backend = (MultiLoraBackend(model, tok, LoraSpec(rank=rank), len(names)) if kind == "multilora"
               else PeftBackend(model, tok, LoraSpec(rank=rank)))
    g = torch.Generator().manual_seed(0)
    for n in names:
        backend.add_adapter(n, seed=0)
        backend.init_optimizer(n, AdamConfig(lr=1e-5))
        backend.set_adapter_state(n, {k: torch.randn(v.shape, generator=g) * 0.02 for k, v in backend.adapter_state(n).items()})
    return backend


UPDATE = dict(micro_batch=4, max_len=1024, grad_clip=1.0, kl_coef=0.0, log_kl=True, mini_batches=3, clip_ratio=0.2,
              entropy_coef=0.001)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["multilora", "peft"], default="multilora")
    p.add_argument("--tiny", action="store_true", help="tiny random model (a quick check of the script)")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--no-profile", action="store_true", help="time only (the profiler adds overhead)")
    args = p.parse_args(argv)
    model, tok = load_base(resolve_source("embedded"), tiny_random=args.tiny)
    batches = demo_batches(tok)
    backend = make_backend(args.backend, model, tok, list(batches))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if args.no_profile:
        backend.train_step(batches, **UPDATE)
    else:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            backend.train_step(batches, **UPDATE)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = sum(len(s) for s in batches.values())
    tokens = sum(len(x.prompt_ids) + len(x.completion_ids) for s in batches.values() for x in s)
    print(f"update ({args.backend}): {wall:.2f} s for {rows} rows / {tokens} tokens; max RSS {rss / 1e6:.2f} GB "
          f"(+{(rss - rss0) / 1e6:.2f} GB in the update); torch threads {torch.get_num_threads()}")
    if not args.no_profile:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=40))


if __name__ == "__main__":
    main()
