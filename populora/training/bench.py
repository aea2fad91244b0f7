"""``populora bench lora|step|evolve``: speed ratios measured side by side in one run; ``populora bench learn``: the
planted environment's reward rise per backend (training/learn_check.py).

Every figure is a ratio of two timings taken in the same process, interleaved, best of ``repeats``, so machine
load shifts both sides alike. ``--json`` prints one JSON object of the figures as the last line.
"""

from __future__ import annotations

import tempfile
import time

import torch

from populora.platform.backends import AdamConfig, LoraSpec, MultiLoraBackend, PeftBackend, TrainSample
from populora.platform.backends.factory import vllm_max_loras
from populora.platform.backends.vllm import VllmBackend
from populora.platform.model.models import cached_source, load_base, resolve_source
from populora.training.evolve import operators, probe
from populora.training import learn_check as learning


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _load(tiny: bool):
    return load_base(resolve_source("embedded"), tiny_random=tiny)


def _randomise(backend, names, seed=0):
    """Non-zero adapters (fresh ones have B = 0, which would make every adapter the same function)."""
    g = torch.Generator().manual_seed(seed)
    for n in names:
        state = {k: torch.randn(v.shape, generator=g) * 0.02 for k, v in backend.adapter_state(n).items()}
        backend.set_adapter_state(n, state)


def _samples(tok, batch: int, prompt_len: int, completion_len: int) -> list[TrainSample]:
    g = torch.Generator().manual_seed(1)
    ids = lambda n: torch.randint(10, tok.vocab_size - 10, (n,), generator=g).tolist()
    return [TrainSample(ids(prompt_len), ids(completion_len), 1.0 if i % 2 else -1.0) for i in range(batch)]


def bench_lora(adapters: int = 8, rank: int = 16, new_tokens: int = 32, tiny: bool = False, repeats: int = 3) -> dict:
    """Mixed batch over ``adapters`` members vs the same batch on one adapter: generation and a train step."""
    model, tok = _load(tiny)
    spec = LoraSpec(rank=rank)
    names = [f"m{i}" for i in range(adapters)]
    prompt = tok.apply_chat_template([{"role": "user", "content": "Write a Python function f that reverses a list."}],
                                     tokenize=False, add_generation_prompt=True)
    prompts = [prompt] * adapters
    samples = _samples(tok, adapters, 200, 48)
    out = {}
    for label, backend in (("ours", MultiLoraBackend(model, tok, spec, adapters)), ("peft", PeftBackend(model, tok, spec))):
        for n in names:
            backend.add_adapter(n)
            backend.init_optimizer(n, AdamConfig(lr=1e-5))
        _randomise(backend, names)
        gen = lambda rows: backend.generate(prompts, rows, new_tokens, temperature=0)
        mixed_t = lambda: backend.train_step({n: [s] for n, s in zip(names, samples)}, micro_batch=adapters, log_kl=False)
        single_t = lambda: backend.train_step({names[0]: samples}, micro_batch=adapters, log_kl=False)
        gen(names)  # warm-up
        out[f"{label}_gen_mixed_s"] = _best(lambda: gen(names), repeats)
        out[f"{label}_gen_single_s"] = _best(lambda: gen([names[0]] * adapters), repeats)
        out[f"{label}_train_mixed_s"] = _best(mixed_t, repeats)
        out[f"{label}_train_single_s"] = _best(single_t, repeats)
        if isinstance(backend, MultiLoraBackend):
            backend.unwrap()
        else:
            backend.model.unload()
    out["ratio"] = out["ours_gen_mixed_s"] / out["ours_gen_single_s"]
    out["train_ratio"] = out["ours_train_mixed_s"] / out["ours_train_single_s"]
    out["peft_ratio"] = out["peft_gen_mixed_s"] / out["peft_gen_single_s"]
    # PEFT cannot train a mixed batch: its mixed figure is one step per adapter on that adapter's rows.
    out["peft_train_ratio"] = out["peft_train_mixed_s"] / out["peft_train_single_s"]
    out["speedup_vs_peft_gen"] = out["peft_gen_mixed_s"] / out["ours_gen_mixed_s"]
    out["speedup_vs_peft_train"] = out["peft_train_mixed_s"] / out["ours_train_mixed_s"]
    return out


def bench_step(teachers: int = 4, students: int = 4, rank: int = 16, tasks_per_teacher: int = 3, rollouts: int = 2,
               tiny: bool = False, repeats: int = 2) -> dict:
    """The model work of one population step (propose + solve generation, one update) vs a compute-matched
    single-agent step: same proposals and answers per adapter, one adapter. The sandbox is excluded (its cost is
    ``bench verifier``), so the figure isolates what batching the population buys."""
    model, tok = _load(tiny)
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=rank), teachers + students + 1)
    t_names = [f"T{i}" for i in range(teachers)]
    s_names = [f"S{i}" for i in range(students)]
    for n in t_names + s_names + ["B0"]:
        backend.add_adapter(n)
        backend.init_optimizer(n, AdamConfig(lr=1e-5))
    _randomise(backend, t_names + s_names + ["B0"])
    prompt = tok.apply_chat_template([{"role": "user", "content": "Write a new Python function f and an input for it."}],
                                     tokenize=False, add_generation_prompt=True)

    def step(proposers: list[str], solvers: list[str]) -> None:
        props = backend.generate([prompt] * (len(proposers) * tasks_per_teacher),
                                 [p for p in proposers for _ in range(tasks_per_teacher)], 48, temperature=1.0, seed=0)
        rows = [s for s in solvers for _ in range(tasks_per_teacher * rollouts)]
        answers = backend.generate([prompt] * len(rows), rows, 24, temperature=1.0, seed=1)
        batches: dict[str, list] = {}
        for member, g in zip([p for p in proposers for _ in range(tasks_per_teacher)] + rows, props + answers):
            batches.setdefault(member, []).append(TrainSample(g.prompt_ids, g.completion_ids or [tok.eos_token_id], 0.5))
        backend.train_step(batches, micro_batch=16, log_kl=False)

    population = lambda: step(t_names, s_names)
    single = lambda: step(["B0"], ["B0"])
    single()  # warm-up
    out = {"population_step_s": _best(population, repeats), "single_agent_step_s": _best(single, repeats)}
    out["adapters"] = teachers + students
    out["ratio"] = out["population_step_s"] / out["single_agent_step_s"]
    out["per_adapter_ratio"] = out["ratio"] / out["adapters"]
    backend.unwrap()
    return out


QWEN_7B = {"layers": 28, "hidden": 3584, "intermediate": 18944, "kv": 512}


def qwen7b_lora_state(rank: int = 16, seed: int = 0) -> dict:
    """Random LoRA tensors with Qwen2.5-7B's shapes on its 7 linear modules (no download)."""
    h, i, kv = QWEN_7B["hidden"], QWEN_7B["intermediate"], QWEN_7B["kv"]
    shapes = {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
              "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    g = torch.Generator().manual_seed(seed)
    state = {}
    for layer in range(QWEN_7B["layers"]):
        for name, (inp, out) in shapes.items():
            block = "mlp" if name in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            prefix = f"base_model.model.model.layers.{layer}.{block}.{name}"
            state[f"{prefix}.lora_A.weight"] = torch.randn(rank, inp, generator=g) * 0.01
            state[f"{prefix}.lora_B.weight"] = torch.randn(out, rank, generator=g) * 0.01
    return state


def bench_evolve(rank: int = 16, repeats: int = 3, tiny: bool = False) -> dict:
    """Every operator's time at Qwen2.5-7B LoRA shapes (``operators``: name -> seconds, best of ``repeats``) and
    its functional distance on the embedded model at its default strength (``distance``: name -> mean KL(parent
    || child) on the probe prompts, over 3 children)."""
    a, b, c = (qwen7b_lora_state(rank, s) for s in range(3))
    times = {}
    for name, op in operators.FAMILY.items():
        parents = [a] if op.kind == "mutation" else [a, b, c] if name == "xes" else [a, b]
        weights = None if op.kind == "mutation" else operators.fitness_shares([30.0, 25.0, 20.0][: len(parents)])
        gen = torch.Generator().manual_seed(0)
        times[name] = _best(lambda: operators.apply(name, parents, weights, gen), repeats)
    del a, b, c
    return {"operators": times, "distance": operator_distances(rank, tiny),
            "mutation_s": times["gaussian"], "crossover_s": times["svd_fit"], "crossover_swap_s": times["component_swap"],
            "adapter_params_millions": sum(t.numel() for t in qwen7b_lora_state(rank, 0).values()) / 1e6,
            "torch_threads": torch.get_num_threads()}


def operator_distances(rank: int = 16, tiny: bool = False, strengths: dict | None = None, children: int = 3) -> dict:
    """Name -> mean KL(parent || child) on ``probe.PROBE_PROMPTS`` of the embedded model, each child made from
    the same parent (and partners) by the operator at its default strength (or ``strengths[name]``). Parents:
    every LoRA tensor N(0, 0.02^2), as the other benches' adapters (an adapter a few hundred steps in)."""
    model, tok = _load(tiny)
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=rank), 5)
    names = ["p0", "p1", "p2"]
    for n in names + ["child"]:
        backend.add_adapter(n)
    _randomise(backend, names)
    states = [backend.adapter_state(n) for n in names]
    distance = probe.ProbeKL(backend)
    out = {}
    for name, op in operators.FAMILY.items():
        parents = states[:1] if op.kind == "mutation" else states if name == "xes" else states[:2]
        weights = None if op.kind == "mutation" else operators.fitness_shares([30.0, 25.0, 20.0][: len(parents)])
        kls = []
        for seed in range(children):
            child = operators.apply(name, parents, weights, torch.Generator().manual_seed(seed), (strengths or {}).get(name))
            backend.set_adapter_state("child", child)
            kls.append(distance("p0", "child"))
        out[name] = sum(kls) / len(kls)
    backend.unwrap()
    return out


def bench_vllm(adapters: int = 4, rows_per_adapter: int = 4, rank: int = 8, new_tokens: int = 32,
               repeats: int = 2) -> dict:
    """Generation on the real vLLM engine vs the batched multi-LoRA backend (the trainer behind it), side by
    side: one mixed batch, ``rows_per_adapter`` rows for each of ``adapters`` members and for the bare base,
    sampled (T=1, per-row seeds), tokens/s counted from the tokens each returned. Needs vLLM (`make vllm-venv`
    on a CPU machine: vLLM's CPU build); the embedded model only (vLLM reads the GGUF cache's model dir)."""
    source = resolve_source("embedded")
    model, tok = load_base(source, "float32", "cpu")
    trainer = MultiLoraBackend(model, tok, LoraSpec(rank=rank), adapters)
    names = [f"m{i}" for i in range(adapters)]
    for n in names:
        trainer.add_adapter(n)
    _randomise(trainer, names)
    questions = ["Write a Python function f that reverses a list.", "What is 17 * 23?", "Name three prime numbers.",
                 "Explain recursion in one sentence."]
    rows = [n for n in [*names, None] for _ in range(rows_per_adapter)]
    prompts = [trainer.encode_chat([{"role": "user", "content": questions[i % len(questions)]}]) for i in range(len(rows))]
    with tempfile.TemporaryDirectory() as sync:
        t0 = time.perf_counter()
        engine = VllmBackend(trainer, cached_source(source, need_weights=True).path_or_id, sync,
                             vllm_max_loras(adapters), rank, max_model_len=512, dtype="float32")
        out = {"engine_start_s": time.perf_counter() - t0, "rows": len(rows), "adapters": adapters}
        sides = {"vllm": lambda: engine.generate(prompts, rows, new_tokens, seed=0),
                 "multilora": lambda: trainer.generate(prompts, rows, new_tokens, seed=0, batch_size=len(rows))}
        sides["vllm"]()  # warm-up (loads the adapters)
        for _ in range(repeats):  # interleaved, best of repeats: machine load shifts both sides alike
            for label, run in sides.items():
                t0 = time.perf_counter()
                tokens = sum(len(g.completion_ids) for g in run())
                rate = tokens / (time.perf_counter() - t0)
                out[f"{label}_tokens_per_s"] = max(out.get(f"{label}_tokens_per_s", 0.0), rate)
        out["vllm_speedup"] = out["vllm_tokens_per_s"] / out["multilora_tokens_per_s"]
        engine.close()
    return out


def bench_learn(backend: str = "multilora", seeds: int = 3, steps: int = 18, window: int = 4,
                overrides: list[str] = ()) -> dict:
    """The planted environment (configs/planted.yaml, with ``overrides``) on ``backend`` (``learning.BACKENDS``)
    for ``seeds`` seeds:
    the students' ``start``, ``end``, ``rise`` and ``interval`` (95% t-interval of end - start over seeds) at the
    top, both roles' under ``student`` / ``teacher``, and each role's mean reward per step (``curve``)."""
    if backend not in learning.BACKENDS:
        raise ValueError(f"bench learn: unknown backend {backend!r}; choose one of {', '.join(learning.BACKENDS)}")
    curve = learning.run_planted(list(range(seeds)), steps, [*learning.BACKENDS[backend], *overrides],
                                 progress=lambda seed, s, r: print(f"seed {seed} step {s}: " + ", ".join(
                                     f"{k} {v:+.3f}" for k, v in r.items()), flush=True))
    out = {"backend": backend, "steps": steps, "window": window, "overrides": list(overrides)}
    for role in learning.ROLES:
        out[role] = learning.rise(curve.rewards[role], window)
        out[role]["curve"] = [round(float(x), 4) for x in curve.rewards[role].mean(0)]
    out.update({k: out["student"][k] for k in ("start", "end", "rise", "interval")})
    return out
