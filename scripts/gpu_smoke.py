"""The checks of scripts/gpu-smoke.sh that need Python: each prints one JSON object per check on its last lines.

    python scripts/gpu_smoke.py vllm  --model M   # (a) distinct rollouts, (b) trainer log-probs = vLLM's
    python scripts/gpu_smoke.py step  --model M   # (c) one paper-4t4s step, peak GPU memory against the plan
    python scripts/gpu_smoke.py ray   --model M   # (d) 2 Ray workers x 1 GPU each (ray.placement by_member)
    python scripts/gpu_smoke.py dp    --model M   # (f) a data-parallel step on 2 GPUs, one vLLM engine per worker

Each result: {"check": "a", "status": "pass"|"fail"|"skip", "seconds": ..., "reason": ..., plus figures}.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOGPROB_TOLERANCE = 0.05  # mean |trainer - vLLM| per token: bf16 kernels differ by ~0.01; a stale adapter by far more
EMITTED: set[str] = set()


def emit(check: str, t0: float, status: str, reason: str = "", **figures) -> bool:
    EMITTED.add(check)
    print(json.dumps({"check": check, "status": status, "seconds": round(time.perf_counter() - t0, 1),
                      "reason": reason, **figures}), flush=True)
    return status != "fail"


def _random_adapter(backend, name: str, scale: float = 0.05) -> None:
    """A non-zero B, so the adapter changes what the model says (a fresh adapter, B = 0, is the base): with A at
    PEFT's init and B ~ N(0, 0.05^2), each LoRA'd projection moves by ~20% of its output, far more than 0.05 nats."""
    g = torch.Generator().manual_seed(0)
    state = backend.adapter_state(name)
    backend.set_adapter_state(name, {k: (torch.randn(v.shape, generator=g) * scale).to(v) if "lora_B" in k else v
                                     for k, v in state.items()})


# ---------------------------------------------------------------- (a) and (b): the vLLM backend
def check_vllm(model: str) -> bool:
    from populora.platform.backends import BackendConfig, LoraSpec, make_backend

    t0 = time.perf_counter()
    backend = make_backend(BackendConfig(base=model, dtype="bfloat16", device="cuda", generation="vllm", slots=2,
                                         lora=LoraSpec(16, 32.0, 0.0, ("q_proj", "k_proj", "v_proj", "o_proj")),
                                         vllm_sync_dir="/tmp/populora-smoke-vllm", max_model_len=4096))
    backend.add_adapter("S0", seed=0)
    _random_adapter(backend, "S0")
    prompt = backend.encode_chat([{"role": "user", "content": "Write a short Python function that reverses a string."}])
    gens = backend.generate([prompt] * 4, ["S0"] * 4, 64, temperature=1.0, seed=1)
    distinct = len({tuple(g.completion_ids) for g in gens})
    ok = emit("a", t0, "pass" if distinct >= 2 else "fail",
              "" if distinct >= 2 else "4 identical prompts at temperature 1 gave one completion: per-row seeds broken",
              distinct=distinct, startup_included=True)

    t0 = time.perf_counter()
    from vllm import SamplingParams

    prompts = [backend.encode_chat([{"role": "user", "content": q}]) for q in
               ("What is 17 * 23?", "Name three prime numbers.", "Explain recursion in one sentence.")]
    ids = [backend.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    backend.generate(prompts[:1], ["S0"], 1, seed=0)  # syncs the adapter, wakes the engine
    outs = backend.engine.generate([{"prompt_token_ids": i} for i in ids],
                                   SamplingParams(max_tokens=48, temperature=1.0, seed=3, logprobs=0),
                                   lora_request=[backend.requests["S0"]] * len(ids), use_tqdm=False)
    completions = [list(o.outputs[0].token_ids) for o in outs]
    theirs = [[lp[t].logprob for lp, t in zip(o.outputs[0].logprobs, c)] for o, c in zip(outs, completions)]
    logp, mask = backend.sequence_logprobs("S0", ids, completions, max_len=4096)
    base_logp, _ = backend.sequence_logprobs(None, ids, completions, max_len=4096)
    diffs, base_diffs = [], []
    for r, lps in enumerate(theirs):
        n = int(mask[r].sum())
        diffs += (logp[r, :n].float().cpu() - torch.tensor(lps[:n])).abs().tolist()
        base_diffs += (base_logp[r, :n].float().cpu() - torch.tensor(lps[:n])).abs().tolist()
    mean, base_mean = sum(diffs) / len(diffs), sum(base_diffs) / len(base_diffs)
    # the adapter must matter (else a stale one would pass unseen) and vLLM must apply it as the trainer does
    if base_mean <= LOGPROB_TOLERANCE:
        reason = f"the adapter barely changes the log-probs ({base_mean:.3f}): the check cannot see a stale one"
    elif mean >= LOGPROB_TOLERANCE:
        reason = (f"trainer and vLLM disagree on vLLM's samples (mean |diff| {mean:.3f} >= {LOGPROB_TOLERANCE}): "
                  "stale or mis-scaled adapter in vLLM")
    else:
        reason = ""
    return emit("b", t0, "fail" if reason else "pass", reason, mean_abs_diff=round(mean, 4),
                mean_abs_diff_without_adapter=round(base_mean, 4), tokens=len(diffs)) and ok


# ---------------------------------------------------------------- (c): one paper-4t4s step
class PeakMemory:
    """Device-wide memory in use (every process: vLLM's engine runs in its own), sampled every 0.2 s."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            free, total = torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)
            time.sleep(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def check_step(model: str, quick: bool, out_dir: str) -> bool:
    from populora.training.config import load_config
    from populora.training.loop import Trainer
    from populora.training.compute.workload import make_plan

    t0 = time.perf_counter()
    overrides = [f"model.base={model}", "steps=1", f"output_dir={out_dir}", "tasks.seed_buffer=16", "tasks.seed_rounds=1"]
    if quick:
        overrides.append("tasks.tasks_per_teacher=4")
    cfg = load_config(ROOT / "configs" / "paper-4t4s.yaml", overrides)
    plan = make_plan(cfg, "h100-80gb")["memory_gb"]
    # the plan bounds activations at optim.max_seq_len (6144); this step's sequences are at most a propose
    # prompt + its budget, so the like-for-like figure is the plan at that length
    from populora.training.compute import workload

    longest = workload.PROPOSE_BASE + workload.PER_REFERENCE * cfg.tasks.references + cfg.tasks.max_new_tokens_propose
    at_step = make_plan(load_config(ROOT / "configs" / "paper-4t4s.yaml", overrides + [f"optim.max_seq_len={longest}"]),
                        "h100-80gb")["memory_gb"]
    with PeakMemory() as device:
        trainer = Trainer.create(cfg)
        torch.cuda.reset_peak_memory_stats()
        t_step = time.perf_counter()
        record = trainer.step()
        step_s = time.perf_counter() - t_step
    torch_peak = torch.cuda.max_memory_allocated() / 1e9
    train_plan = plan["base_weights"] + plan["adapters"] + plan["optimizer"] + plan["activations"]
    train_at_step = at_step["base_weights"] + at_step["adapters"] + at_step["optimizer"] + at_step["activations"]
    trainer.finish()
    return emit("c", t0, "pass", "", step_seconds=round(step_s, 1), quick=quick,
                torch_peak_gb=round(torch_peak, 2), plan_training_gb=round(train_plan, 2),
                plan_training_gb_at_step_len=round(train_at_step, 2), step_len=longest,
                torch_peak_vs_plan_at_step_len=round(torch_peak / train_at_step, 3),
                device_peak_gb=round(device.peak / 1e9, 2), plan_total_gb=round(plan["total"], 2),
                tasks=len(record.get("tasks", [])))


# ---------------------------------------------------------------- (d): Ray, 2 workers x 1 GPU
def check_ray(model: str, out_dir: str) -> bool:
    t0 = time.perf_counter()
    if torch.cuda.device_count() < 2:
        return emit("d", t0, "skip", f"{torch.cuda.device_count()} GPU visible; the Ray check needs 2")
    from populora.training.config import load_config
    from populora.training.loop import Trainer

    cfg = load_config(ROOT / "configs" / "smoke.yaml", [
        f"model.base={model}", "model.dtype=bfloat16", "model.device=cuda", "steps=1", f"output_dir={out_dir}",
        "ray.address=local", "ray.model_workers=2", "ray.gpus_per_worker=1", "ray.placement=by_member",
        "population.teachers=2", "population.students=2"])
    trainer = Trainer.create(cfg)
    backend = trainer.backend
    where = [backend.ray.get(w.where.remote()) for w in backend.workers]
    trainer.step()
    state = backend.adapter_state(trainer.population.alive()[0].id)
    on_cpu = all(t.device.type == "cpu" for t in state.values())
    gpus = [tuple(w["gpu_ids"]) for w in where]
    good = len(set(gpus)) == 2 and all(gpus) and on_cpu
    trainer.finish()
    return emit("d", t0, "pass" if good else "fail",
                "" if good else f"workers not on distinct GPUs ({gpus}) or results not on the CPU ({on_cpu})",
                workers=where, results_on_cpu=on_cpu)


# ---------------------------------------------------------------- (f): data-parallel, 2 workers x 1 GPU
def check_data_parallel(model: str, out_dir: str, workers: int = 2) -> bool:
    """One smoke step with ray.placement=data_parallel on ``workers`` GPUs, each worker generating on its own vLLM
    engine (torch when vLLM is not installed): distinct GPUs, every worker generated and trained rows, and every
    worker's adapters bit-identical after the all-reduced update (NCCL)."""
    t0 = time.perf_counter()
    if torch.cuda.device_count() < workers:
        return emit("f", t0, "skip", f"{torch.cuda.device_count()} GPU visible; the data-parallel check needs {workers}")
    import importlib.util

    from populora.training.config import load_config
    from populora.training.loop import Trainer

    generation = "vllm" if importlib.util.find_spec("vllm") else "torch"
    cfg = load_config(ROOT / "configs" / "smoke.yaml", [
        f"model.base={model}", "model.dtype=bfloat16", "model.device=cuda", f"model.generation={generation}",
        "model.vllm_gpu_memory=0.5", "steps=1", f"output_dir={out_dir}", "ray.address=local",
        f"ray.model_workers={workers}", "ray.gpus_per_worker=1", "ray.placement=data_parallel",
        "population.teachers=2", "population.students=2"])
    trainer = Trainer.create(cfg)
    backend = trainer.backend
    t1 = time.perf_counter()
    trainer.step()
    step_s = time.perf_counter() - t1
    where = backend.where()
    identical = all(all(torch.equal(s[0][k], other[k]) for other in s[1:] for k in s[0])
                    for s in (backend.adapter_states(m.id) for m in trainer.population.alive()))
    gpus = [tuple(w["gpu_ids"]) for w in where]
    busy = all(w["rows"]["generated"] > 0 and w["rows"]["trained"] > 0 for w in where)
    good = len(set(gpus)) == workers and all(gpus) and identical and busy
    trainer.finish()
    backend.shutdown()
    return emit("f", t0, "pass" if good else "fail",
                "" if good else f"GPUs {gpus}, workers identical {identical}, every worker busy {busy}",
                generation=generation, step_s=round(step_s, 1), collective=backend.collective, workers=where)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=["vllm", "step", "ray", "dp"])
    ap.add_argument("--model", default="Qwen/Qwen2.5-7B", help="model.base (default: the paper presets' base)")
    ap.add_argument("--quick", action="store_true", help="(c): 4 tasks per teacher instead of 32")
    ap.add_argument("--out", default="/tmp/populora-smoke", help="run dirs")
    args = ap.parse_args()
    names = {"vllm": ["a", "b"], "step": ["c"], "ray": ["d"], "dp": ["f"]}[args.check]
    t0 = time.perf_counter()
    try:
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA GPU (driver >= 580 for torch 2.14's CUDA 13 wheels? --gpus all?)")
        if args.check == "vllm":
            ok = check_vllm(args.model)
        elif args.check == "step":
            ok = check_step(args.model, args.quick, args.out)
        elif args.check == "ray":
            ok = check_ray(args.model, args.out)
        else:
            ok = check_data_parallel(args.model, args.out)
    except Exception as err:  # one JSON line per check still: the script's table must show what failed
        traceback.print_exc()
        for name in [n for n in names if n not in EMITTED]:
            emit(name, t0, "fail", f"{type(err).__name__}: {err}"[:500])
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
