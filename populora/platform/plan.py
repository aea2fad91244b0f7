"""The plan of a run before it runs: memory per GPU, compute per step, and whether it fits.

Pure arithmetic on a model's shape (``Architecture``), a GPU (``GPUS``) and the work of one step (``Workload``,
counted from a training config by ``populora.training.compute.workload``). Every figure is an estimate whose model is
stated next to it; GB are 10^9 bytes, as published model sizes are (Qwen2.5-7B in bf16: 15.2 GB).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

GB = 1e9
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
LORA_BYTES = 4          # LoRA weights, their gradients and both AdamW moments are fp32 on every backend
GEN_BATCH = 16          # rows per torch generate() call (PeftBackend.generate's batch_size)
LOGIT_CHUNK = 256       # completion positions per LM-head chunk (populora.platform.backends.logprobs.CHUNK)
USABLE = 0.92           # of a GPU's memory: the rest goes to the CUDA context and allocator fragmentation
# Utilisation (achieved / peak FLOPs). Training forward+backward: 0.35, measured (scripts/gpu-shapes.sh, H200,
# Qwen2.5-7B shapes, paper-4t4s: 2,583 s per step scaled against 2,582 planned; docs/gpu.md). Generation is
# memory-bound decoding: torch's HF generate at 16 rows a batch measured 0.0017 (114 ms per decoded token at 7B;
# the 0.03 stated before was 18x too fast); vLLM's continuous batching 0.25 (stated, not yet measured).
MFU = {"train": 0.35, "generate_torch": 0.0017, "generate_vllm": 0.25}


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float     # as sold: an "80 GB" H100 holds 80 GiB
    tflops_bf16: float    # dense tensor-core peak, bf16/fp16 with fp32 accumulate
    tflops_fp32: float    # dense TF32 tensor-core peak (a float32 base)

    @property
    def usable_gb(self) -> float:
        return self.memory_gib * 2**30 / GB * USABLE


GPUS = {g.name: g for g in (
    Gpu("h100-80gb", 80, 989, 494),
    Gpu("a100-80gb", 80, 312, 156),
    Gpu("a100-40gb", 40, 312, 156),
    Gpu("l40s-48gb", 48, 362, 183),
    Gpu("rtx4090-24gb", 24, 165, 83),
)}


class PlanError(ValueError):
    """The plan cannot be made (unknown architecture or GPU); the message says which flag to pass."""


@dataclass(frozen=True)
class Architecture:
    """A Llama-style decoder (Qwen2, Llama, SmolLM2): SwiGLU MLP, grouped-query attention."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False

    @property
    def kv_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads * self.num_key_value_heads

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear module of one layer, by the names LoRA targets use."""
        h, i, kv = self.hidden_size, self.intermediate_size, self.kv_dim
        return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def params(self) -> int:
        h = self.hidden_size
        layer = sum(a * b for a, b in self.linear_shapes().values()) + 2 * h        # linears + 2 RMSNorms
        if self.attention_bias:
            layer += h + 2 * self.kv_dim
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * layer + embeddings + h                        # + the final norm

    def lora_params(self, rank: int, targets: list[str]) -> int:
        shapes = self.linear_shapes()
        unknown = sorted(set(targets) - set(shapes))
        if unknown:
            raise PlanError(f"model.target_modules {unknown} are not linear modules of this architecture ({sorted(shapes)})")
        return self.num_hidden_layers * sum(rank * sum(shapes[t]) for t in targets)

    def layer_bytes_per_token(self, dtype_bytes: int, targets: list[str]) -> float:
        """Activations one decoder layer keeps for the backward pass, per token, with gradients flowing through
        the frozen base (every layer holds LoRA) and SDPA attention (no s^2 term): ~10 hidden-sized tensors
        (Korthikanti et al.'s 7.5 for attention and norms, plus HF's fp32 RMSNorm and rotary copies) and 4
        intermediate-sized ones (gate, up, act, product) in the base dtype, plus the fp32 copy of each LoRA
        target's input (the LoRA path runs in fp32)."""
        h, i = self.hidden_size, self.intermediate_size
        lora_inputs = sum(self.linear_shapes()[t][0] for t in targets) * LORA_BYTES
        return (10 * h + 4 * i) * dtype_bytes + lora_inputs

    def logit_bytes_per_token(self, dtype_bytes: int) -> float:
        """The vocabulary-wide tensors of one completion position while its chunk of the LM head is live: logits
        and their gradient in the base dtype; fp32 cast, log-softmax and exp (entropy) and two fp32 gradients in
        the backward. The backends run the head on completion positions only, ``LOGIT_CHUNK`` at a time
        (backends/logprobs.py), so this is paid for one chunk, not the whole completion."""
        return self.vocab_size * (2 * dtype_bytes + 20)

    def train_bytes(self, dtype_bytes: int, targets: list[str], seq: int, completion: int, checkpointing: bool) -> float:
        """Activations of one trained sequence of ``seq`` tokens, ``completion`` of them generated. Without
        checkpointing every layer keeps its activations; with it (model.activation_checkpointing) each layer
        keeps only its input and one layer's activations are rebuilt at a time in the backward pass."""
        layer = self.layer_bytes_per_token(dtype_bytes, targets)
        body = (self.num_hidden_layers * self.hidden_size * dtype_bytes + layer) if checkpointing else self.num_hidden_layers * layer
        return seq * body + min(completion, LOGIT_CHUNK) * self.logit_bytes_per_token(dtype_bytes)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.num_hidden_layers * self.kv_dim * dtype_bytes

    def attention_flops(self, context: float) -> float:
        """Forward FLOPs of attention scores and values for one token attending to ``context`` tokens."""
        return 4 * self.num_hidden_layers * self.hidden_size * context


_TABLE = Path(__file__).with_name("architectures.yaml")


def table_key(base: str) -> str:
    """'Qwen/Qwen2.5-7B-Instruct' -> 'qwen2.5-7b'; 'embedded' -> 'smollm2-135m'."""
    if base == "embedded":
        return "smollm2-135m"
    name = base.rstrip("/").rsplit("/", 1)[-1].lower().split(".gguf")[0]
    return name.removesuffix("-instruct").replace("meta-llama-3.1", "llama-3.1")


def _from_config(data: dict) -> Architecture:
    fields = set(Architecture.__dataclass_fields__)
    data = data.get("text_config", data)
    return Architecture(**{k: v for k, v in data.items() if k in fields and v is not None})


def find_architecture(base: str, arch_config: str | None = None) -> tuple[Architecture, str]:
    """(architecture, where it came from): ``arch_config``, the base's local config.json, the HF cache, the table."""
    candidates = [Path(arch_config)] if arch_config else [Path(base).expanduser() / "config.json"]
    if not arch_config:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(base, "config.json")
            if isinstance(cached, str):
                candidates.append(Path(cached))
        except Exception:  # not an HF id (a path, 'embedded'): the table decides
            pass
    for path in candidates:
        if path.is_file():
            return _from_config(json.loads(path.read_text())), str(path)
    if arch_config:
        raise PlanError(f"--arch-config {arch_config!r} does not exist; give the model's config.json")
    table = yaml.safe_load(_TABLE.read_text())
    key = table_key(base)
    if key in table:
        return Architecture(**table[key]), f"shipped table ({key})"
    raise PlanError(f"no architecture for model.base {base!r}: not a local dir with config.json, not in the HF cache, "
                    f"not in the shipped table ({', '.join(sorted(table))}); pass --arch-config path/to/config.json")


@dataclass(frozen=True)
class Workload:
    """The work of one training step, counted from the config (see populora.training.compute.workload)."""

    adapters: int                # adapters alive in the population
    lora_slots: int              # adapter slots the backend allocates (multilora pre-allocates, grows by doubling)
    adapters_per_gpu: int
    propose_rows: float          # generated sequences per step, whole population
    solve_rows: float
    propose_prompt: int          # tokens per prompt (estimates) and per completion (budgets)
    solve_prompt: int
    propose_new: int
    solve_new: int
    micro_batch: int
    max_seq_len: int
    kl_forward: float            # share of steps with the extra base forward for KL (kl_coef > 0: 1; log_kl: 1/kl_every)
    vllm: bool
    vllm_fraction: float
    checkpointing: bool = False  # model.activation_checkpointing
    untrained_solve_rows: float = 0  # solve rows generated but not trained on (AZR's solve-rate estimation answers)

    @property
    def completion_len(self) -> int:
        """The longest completion trained on (the positions the LM head runs on)."""
        return min(max(self.propose_new, self.solve_new), self.max_seq_len)

    def trained_len(self, prompt: int, new: int) -> int:
        return min(prompt + new, self.max_seq_len)


def memory_gb(arch: Architecture, work: Workload, dtype: str, targets: list[str], rank: int, gpu: Gpu) -> dict:
    """Peak memory per GPU. Generation and the update run one after the other, so the peak holds the larger of
    their working sets: torch generation's KV cache, vLLM's pre-allocated fraction of the GPU (its own copy of the
    base included; it sleeps, weights in CPU RAM, while torch trains: backends/vllm.py), or the update's
    activations. The trainer's base, adapters and optimizer stay on the GPU throughout."""
    b = DTYPE_BYTES[dtype]
    lora = arch.lora_params(rank, targets) * LORA_BYTES
    slots_per_gpu = math.ceil(work.lora_slots * work.adapters_per_gpu / max(work.adapters, 1))
    longest = max(work.propose_prompt + work.propose_new, work.solve_prompt + work.solve_new)
    out = {
        "base_weights": arch.params() * b / GB,
        "adapters": 2 * slots_per_gpu * lora / GB,          # weights + gradients
        "optimizer": 2 * slots_per_gpu * lora / GB,         # AdamW exp_avg + exp_avg_sq
        "activations": work.micro_batch * arch.train_bytes(b, targets, work.max_seq_len, work.completion_len,
                                                           work.checkpointing) / GB,
        "generation_kv": 0.0 if work.vllm else GEN_BATCH * longest * arch.kv_bytes_per_token(b) / GB,
        "vllm": work.vllm_fraction * gpu.memory_gib * 2**30 / GB if work.vllm else 0.0,
    }
    out["total"] = (out["base_weights"] + out["adapters"] + out["optimizer"]
                    + max(out["activations"], out["generation_kv"], out["vllm"]))
    return out


def trained_rows(work: Workload) -> list[tuple[float, int, int]]:
    """(rows, prompt, new) of the sequences the update trains on."""
    return [(work.propose_rows, work.propose_prompt, work.propose_new),
            (work.solve_rows - work.untrained_solve_rows, work.solve_prompt, work.solve_new)]


def step_flops(arch: Architecture, work: Workload) -> dict:
    """FLOPs of one step, whole population: 2N per prompt and generated token (+ attention), and per trained
    token 2N forward + 2N backward (gradients w.r.t. activations; LoRA weight gradients are negligible) + 2N
    for the KL base forward when it runs + 2N for the forward activation checkpointing repeats."""
    n = arch.params()
    gen = 0.0
    for rows, prompt, new in ((work.propose_rows, work.propose_prompt, work.propose_new),
                              (work.solve_rows, work.solve_prompt, work.solve_new)):
        gen += rows * (2 * n * (prompt + new) + new * arch.attention_flops(prompt + new / 2))
    per_token = (4 + 2 * work.kl_forward + (2 if work.checkpointing else 0)) * n
    train = sum(rows * work.trained_len(p, new) * (per_token + 1.5 * arch.attention_flops(work.trained_len(p, new) / 2))
                for rows, p, new in trained_rows(work))
    return {"generate": gen, "train": train}


def step_time_s(flops: dict, work: Workload, dtype: str, gpu: Gpu, speedup: dict | None = None) -> dict:
    """Seconds per step at the stated utilisation; ``speedup`` {generate, train}: how much faster the busiest of
    several GPUs finishes than one GPU would (``placement_speedup``; 1 on one GPU)."""
    speedup = speedup or {"generate": 1.0, "train": 1.0}
    peak = (gpu.tflops_fp32 if dtype == "float32" else gpu.tflops_bf16) * 1e12
    gen_mfu = MFU["generate_vllm" if work.vllm else "generate_torch"]
    out = {"generate": flops["generate"] / (peak * gen_mfu * speedup["generate"]),
           "train": flops["train"] / (peak * MFU["train"] * speedup["train"])}
    out["total"] = out["generate"] + out["train"]
    return out


def placement_speedup(member_flops: list[dict], gpus: int) -> dict:
    """{generate, train}: total work over the busiest GPU's, with members placed as ``RayBackend.add_adapter``
    places them (in creation order, each on the worker holding the fewest). A member never spans GPUs, so N GPUs
    give N x only when the members' work splits evenly: paper-4t4s on 8 GPUs, one member each, waits for the
    busiest student (~4.5x), not 8x.

    >>> placement_speedup([{"generate": 1, "train": 1}] * 4, 2)
    {'generate': 2.0, 'train': 2.0}
    >>> placement_speedup([{"generate": 1, "train": 1}, {"generate": 3, "train": 3}], 2)
    {'generate': 1.3333333333333333, 'train': 1.3333333333333333}
    """
    load = [[] for _ in range(max(1, gpus))]
    for m in member_flops:
        min(load, key=len).append(m)
    out = {}
    for phase in ("generate", "train"):
        total = sum(m[phase] for m in member_flops)
        busiest = max(sum(m[phase] for m in worker) for worker in load)
        out[phase] = total / busiest if busiest else 1.0
    return out


def data_parallel_speedup(work: Workload, gpus: int) -> dict:
    """{generate, train}: total rows over the busiest worker's, with every phase's rows dealt round-robin over the
    workers whatever their adapter (``ray.placement: data_parallel``, backends/data_parallel.py): N x but for the
    remainder of a phase's rows over N (rows weighted by their tokens: a proposal and an answer differ).

    >>> w = Workload(1, 2, 1, 16, 320, 10, 10, 90, 90, 1, 1024, 0.0, False, 0.0, untrained_solve_rows=128)
    >>> data_parallel_speedup(w, 8), round(data_parallel_speedup(w, 3)["generate"], 3)
    ({'generate': 8.0, 'train': 8.0}, 2.973)
    """
    propose, solve = work.propose_prompt + work.propose_new, work.solve_prompt + work.solve_new
    phases = {"generate": ((work.propose_rows, propose), (work.solve_rows, solve)),
              "train": ((work.propose_rows, propose), (work.solve_rows - work.untrained_solve_rows, solve))}
    out = {}
    for phase, parts in phases.items():
        total = sum(rows * tokens for rows, tokens in parts)
        busiest = sum(math.ceil(rows / max(gpus, 1)) * tokens for rows, tokens in parts if rows > 0)
        out[phase] = total / busiest if busiest else 1.0
    return out


ALLREDUCE_GB_S = 100.0  # bus bandwidth of an NCCL all-reduce between GPUs of one NVLink node (nccl-tests, H100: ~100-400)


def allreduce_s(lora_bytes: float, adapters: int, mini_batches: int, gpus: int, gb_s: float = ALLREDUCE_GB_S) -> float:
    """Seconds a step spends all-reducing LoRA gradients: one ring all-reduce per optimizer step of the trained
    adapters' gradients (fp32), each GPU sending and receiving 2 (N-1)/N of them. Tiny next to the step: the
    paper baseline's 160 MB per step on 8 GPUs: ~10 ms.

    >>> round(allreduce_s(160e6, 1, 3, 8), 4), allreduce_s(160e6, 1, 3, 1)
    (0.0084, 0.0)
    """
    return 0.0 if gpus <= 1 else mini_batches * adapters * lora_bytes * 2 * (gpus - 1) / gpus / (gb_s * GB)


def verdict(memory: dict, gpu: Gpu, arch: Architecture, work: Workload, dtype: str, targets: list[str]) -> tuple[bool, str]:
    """(fits, advice): when it does not fit, the knob to turn and the value that would fit."""
    usable = gpu.usable_gb
    if memory["total"] <= usable:
        return True, f"{memory['total']:.1f} of {usable:.1f} usable GB per {gpu.name}"  # callers say "fits"
    fixed = memory["total"] - max(memory["activations"], memory["generation_kv"], memory["vllm"])
    short = f"needs {memory['total']:.1f} GB per GPU, {gpu.name} has {usable:.1f} usable"
    if fixed + max(memory["generation_kv"], memory["vllm"]) > usable:
        if work.vllm:
            return False, f"{short}: lower model.vllm_gpu_memory ({work.vllm_fraction}) or train on a larger GPU"
        return False, f"{short}: the weights alone do not fit; use a GPU with more memory or a smaller model.base"
    b, room = DTYPE_BYTES[dtype], usable - fixed
    if not work.checkpointing:
        with_ckpt = work.micro_batch * arch.train_bytes(b, targets, work.max_seq_len, work.completion_len, True) / GB
        if with_ckpt <= room:
            return False, (f"{short}: set model.activation_checkpointing=true (activations {memory['activations']:.1f} "
                           f"-> {with_ckpt:.1f} GB, ~1/3 more training compute)")
    per_row = arch.train_bytes(b, targets, work.max_seq_len, work.completion_len, work.checkpointing) / GB
    if per_row <= room:
        return False, f"{short}: set optim.micro_batch={int(room // per_row)} (activations {per_row:.1f} GB per sequence)"
    seq = work.max_seq_len
    while seq > 64 and arch.train_bytes(b, targets, seq, min(work.completion_len, seq), work.checkpointing) / GB > room:
        seq -= 64
    if arch.train_bytes(b, targets, seq, min(work.completion_len, seq), work.checkpointing) / GB <= room:
        ckpt = "" if work.checkpointing else " (or set model.activation_checkpointing=true)"
        return False, f"{short}: set optim.micro_batch=1 and optim.max_seq_len={seq}{ckpt}"
    return False, f"{short}: no micro-batch fits next to the weights; use a GPU with more memory"
