"""The optimizer of every backend, in one place: its settings (``AdamConfig``, declared in the torch-free
``platform/adam_config.py`` so the training config extends it without loading torch), and the optimizer built from
them (``make_optimizer``): ``torch.optim.AdamW`` for one adapter's parameters (PEFT, the reference), ``SlotAdam`` for
stacked ones (the batched multi-LoRA backend, in one process and on every data-parallel worker).

A new AdamW setting is one field of ``AdamConfig`` (with its one-line doc): training's ``optim`` section extends
``AdamConfig``, so it is a config key at once, and ``make_optimizer`` hands every field to both optimizers as
keywords (``torch.optim.AdamW``'s names; ``SlotAdam`` takes the same ones and must implement the arithmetic of any
it does not have yet: it has ``lr``, ``weight_decay``, ``betas`` and ``eps``).

``SlotAdam`` is AdamW with per-slot moments and step counts, identical per slot to ``torch.optim.AdamW`` on that
member alone, so a member that gets no rollouts in a step does not move, and an evolved child starts fresh.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from populora.platform.adam_config import AdamConfig


def make_optimizer(params: list[nn.Parameter], optim: AdamConfig, stacked: bool = False) -> torch.optim.AdamW | SlotAdam:
    """The optimizer of ``params`` with ``optim``'s settings: ``torch.optim.AdamW`` (one adapter's parameters), or
    with ``stacked`` (parameters whose first dim is the slot) ``SlotAdam``."""
    settings = optim.adam().model_dump()
    return SlotAdam(params, **settings) if stacked else torch.optim.AdamW(params, **settings)


class SlotAdam:
    """AdamW over stacked parameters whose first dim is the slot, with moments and step counts per slot."""

    def __init__(self, params: list[nn.Parameter], lr: float, weight_decay: float = 0.0, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.lr, self.wd, self.betas, self.eps = params, lr, weight_decay, betas, eps
        self.exp_avg = [torch.zeros_like(p) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        self.steps = torch.zeros(params[0].shape[0], dtype=torch.long)

    def rebind(self, params: list[nn.Parameter]) -> None:
        """After layers grew: pad moments and step counts to the new slot count."""
        slots = params[0].shape[0]
        pad = lambda t: torch.cat([t, t.new_zeros(slots - t.shape[0], *t.shape[1:])]) if slots > t.shape[0] else t
        self.params = params
        self.exp_avg, self.exp_avg_sq = [pad(t) for t in self.exp_avg], [pad(t) for t in self.exp_avg_sq]
        self.steps = pad(self.steps)

    def clip_(self, slots: list[int], max_norm: float) -> dict[int, float]:
        """Clip each slot's gradient to ``max_norm`` over all layers (``clip_grad_norm_`` per member); return norms.
        Works in place on each slot's views (a slot is a leading index: its views are contiguous, no copies)."""
        norms = {}
        for s in slots:
            grads = [p.grad[s] for p in self.params if p.grad is not None]
            if not grads:
                norms[s] = 0.0
                continue
            total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2)), 2)
            torch._foreach_mul_(grads, (max_norm / (total + 1e-6)).clamp(max=1.0))
            norms[s] = float(total)
        return norms

    @torch.no_grad()
    def step(self, slots: list[int]) -> None:
        """torch.optim.AdamW's update (its single-tensor arithmetic), in place on the slots' views; slots with the
        same step count share one foreach call per op."""
        b1, b2 = self.betas
        self.steps[torch.tensor(slots)] += 1  # step counts stay on the CPU (read without a device sync)
        by_step: dict[int, list[int]] = {}
        for s in slots:
            by_step.setdefault(int(self.steps[s]), []).append(s)
        for t, group in by_step.items():
            live = [(p, m, v) for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq) if p.grad is not None]
            params = [p.data[s] for p, _, _ in live for s in group]
            grads = [p.grad[s] for p, _, _ in live for s in group]
            ms = [m[s] for _, m, _ in live for s in group]
            vs = [v[s] for _, _, v in live for s in group]
            if not params:
                continue
            torch._foreach_mul_(params, 1 - self.lr * self.wd)
            torch._foreach_lerp_(ms, grads, 1 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, grads, grads, 1 - b2)
            step_size = self.lr / (1 - b1 ** t)
            denom = torch._foreach_sqrt(vs)
            torch._foreach_div_(denom, math.sqrt(1 - b2 ** t))
            torch._foreach_add_(denom, self.eps)
            torch._foreach_addcdiv_(params, ms, denom, -step_size)

    def reset(self, slot: int) -> None:
        for m, v in zip(self.exp_avg, self.exp_avg_sq):
            m[slot].zero_()
            v[slot].zero_()
        self.steps[slot] = 0

    def slot_state(self, slot: int) -> dict:
        return {"step": int(self.steps[slot]), "exp_avg": [m[slot].clone() for m in self.exp_avg],
                "exp_avg_sq": [v[slot].clone() for v in self.exp_avg_sq]}

    def load_slot_state(self, slot: int, state: dict) -> None:
        self.steps[slot] = state["step"]
        for m, saved in zip(self.exp_avg, state["exp_avg"]):
            m[slot].copy_(saved)
        for v, saved in zip(self.exp_avg_sq, state["exp_avg_sq"]):
            v[slot].copy_(saved)
