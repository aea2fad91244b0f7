"""Update phase: Task-Relative REINFORCE++ advantages, then one policy-gradient step per adapter.

Loss of member m (token mean over its rollouts, AZR's TRR++ with one on-policy step, so the PPO ratio is 1):
    L_m = -sum_i A_i * sum_t logp_m(y_it) / N_tokens  [+ kl_coef * KL(m || base)]
"""

from __future__ import annotations

from collections import defaultdict

import torch

from populora.training.advantages import task_relative_advantages
from populora.training.rollout import Rollout


def assign_advantages(rollouts: list[Rollout], scope: str) -> None:
    """Whiten rewards per (role, kind) over the population, or per (member, role, kind)."""
    groups = [(r.role, r.kind) if scope == "population" else (r.member, r.role, r.kind) for r in rollouts]
    adv = task_relative_advantages([r.reward for r in rollouts], groups, [len(r.completion_ids) for r in rollouts])
    for r, a in zip(rollouts, adv):
        r.advantage = float(a)


def update(backend, optimizers: dict[str, torch.optim.Optimizer], rollouts: list[Rollout], cfg) -> dict[str, dict]:
    """One optimizer step per member that has rollouts; returns per-member stats (loss, kl, grad_norm, tokens)."""
    oc = cfg.optim
    assign_advantages(rollouts, oc.advantage_scope)
    by_member = defaultdict(list)
    for r in rollouts:
        if r.completion_ids:
            by_member[r.member].append(r)
    return {m: _member_step(backend, optimizers[m], m, rs, oc) for m, rs in by_member.items()}


def _member_step(backend, optimizer, member: str, rollouts: list[Rollout], oc) -> dict:
    n_tokens = sum(len(r.completion_ids) for r in rollouts)
    optimizer.zero_grad(set_to_none=True)
    loss_total = kl_total = 0.0
    for i in range(0, len(rollouts), oc.micro_batch):
        chunk = rollouts[i:i + oc.micro_batch]
        prompts, completions = [r.prompt_ids for r in chunk], [r.completion_ids for r in chunk]
        logp, mask = backend.sequence_logprobs(member, prompts, completions, oc.max_seq_len)  # (B, T)
        adv = torch.tensor([r.advantage for r in chunk], device=logp.device)[:, None]         # (B, 1)
        loss = -(adv * logp * mask).sum() / n_tokens
        if oc.kl_coef > 0 or oc.log_kl:
            with torch.no_grad():
                base_logp, _ = backend.sequence_logprobs(None, prompts, completions, oc.max_seq_len)
            kl = ((logp - base_logp) * mask).sum() / n_tokens  # k1 estimator on sampled tokens
            kl_total += float(kl.detach())
            if oc.kl_coef > 0:
                loss = loss + oc.kl_coef * kl
        loss.backward()
        loss_total += float(loss.detach())
    params = backend.parameters(member)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, oc.grad_clip))
    optimizer.step()
    return {"loss": loss_total, "kl": kl_total, "grad_norm": grad_norm, "tokens": float(n_tokens), "rollouts": float(len(rollouts))}


def make_optimizer(backend, member: str, oc) -> torch.optim.Optimizer:
    return torch.optim.AdamW(backend.parameters(member), lr=oc.lr, weight_decay=oc.weight_decay)
