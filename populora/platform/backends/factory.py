"""``make_backend``: the one place a backend is chosen and built, for training and evaluation alike. Every backend
module imports its heavy package (peft, ray, vllm) only when it builds one, so importing them all here is cheap."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from populora.platform.model import models
from populora.platform.backends.base import Backend, LoraSpec
from populora.platform.backends.checkpointing import enable as enable_checkpointing
from populora.platform.backends.data_parallel import DataParallelBackend
from populora.platform.backends.multilora import MultiLoraBackend
from populora.platform.backends.peft import PeftBackend
from populora.platform.backends.ray import RayBackend, init_ray
from populora.platform.backends.vllm import VllmBackend, VllmEngine
from populora.platform.ray_settings import check_ray


@dataclass(frozen=True)
class RaySpec:
    """Where the model workers run (see ``populora.platform.backends.ray``)."""

    address: str                       # 'local', 'auto' or 'ray://host:port'
    num_cpus: int | None = None        # CPUs of a 'local' Ray instance (None: all)
    model_workers: int = 1             # actors, each holding the base and its members' adapters
    gpus_per_worker: float = 0.0       # > 0 required on CUDA (``check_ray``): Ray pins each worker to its GPU(s)
    cpus_per_worker: float = 1.0
    placement: str = "by_member"       # by_member: members spread over workers; data_parallel: rows spread (data_parallel.py)


@dataclass(frozen=True)
class BackendConfig:
    """Which base model, which LoRA shape, which implementation."""

    base: str = "embedded"             # as model.base: 'embedded', an HF id, a local dir or a .gguf file
    gguf_file: str | None = None       # GGUF file inside ``base``
    tiny_random: bool = False          # a tiny random model of the same tokenizer (tests)
    dtype: str = "float32"             # weights dtype of the frozen base
    device: str = "auto"               # 'auto', 'cpu', 'cuda', 'cuda:1', ...
    lora: LoraSpec = field(default_factory=LoraSpec)
    kind: Literal["multilora", "peft"] = "multilora"  # batched multi-LoRA, or PEFT (the reference)
    generation: Literal["torch", "vllm"] = "torch"    # vllm: generation on a vLLM engine, training on ``kind``
    slots: int = 8                     # adapters expected at once (multi-LoRA grows past it when needed)
    vllm_gpu_memory: float = 0.45      # fraction of GPU memory vLLM may take
    vllm_sync_dir: str = ".vllm-adapters"  # where changed adapters are written for vLLM to load
    max_model_len: int = 8192          # vLLM's longest prompt + completion (training: optim.max_seq_len)
    vllm_engine: VllmEngine = "auto"   # where vLLM's engine runs: auto (inline on vLLM's CPU build), process, inline
    activation_checkpointing: bool = False  # recompute decoder layers in the backward (checkpointing.py)
    ray: RaySpec | None = None         # None: in this process


def vllm_max_loras(slots: int) -> int:
    """vLLM's ``max_loras`` for ``slots`` members mixed with base rows: one more than the members, so the slot a
    base row reads on vLLM's CPU LoRA path stays empty (backends/vllm.py; upstream fix: vllm-project/vllm PR 48421).

    >>> vllm_max_loras(4)
    5
    """
    return max(slots + 1, 2)


def make_backend(config: BackendConfig) -> Backend:
    """The backend ``config`` asks for: batched multi-LoRA (default) or PEFT in this process, multi-LoRA on Ray
    actors, or either with generation on vLLM."""
    source = models.resolve_source(config.base, config.gguf_file)
    if config.ray is not None:
        rs = config.ray
        check_ray(config.generation, config.kind, config.device, rs.gpus_per_worker, rs.placement)
        tok = models.load_tokenizer(models.cached_source(source, need_weights=False))
        model = {k: v for k, v in asdict(config).items()
                 if k in ("base", "gguf_file", "dtype", "device", "tiny_random", "activation_checkpointing")}
        if rs.placement == "data_parallel":
            vllm = None if config.generation != "vllm" else {
                "model_path": models.cached_source(source, need_weights=True).path_or_id, "sync_dir": config.vllm_sync_dir,
                "max_loras": vllm_max_loras(config.slots), "gpu_memory": config.vllm_gpu_memory,
                "max_model_len": config.max_model_len, "engine": config.vllm_engine}
            return DataParallelBackend(init_ray(rs.address, rs.num_cpus), model, tok, config.lora, rs.model_workers,
                                       config.slots, rs.gpus_per_worker, rs.cpus_per_worker, vllm)
        return RayBackend(init_ray(rs.address, rs.num_cpus), model, tok, config.lora, rs.model_workers, config.slots,
                          rs.gpus_per_worker, rs.cpus_per_worker)
    base, tok = models.load_base(source, config.dtype, config.device, config.tiny_random)
    if config.activation_checkpointing:
        enable_checkpointing(base)
    if config.kind == "multilora":
        backend = MultiLoraBackend(base, tok, config.lora, config.slots)
    else:
        backend = PeftBackend(base, tok, config.lora)
    if config.generation == "vllm":
        weights = models.cached_source(source, need_weights=True)
        backend = VllmBackend(backend, weights.path_or_id, Path(config.vllm_sync_dir), vllm_max_loras(config.slots),
                              config.lora.rank, config.vllm_gpu_memory, config.max_model_len, config.dtype,
                              config.vllm_engine)
    return backend
