"""Task-Relative REINFORCE++ advantages: whiten rewards separately within each (role, task kind) group.

AZR puts the sequence reward on the last token with gamma = 1, so every token's return is the reward, then
whitens over all tokens of the group; with equal weights per token that is a length-weighted whitening of the
sequence rewards, which is what we compute.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def task_relative_advantages(rewards: list[float], groups: list[tuple], lengths: list[int] | None = None, eps: float = 1e-6) -> np.ndarray:
    """Advantage per sample: (r - mean_g) / std_g over its group g, token-weighted by ``lengths``.

    A group whose rewards are all equal carries no signal and gets advantage 0.

    >>> task_relative_advantages([1.0, 0.0, 5.0, 5.0], [("s", "code_o")] * 2 + [("t", "code_o")] * 2).round(3).tolist()
    [1.0, -1.0, 0.0, 0.0]
    """
    rewards_arr = np.asarray(rewards, dtype=float)
    weights = np.asarray(lengths if lengths is not None else [1] * len(rewards), dtype=float).clip(min=1)
    members = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    adv = np.zeros_like(rewards_arr)
    for idx in members.values():
        r, w = rewards_arr[idx], weights[idx]
        mean = np.average(r, weights=w)
        std = np.sqrt(np.average((r - mean) ** 2, weights=w))
        adv[idx] = 0.0 if std < eps else (r - mean) / (std + eps)
    return adv
