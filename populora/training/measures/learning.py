"""Is the update learning? Per-step diagnostics, per adapter and for the run, logged under ``learn/``.

What an RL engineer reads first when a run does not learn:

- ``learn/no_signal_share``: the share of TRR++ groups (``advantages.advantage_groups``: (role, kind), or per member)
  whose rewards are all equal: their advantages are 0, so they give no gradient at all (per adapter: the share
  of its rollouts in such groups); ``learn/flat_task_share``: the share of tasks answered more than once whose
  answers all earned the same reward (solved by all or by none: what a per-task baseline such as GRPO's would
  not learn from, shown because TRR++ whitens over the whole group instead);
- ``learn/adv_std``, ``learn/adv_abs_mean``: the advantages' spread;
- ``learn/entropy``, ``learn/clip_frac``, ``learn/grad_norm``: the update's own (``train/*``, policy_loss.py);
- ``learn/mismatch_k3``, ``learn/mismatch_max_abs``, ``learn/mismatch_ppl_ratio``, ``learn/rollout_corrected``:
  the generator-vs-trainer mismatch on the sampled tokens where the generator is not the trainer
  (platform/backends/rollout_correction.py; absent with torch generation).

Pure functions over plain lists; the run log calls ``step_metrics`` once per step.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np

EPS = 1e-6  # a group whose weighted reward std is below this is flat (advantages.task_relative_advantages' eps)
FROM_TRAIN = ("entropy", "clip_frac", "grad_norm", "mismatch_k3", "mismatch_max_abs", "mismatch_ppl_ratio",
              "rollout_corrected")


def flat_groups(rewards: Sequence[float], groups: Sequence[Hashable], lengths: Sequence[int] | None = None,
                eps: float = EPS) -> dict[Hashable, bool]:
    """{group: whether its rewards are all equal}, judged as TRR++ judges it: the token-weighted std below ``eps``.

    >>> flat_groups([1, 1, 0, 1], ["a", "a", "b", "b"])
    {'a': True, 'b': False}
    """
    members = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    r = np.asarray(rewards, dtype=float)
    w = np.asarray(lengths if lengths is not None else [1] * len(r), dtype=float).clip(min=1)
    out = {}
    for g, idx in members.items():
        mean = np.average(r[idx], weights=w[idx])
        out[g] = bool(np.sqrt(np.average((r[idx] - mean) ** 2, weights=w[idx])) < eps)
    return out


def no_signal_share(rewards: Sequence[float], groups: Sequence[Hashable], lengths: Sequence[int] | None = None) -> float | None:
    """The share of groups whose rewards are all equal (None without rollouts).

    >>> no_signal_share([0, 0, 0, 1, 0.5, 0.5], ["s1", "s1", "s2", "s2", "t", "t"])
    0.6666666666666666
    """
    flat = flat_groups(rewards, groups, lengths)
    return sum(flat.values()) / len(flat) if flat else None


def flat_task_share(rewards: Sequence[float], tasks: Sequence[Hashable]) -> float | None:
    """The share of tasks with two answers or more whose answers all earned the same reward (None: no such task).

    >>> flat_task_share([1, 1, 0, 1, 0], ["x", "x", "y", "y", "z"])
    0.5
    """
    by_task = defaultdict(list)
    for r, t in zip(rewards, tasks):
        by_task[t].append(float(r))
    answered = [v for v in by_task.values() if len(v) > 1]
    return sum(max(v) - min(v) < EPS for v in answered) / len(answered) if answered else None


def spread(advantages: Sequence[float]) -> dict[str, float]:
    """``adv_std`` (population std) and ``adv_abs_mean`` of the advantages (empty without any).

    >>> spread([1.0, -1.0, 0.0, 0.0])
    {'adv_std': 0.7071067811865476, 'adv_abs_mean': 0.5}
    """
    a = np.asarray(advantages, dtype=float)
    if not a.size:
        return {}
    return {"adv_std": float(a.std()), "adv_abs_mean": float(np.abs(a).mean())}


def step_metrics(members: Sequence[str], rewards: Sequence[float], advantages: Sequence[float],
                 groups: Sequence[Hashable], lengths: Sequence[int], train_stats: dict[str, dict],
                 answer_tasks: Sequence[Hashable] = (), answer_rewards: Sequence[float] = ()) -> tuple[dict, dict]:
    """(run metrics, {member: metrics}) of one step, every name under ``learn/``: over the rollouts the update
    trained on (``members``, ``rewards``, ``advantages``, ``groups`` and ``lengths`` row by row), the update's
    stats (``train_stats``, per member) and the step's student answers (their tasks and rewards).

    Run level: ``no_signal_share`` over groups, ``no_signal_rollouts`` (share of rollouts in flat groups),
    ``flat_task_share``, the advantages' spread, and the mismatch: ``mismatch_k3`` and ``mismatch_ppl_ratio``
    weighted by the members' compared tokens (sequences for the ratio), ``mismatch_max_abs`` the max.
    """
    flat = flat_groups(rewards, groups, lengths)
    run: dict[str, float | None] = {"no_signal_share": sum(flat.values()) / len(flat) if flat else None,
                                    "no_signal_rollouts": float(np.mean([flat[g] for g in groups])) if groups else None,
                                    "flat_task_share": flat_task_share(answer_rewards, answer_tasks)}
    run.update(spread(advantages))
    per: dict[str, dict] = defaultdict(dict)
    rows = defaultdict(list)
    for i, m in enumerate(members):
        rows[m].append(i)
    for m, idx in rows.items():
        per[m]["no_signal_share"] = float(np.mean([flat[groups[i]] for i in idx]))
        per[m].update(spread([advantages[i] for i in idx]))
    for m, stats in train_stats.items():
        per[m].update({k: float(stats[k]) for k in FROM_TRAIN if k in stats})
    run.update(_mismatch(train_stats))
    prefix = lambda d: {f"learn/{k}": v for k, v in d.items() if v is not None}
    return prefix(run), {m: prefix(d) for m, d in per.items()}


def _mismatch(train_stats: dict[str, dict]) -> dict[str, float]:
    """The members' mismatch pooled: k3 weighted by compared tokens, the ppl ratio by rollouts, |diff| the max."""
    s = [v for v in train_stats.values() if v.get("mismatch_tokens")]
    if not s:
        return {}
    tokens = sum(v["mismatch_tokens"] for v in s)
    rollouts = [v["mismatch_rollouts"] for v in s]
    return {"mismatch_k3": sum(v["mismatch_k3"] * v["mismatch_tokens"] for v in s) / tokens,
            "mismatch_max_abs": max(v["mismatch_max_abs"] for v in s),
            "mismatch_ppl_ratio": sum(v["mismatch_ppl_ratio"] * r for v, r in zip(s, rollouts)) / sum(rollouts),
            "rollout_corrected": sum(v["rollout_corrected"] * v["mismatch_tokens"] for v in s) / tokens}
