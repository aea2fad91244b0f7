"""The shape of a LoRA adapter (rank, alpha, dropout, target modules) and reading it from a PEFT adapter dir's
``adapter_config.json``. Plain data, no torch: evaluation checks its targets' shapes without loading a model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


def read_lora_spec(directory: str | Path) -> LoraSpec:
    """The LoRA shape an adapter dir was saved with (rank, alpha, dropout, target modules)."""
    config_path = Path(directory) / "adapter_config.json"
    if not config_path.is_file():
        raise ValueError(f"{directory} is not a PEFT adapter dir (no adapter_config.json)")
    cfg = json.loads(config_path.read_text())
    targets = cfg.get("target_modules")
    if isinstance(targets, str):  # a regex: only PEFT itself can apply it
        raise ValueError(f"adapter {directory} targets modules by the pattern {targets!r}; load it with the peft backend")
    return LoraSpec(cfg.get("r"), float(cfg.get("lora_alpha")), float(cfg.get("lora_dropout") or 0.0), tuple(sorted(targets)))
