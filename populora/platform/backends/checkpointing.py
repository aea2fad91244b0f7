"""Activation checkpointing: each decoder layer keeps only its input for the backward pass and recomputes the
rest there, so a training forward's activation memory grows with one layer instead of all of them (about 1/3 more
compute: one more forward per trained token).

Why our own wrapper and not ``model.gradient_checkpointing_enable()``: transformers only checkpoints a layer in
training mode, and the backends keep the frozen base in eval mode throughout (no dropout may ever fire). So each
decoder layer's ``forward`` is wrapped in ``torch.utils.checkpoint`` (non-reentrant, the variant PyTorch
recommends, which needs no input that requires grad) whenever grad is on; generation and no-grad forwards run it
as before. Every backend (PEFT, batched multi-LoRA, Ray actors) wraps the same layers of the same base.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

MARK = "_populora_checkpointed"
STATE = "_populora_checkpoint_state"  # on the model: [(capture, restore)] of per-forward state (see register_state)


def register_state(model: nn.Module, capture, restore) -> None:
    """Per-forward state a backend keeps outside the tensors (the multi-LoRA slot of each row): ``capture()``
    is called when a checkpointed layer runs forward, and ``restore(value)`` (a context manager) wraps its
    recomputation in the backward pass, which may run after the backend has moved on to other rows."""
    _hooks(model).append((capture, restore))


def _hooks(model: nn.Module) -> list:
    """The model's [(capture, restore)] list, made on first use: a backend may register before or after enable."""
    if not hasattr(model, STATE):
        setattr(model, STATE, [])
    return getattr(model, STATE)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of a causal LM: the elements of its ``layers`` ModuleList (Llama, Qwen2, Mistral, ...).

    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2)
    >>> len(decoder_layers(LlamaForCausalLM(cfg)))
    3
    """
    for name, module in model.named_modules():
        if name.endswith("layers") and isinstance(module, nn.ModuleList) and len(module):
            return list(module)
    raise ValueError(f"{type(model).__name__}: no decoder `layers` ModuleList found to checkpoint; "
                     f"set model.activation_checkpointing=false for this architecture")


def enable(model: nn.Module) -> int:
    """Checkpoint every decoder layer of ``model`` (idempotent); returns how many layers are checkpointed."""
    layers = decoder_layers(model)
    for layer in layers:
        if getattr(layer, MARK, False):
            continue
        layer.forward = _checkpointed(layer.forward, _hooks(model))
        setattr(layer, MARK, True)
    return len(layers)


def _checkpointed(forward, hooks: list):
    @functools.wraps(forward)
    def run(*args, **kwargs):
        # a KV cache is written by the forward: recomputing it would append the same keys twice
        caching = kwargs.get("past_key_values") is not None or kwargs.get("use_cache")
        if torch.is_grad_enabled() and not caching:
            captured = [(restore, capture()) for capture, restore in hooks]

            @contextlib.contextmanager
            def recomputing():  # entered only when the backward pass recomputes this layer
                with contextlib.ExitStack() as stack:
                    for restore, value in captured:
                        stack.enter_context(restore(value))
                    yield

            def contexts():
                return contextlib.nullcontext(), recomputing()

            return checkpoint(forward, *args, use_reentrant=False, context_fn=contexts, **kwargs)
        return forward(*args, **kwargs)

    return run
