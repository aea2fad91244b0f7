"""Standard PEFT adapter dirs (adapter_config.json + adapter_model.safetensors): the one format adapters leave a
backend in, so checkpoints, evaluation and other tools (PEFT, vLLM) read what any backend wrote."""

from __future__ import annotations

from pathlib import Path

import torch

from populora.platform.model.lora_spec import LoraSpec, read_lora_spec


def lora_config(spec: LoraSpec, base_model_name: str | None = None):
    """PEFT's ``LoraConfig`` for ``spec`` (a causal LM)."""
    from peft import LoraConfig

    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                        target_modules=list(spec.target_modules), task_type="CAUSAL_LM")
    config.base_model_name_or_path = base_model_name
    return config


def read_peft_dir(directory: Path, spec: LoraSpec) -> dict[str, torch.Tensor]:
    """LoRA tensors of a PEFT adapter dir, keyed as PEFT saves them; its rank and scale must be ``spec``'s."""
    from safetensors.torch import load_file

    saved = read_lora_spec(directory)
    if saved.rank != spec.rank:
        raise ValueError(f"adapter {directory} has rank {saved.rank}, this population uses rank {spec.rank}")
    if saved.alpha != spec.alpha:  # same tensors, another scale alpha / r: the outputs would silently differ
        raise ValueError(f"adapter {directory} has lora_alpha {saved.alpha}, this population uses {spec.alpha}")
    return load_file(str(Path(directory) / "adapter_model.safetensors"))


def write_peft_dir(state: dict[str, torch.Tensor], spec: LoraSpec, directory: str | Path,
                   base_model_name: str | None = None) -> Path:
    """Write ``state`` (keys as PEFT saves them) and its config as a PEFT adapter dir."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(directory / "adapter_model.safetensors"),
              metadata={"format": "pt"})
    lora_config(spec, base_model_name).save_pretrained(str(directory))
    return directory
