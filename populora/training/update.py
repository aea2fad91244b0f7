"""Update phase: Task-Relative REINFORCE++ advantages, then one policy-gradient step per adapter.

Loss of member m (token mean over its rollouts, AZR's TRR++ with one on-policy step, so the PPO ratio is 1):
    L_m = -sum_i A_i * sum_t logp_m(y_it) / N_tokens  [+ kl_coef * KL(m || base)]
The backend runs it: per adapter with PEFT, or one forward/backward over the mixed batch with multi-LoRA.
"""

from __future__ import annotations

from collections import defaultdict

from populora.platform.backends import TrainSample
from populora.training.advantages import task_relative_advantages
from populora.training.rollout import Rollout


def assign_advantages(rollouts: list[Rollout], scope: str) -> None:
    """Whiten rewards per (role, kind) over the population, or per (member, role, kind)."""
    groups = [(r.role, r.kind) if scope == "population" else (r.member, r.role, r.kind) for r in rollouts]
    adv = task_relative_advantages([r.reward for r in rollouts], groups, [len(r.completion_ids) for r in rollouts])
    for r, a in zip(rollouts, adv):
        r.advantage = float(a)


def update(backend, rollouts: list[Rollout], cfg) -> dict[str, dict]:
    """One optimizer step per member that has rollouts; returns per-member stats (loss, kl, grad_norm, tokens)."""
    oc = cfg.optim
    assign_advantages(rollouts, oc.advantage_scope)
    batches = defaultdict(list)
    for r in rollouts:
        if r.completion_ids:
            batches[r.member].append(TrainSample(r.prompt_ids, r.completion_ids, r.advantage))
    return backend.train_step(dict(batches), oc.micro_batch, oc.max_seq_len, oc.grad_clip, oc.kl_coef, oc.log_kl)
