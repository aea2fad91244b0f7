"""What a model backend is: the ``Backend`` protocol and the plain data it takes and returns.

A backend holds one frozen base model and many named LoRA adapters (one per population member). The protocol is
what its callers really use: rollouts (``encode_chat``, ``generate``), the policy-gradient update
(``train_step``, optimizer state), evolution (adapter state in and out), checkpoints (PEFT dirs in and out,
optimizer state) and evaluation (``add_adapter(from_dir=...)``, ``generate``). Every implementation
(PEFT, batched multi-LoRA, Ray, vLLM) satisfies it; none inherits from another.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from populora.platform.backends.optimizer import AdamConfig
from populora.platform.model.lora_spec import LoraSpec

BASE = None  # adapter name meaning "the bare base model"


@dataclass
class TrainSample:
    """One sampled sequence of the update and its advantage (``weight``): loss -weight * ratio_t per token,
    clipped (policy_loss.py)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    weight: float
    kind: str = ""   # task kind (code_o, ...): AZR's mini-batches hold one kind (policy_loss.azr_mini_batches)
    role: str = ""   # teacher | student: a kind's proposer rows come before its solver rows
    generator_logp: list[float] | None = None  # the generator's log-prob of each sampled token (vLLM), else None


@dataclass
class Generation:
    prompt: str
    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None = None  # the generator's log-prob of each completion token (vLLM; torch: None)


@runtime_checkable
class Backend(Protocol):
    """One frozen base + named LoRA adapters: generation, log-probs, updates, adapters in and out."""

    tokenizer: object
    lora: LoraSpec

    @property
    def adapters(self) -> list[str]:
        """Names of the adapters held, in the order they were added."""

    # adapters in and out
    def add_adapter(self, name: str, from_dir: str | Path | None = None, seed: int | None = None) -> None:
        """A fresh adapter (A random, fixed by ``seed``; B zero) or one loaded from a PEFT adapter dir."""

    def remove_adapter(self, name: str) -> None: ...

    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        """Copies of the adapter's LoRA tensors (evolution operators work on these)."""

    def set_adapter_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        """Overwrite the adapter's LoRA tensors with ``state`` (same keys as ``adapter_state``)."""

    def save_adapter(self, name: str, directory: str | Path) -> Path:
        """Write a standard PEFT adapter dir (adapter_config.json + adapter_model.safetensors)."""

    # generation and log-probs
    def encode_chat(self, messages: list[dict], prefill: str = "") -> str:
        """The chat template (the same for every adapter) plus an assistant prefill."""

    def generate(self, prompts: list[str], adapters: list[str | None], max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None, stop: tuple[str, ...] = (),
                 batch_size: int = 16) -> list[Generation]:
        """One completion per prompt, row i with adapter ``adapters[i]`` (None = the bare base)."""

    def sequence_logprobs(self, adapter: str | None, prompt_ids: list[list[int]], completion_ids: list[list[int]],
                          max_len: int = 1024, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """(logp, mask), both (B, T_completion): per-token log-probs of each completion given its prompt, of
        softmax(logits / temperature)."""

    # training
    def init_optimizer(self, name: str, optim: AdamConfig) -> None:
        """Fresh AdamW moments for one adapter (new members and evolved children start with none), the optimizer
        built from ``optim`` by ``optimizer.make_optimizer``."""

    def optimizer_state(self, name: str) -> dict: ...

    def load_optimizer_state(self, name: str, state: dict) -> None: ...

    def train_step(self, batches: dict[str, list[TrainSample]], micro_batch: int = 4, max_len: int = 1024,
                   grad_clip: float = 1.0, kl_coef: float = 0.0, log_kl: bool = True, **clipped) -> dict[str, dict]:
        """The clipped policy-gradient update of every adapter with samples (policy_loss.py): ``clipped`` takes
        the other fields of ``UpdateSpec`` (``temperature``, ``mini_batch_size``, ``loss_agg``, ``kl_estimator``, ...).
        Returns {adapter: {loss, kl, entropy, clip_frac, ratio_dev, grad_norm, tokens, rollouts, mini_batches,
        per_mini_batch: [...]}}."""


def close(backend) -> None:
    """Stop the processes a backend started (vLLM's engine core, Ray actors and their engines); nothing for an
    in-process backend. Every run's end calls it (finished, stopped, failed), so no engine outlives its run."""
    stop = getattr(backend, "close", None)
    if stop is not None:
        stop()
