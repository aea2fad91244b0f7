"""Task-Relative REINFORCE++ advantages: whiten rewards separately within each (role, task kind) group.

AZR puts the sequence reward on the last token with gamma = 1, so every token's return is the reward, then
whitens over all tokens of the group (``compute_reinforce_plus_plus_outcome_advantage`` and ``masked_whiten``, AZR
41ed983 ``verl/verl/trainer/ppo/core_algos.py:202-233``, ``verl/verl/utils/torch_functional.py:118-147``): the
token-weighted mean, the token-weighted variance with Bessel's correction over the group's token count, and
(r - mean) * rsqrt(var + 1e-8). With equal weights per token that is a length-weighted whitening of the sequence
rewards, which is what we compute. An empty completion has no token and is left out of its group's statistics.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

VAR_EPS = 1e-8  # masked_whiten's rsqrt(var + 1e-8)


def task_relative_advantages(rewards: list[float], groups: list[tuple], lengths: list[int] | None = None) -> np.ndarray:
    """Advantage per sample: (r - mean_g) / sqrt(var_g + 1e-8) over its group g's tokens (``lengths``; one token per
    sample without them), var_g with Bessel's correction.

    A group whose rewards are all equal carries no signal and gets advantage 0; so does a group of fewer than two
    tokens (AZR raises there: its variance divides by tokens - 1) and an empty completion (no token to train).

    >>> task_relative_advantages([1.0, 0.0, 5.0, 5.0], [("s", "code_o")] * 2 + [("t", "code_o")] * 2).round(3).tolist()
    [0.707, -0.707, 0.0, 0.0]
    """
    rewards_arr = np.asarray(rewards, dtype=float)
    weights = np.asarray(lengths if lengths is not None else [1] * len(rewards), dtype=float)
    members = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    adv = np.zeros_like(rewards_arr)
    for idx in members.values():
        r, w = rewards_arr[idx], weights[idx]
        n = w.sum()
        live = r[w > 0]
        if n < 2 or np.all(live == live[0]):
            continue
        mean = (w * r).sum() / n
        var = (w * (r - mean) ** 2).sum() / n * (n / (n - 1))
        adv[idx] = np.where(w > 0, (r - mean) / np.sqrt(var + VAR_EPS), 0.0)
    return adv


def advantage_groups(rollouts, scope: str) -> list[tuple]:
    """Each rollout's TRR++ group: (role, kind) over the population, or (member, role, kind)."""
    return [(r.role, r.kind) if scope == "population" else (r.member, r.role, r.kind) for r in rollouts]
