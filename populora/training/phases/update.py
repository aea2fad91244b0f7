"""Update phase: Task-Relative REINFORCE++ advantages, then AZR's clipped policy-gradient step per adapter.

Each adapter's rollouts are cut into mini-batches of ``optim.mini_batch_size`` in AZR's order (else
``optim.mini_batches`` slices), one optimizer step each, on the aggregate (``optim.loss_agg``) of
    L_m = max(-A_i * ratio_it, -A_i * clip(ratio_it, 1 - eps_low, 1 + eps_high)) - entropy_coef * H_it
          [+ kl_coef * KL_est(m || base)],   ratio_it = pi_m(y_it) / pi_sampling(y_it)
with every log-prob at the sampling temperature ``tasks.temperature`` (``populora.platform.backends.policy_loss``).
The backend runs it: per adapter with PEFT, or one forward/backward over the mixed batch with multi-LoRA.
"""

from __future__ import annotations

from collections import defaultdict

from populora.platform.backends import TrainSample
from populora.training.phases.advantages import advantage_groups, task_relative_advantages
from populora.training.phases.rollout import Rollout


def assign_advantages(rollouts: list[Rollout], scope: str) -> None:
    """Whiten rewards per (role, kind) over the population, or per (member, role, kind)."""
    groups = advantage_groups(rollouts, scope)
    adv = task_relative_advantages([r.reward for r in rollouts], groups, [len(r.completion_ids) for r in rollouts])
    for r, a in zip(rollouts, adv):
        r.advantage = float(a)


def update_options(cfg) -> dict:
    """``UpdateSpec``'s fields past train_step's positional ones, from the config: the log-probs' temperature is
    the one the rollouts were sampled at (``tasks.temperature``)."""
    oc = cfg.optim
    return dict(temperature=cfg.tasks.temperature, mini_batches=oc.mini_batches, mini_batch_size=oc.mini_batch_size,
                loss_agg=oc.loss_agg, loss_micro_batch=oc.loss_micro_batch, kl_estimator=oc.kl_estimator,
                clip_ratio=oc.clip_ratio, clip_ratio_high=oc.clip_ratio_high, clip_ratio_c=oc.clip_ratio_c,
                entropy_coef=oc.entropy_coef, rollout_correction=oc.rollout_correction,
                rollout_correction_cap=oc.rollout_correction_cap)


def update(backend, rollouts: list[Rollout], cfg, step: int = 0) -> dict[str, dict]:
    """Clipped optimizer steps per member that has rollouts (``update_options``); returns per-member scalar stats
    (loss, kl, entropy, clip_frac, ratio_dev, grad_norm, tokens, rollouts, mini_batches) for MLflow. The KL is
    logged on steps that are multiples of ``optim.kl_every`` (absent from the others' stats)."""
    oc = cfg.optim
    log_kl = oc.log_kl and step % oc.kl_every == 0
    assign_advantages(rollouts, oc.advantage_scope)
    batches = defaultdict(list)
    for r in rollouts:
        if r.completion_ids:
            batches[r.member].append(TrainSample(r.prompt_ids, r.completion_ids, r.advantage, r.kind, r.role,
                                                     r.generator_logp))
    stats = backend.train_step(dict(batches), oc.micro_batch, oc.max_seq_len, oc.grad_clip, oc.kl_coef, log_kl,
                               **update_options(cfg))
    return {m: {k: v for k, v in s.items() if k != "per_mini_batch"} for m, s in stats.items()}
