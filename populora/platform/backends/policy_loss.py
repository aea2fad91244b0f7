"""The clipped policy-gradient update as AZR's veRL actor runs it, shared by every training backend.

One train step of an adapter (AZR: ``ppo_epochs: 1``, ``shuffle: False``, ``loss_agg_mode: token-mean``):

1. its rollouts are split, in order, into ``mini_batches`` contiguous mini-batches;
2. the log-probs of the policy that sampled them (``old_logp``) are taken before any optimizer step;
3. each mini-batch is one optimizer step on the token mean of

       max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)) - entropy_coef * H  [+ kl_coef * KL(m || base)]

   with ratio = exp(logp - old_logp); with ``optim.rollout_correction`` the PG term of each token is weighted by
   the generator-vs-trainer importance weight (rollout_correction.py). The first mini-batch sees the sampling policy itself (ratio 1, so its
   gradient is plain REINFORCE); later ones see a policy the earlier steps moved, which is where clipping acts.

Pure tensor functions and a per-adapter tally; the backends own the forward passes and the optimizers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from populora.platform.backends.base import TrainSample
from populora.platform.backends.rollout_correction import MismatchTally


@dataclass(frozen=True)
class UpdateSpec:
    """How one train step updates each adapter (every field maps to ``optim.*`` in the training config)."""

    micro_batch: int = 4                # sequences per forward/backward (gradients accumulate)
    max_len: int = 1024                 # longest prompt+completion (cut from the left)
    grad_clip: float = 1.0              # max grad norm per adapter, per optimizer step
    kl_coef: float = 0.0                # KL(adapter || base) penalty (k1 estimator on sampled tokens)
    log_kl: bool = True                 # compute the KL for logging even when kl_coef is 0
    mini_batches: int = 1               # optimizer steps per train step, each on a slice of the rollouts
    clip_ratio: float = 0.2             # PPO clip: ratio kept in [1 - clip_ratio, 1 + clip_high]
    clip_ratio_high: float | None = None  # upper clip; None = clip_ratio (symmetric)
    entropy_coef: float = 0.0           # entropy bonus weight
    # rollout correction (rollout_correction.py): generator-vs-trainer importance weights on the PG term
    rollout_correction: str = "none"    # none | tis | mis
    rollout_correction_cap: float = 2.0  # tis: weights capped here; mis: tokens outside [1/cap, cap] dropped

    @property
    def clip_high(self) -> float:
        return self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high

    @property
    def needs_base(self) -> bool:
        return self.kl_coef > 0 or self.log_kl


def mini_batch_slices(n: int, mini_batches: int) -> list[list[int]]:
    """Indices 0..n-1 cut, in order, into ``min(n, mini_batches)`` contiguous slices of near-equal size.

    >>> mini_batch_slices(7, 3)
    [[0, 1, 2], [3, 4], [5, 6]]
    >>> mini_batch_slices(2, 3)
    [[0], [1]]
    """
    k = max(1, min(n, mini_batches))
    size, extra = divmod(n, k)
    out, start = [], 0
    for j in range(k):
        stop = start + size + (1 if j < extra else 0)
        out.append(list(range(start, stop)))
        start = stop
    return out


@dataclass
class MiniBatch:
    """One adapter's mini-batch as one process (or one data-parallel worker) trains it: its rows (indices into the
    process's own sample list) and the whole mini-batch's size over all workers, which normalises the loss."""

    rows: list[int]
    rollouts: int        # rows of the whole mini-batch, all workers
    tokens: int          # completion tokens of the whole mini-batch, all workers


def mini_batches(samples: list[TrainSample], k: int) -> list[MiniBatch]:
    """One process's mini-batches of one adapter's rollouts: ``mini_batch_slices``, each with its own size.

    >>> [(m.rows, m.rollouts, m.tokens) for m in mini_batches([TrainSample([1], [2] * n, 1.0) for n in (1, 2, 3)], 2)]
    [([0, 1], 2, 3), ([2], 1, 3)]
    """
    return [MiniBatch(part, len(part), sum(len(samples[i].completion_ids) for i in part))
            for part in mini_batch_slices(len(samples), k)]


@dataclass
class RowTerms:
    """Each row's share of its adapter's mini-batch loss, and what the stats need, all (B,)."""

    loss: torch.Tensor       # sum_t (clipped PG - entropy_coef H + kl_coef KL) / denom: backward this
    kl: torch.Tensor         # sum_t KL_t / denom (0 without base log-probs)
    entropy: torch.Tensor    # sum_t H_t (detached)
    clipped: torch.Tensor    # tokens whose pessimistic term is the clipped one
    ratio_dev: torch.Tensor  # max_t |ratio - 1|


def row_terms(logp: torch.Tensor, mask: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              denom: torch.Tensor, spec: UpdateSpec, entropy: torch.Tensor | None = None,
              base_logp: torch.Tensor | None = None, rollout_weight: torch.Tensor | None = None) -> RowTerms:
    """The clipped surrogate per token (all (B, T) but ``advantages`` and ``denom``, (B,)), summed per row.

    >>> spec = UpdateSpec(clip_ratio=0.2)
    >>> one = torch.ones(1, 1)
    >>> t = row_terms(torch.log(torch.tensor([[1.5]])), one, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1), spec)
    >>> round(float(t.loss), 3), int(t.clipped), round(float(t.ratio_dev), 3)  # A > 0, ratio 1.5: capped at 1.2
    (-1.2, 1, 0.5)
    >>> t = row_terms(torch.log(torch.tensor([[1.5]])), one, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1), spec)
    >>> round(float(t.loss), 3), int(t.clipped)  # A < 0: the pessimistic bound keeps the unclipped 1.5
    (1.5, 0)
    """
    ratio = torch.exp(logp - old_logp)                                            # (B, T)
    adv = advantages[:, None]                                                     # (B, 1)
    surrogate = -adv * ratio
    clipped_surrogate = -adv * ratio.clamp(1 - spec.clip_ratio, 1 + spec.clip_high)
    per_token = torch.maximum(surrogate, clipped_surrogate)                      # PPO's pessimistic bound
    if rollout_weight is not None:  # rollout correction (rollout_correction.py): detached, on the PG term only
        per_token = per_token * rollout_weight
    if entropy is not None and spec.entropy_coef > 0:
        per_token = per_token - spec.entropy_coef * entropy
    kl_tok = (logp - base_logp) if base_logp is not None else torch.zeros_like(logp)  # k1 on sampled tokens
    if spec.kl_coef > 0:
        per_token = per_token + spec.kl_coef * kl_tok
    ent = entropy.detach() if entropy is not None else torch.zeros_like(logp)
    with torch.no_grad():
        clipped = ((clipped_surrogate > surrogate).float() * mask).sum(1)
        ratio_dev = ((ratio - 1).abs() * mask).amax(1)
    return RowTerms(loss=(per_token * mask).sum(1) / denom, kl=(kl_tok.detach() * mask).sum(1) / denom,
                    entropy=(ent * mask).sum(1), clipped=clipped, ratio_dev=ratio_dev)


@dataclass
class Tally:
    """One adapter's train-step stats, accumulated row by row and mini-batch by mini-batch."""

    tokens: int
    rollouts: int
    has_kl: bool = True       # False: no base forward ran: no "kl" in the stats (not logged) rather than a false 0
    mini_batches: list[dict] = field(default_factory=list)
    kl_sum: float = 0.0       # sum over mini-batches of their token-mean KL, weighted back to tokens
    entropy_sum: float = 0.0
    clipped: float = 0.0
    mismatch: MismatchTally = field(default_factory=MismatchTally)  # generator vs trainer (rollout_correction.py)

    def start(self, rollouts: int, tokens: int) -> None:
        self.mini_batches.append({"rollouts": rollouts, "tokens": tokens, "loss": 0.0, "kl": 0.0, "clip_frac": 0.0,
                                  "ratio_dev": 0.0, "grad_norm": 0.0})

    def add_row(self, terms: RowTerms, i: int) -> None:
        mb = self.mini_batches[-1]
        mb["loss"] += float(terms.loss[i].detach())
        mb["kl"] += float(terms.kl[i])
        mb["clip_frac"] += float(terms.clipped[i]) / mb["tokens"]
        mb["ratio_dev"] = max(mb["ratio_dev"], float(terms.ratio_dev[i]))
        self.kl_sum += float(terms.kl[i]) * mb["tokens"]
        self.entropy_sum += float(terms.entropy[i])
        self.clipped += float(terms.clipped[i])

    def end(self, grad_norm: float) -> None:
        self.mini_batches[-1]["grad_norm"] = grad_norm

    def stats(self) -> dict:
        """Scalars (token means over the whole step; loss and grad norm averaged over mini-batches) plus
        ``per_mini_batch``, the same per optimizer step."""
        mbs = self.mini_batches
        out = {"loss": sum(m["loss"] for m in mbs) / len(mbs), "kl": self.kl_sum / self.tokens,
               "entropy": self.entropy_sum / self.tokens, "clip_frac": self.clipped / self.tokens,
               "ratio_dev": max(m["ratio_dev"] for m in mbs), "grad_norm": sum(m["grad_norm"] for m in mbs) / len(mbs),
               "tokens": float(self.tokens), "rollouts": float(self.rollouts), "mini_batches": float(len(mbs)),
               "per_mini_batch": [dict(m) for m in mbs], **self.mismatch.stats()}
        if not self.has_kl:
            del out["kl"]
            for m in out["per_mini_batch"]:
                del m["kl"]
        return out


def pad_rows(rows: list[torch.Tensor], T: int, device) -> torch.Tensor:
    """Stack 1-D tensors of different lengths into (B, T), zero-padded (the mask hides the padding)."""
    out = torch.zeros(len(rows), T, device=device)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r[:T]
    return out
