"""The clipped policy-gradient update as AZR's veRL actor runs it, shared by every training backend.

Reference: AZR ``paper`` branch 41ed983, ``verl/verl/workers/actor/dp_actor.py:203-289`` (update_policy) and
``verl/verl/trainer/ppo/core_algos.py:272-303,351-383`` (policy loss, KL estimators). One train step of an adapter
(AZR: ``ppo_epochs: 1``, ``shuffle: False``):

1. its rollouts are cut into mini-batches (``mini_batch_parts``): with ``mini_batch_size`` (AZR's
   ``ppo_mini_batch_size``, 128) in AZR's order, one task kind at a time (its proposer rows, then its solver
   rows: the order ``azr_ray_trainer.py:1636-1685`` concatenates them in); else ``mini_batches`` contiguous slices;
2. the log-probs of the policy that sampled them (``old_logp``) are taken before any optimizer step, at the
   sampling temperature (``temperature``), as every log-prob of the update is;
3. each mini-batch is one optimizer step on the aggregate (``loss_agg``) of the per-token

       max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)) - entropy_coef * H  [+ kl_coef * KL_est(m || base)]

   with ratio = exp(logp - old_logp) (and, with ``clip_ratio_c``, the dual clip of negative advantages). The first
   mini-batch sees the sampling policy itself (ratio 1: plain REINFORCE); later ones see a policy the earlier steps
   moved, which is where clipping acts. With ``optim.rollout_correction`` the PG term of each token is weighted
   by the generator-vs-trainer importance weight (rollout_correction.py).

The aggregation is a per-row denominator (``row_denominators``): every row's loss is sum_t term_t / denom_row, so
a mini-batch split over micro-batches or data-parallel workers sums to the same loss.

Pure tensor functions and a per-adapter tally; the backends own the forward passes and the optimizers.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Literal

import torch

from populora.platform.backends.base import TrainSample
from populora.platform.backends.rollout_correction import MismatchTally

KlEstimator = Literal["low_var_kl", "k3", "kl", "k1", "mse", "k2", "abs"]
LossAgg = Literal["token-mean", "micro-token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]
# AZR's problem_types order (scripts/selfplay/7b.sh: code_i, code_o, code_f; code_e between, azr_ray_trainer.py:1636-1682)
KIND_ORDER = ("code_i", "code_o", "code_e", "code_f")
ROLE_ORDER = ("teacher", "student")  # gen_<kind> before pred_<kind> (azr_ray_trainer.py:1638-1646)


@dataclass(frozen=True)
class UpdateSpec:
    """How one train step updates each adapter (every field maps to ``optim.*`` in the training config, but
    ``temperature``: ``tasks.temperature``)."""

    micro_batch: int = 4                # sequences per forward/backward (gradients accumulate)
    max_len: int = 1024                 # longest prompt+completion (cut from the left)
    grad_clip: float = 1.0              # max grad norm per adapter, per optimizer step
    kl_coef: float = 0.0                # KL(adapter || base) loss weight
    log_kl: bool = True                 # compute the KL for logging even when kl_coef is 0
    mini_batches: int = 1               # without mini_batch_size: optimizer steps per train step, contiguous slices
    clip_ratio: float = 0.2             # PPO clip: ratio kept in [1 - clip_ratio, 1 + clip_high]
    clip_ratio_high: float | None = None  # upper clip; None = clip_ratio (symmetric)
    entropy_coef: float = 0.0           # entropy bonus weight
    temperature: float = 1.0            # the rollouts' sampling temperature: every log-prob is of softmax(logits / it)
    kl_estimator: KlEstimator = "low_var_kl"  # per-token KL estimator (``kl_penalty``)
    mini_batch_size: int | None = None  # rows per optimizer step, AZR's layout (``azr_mini_batches``); None: mini_batches
    loss_agg: LossAgg = "token-mean"    # how a mini-batch's per-token terms become its loss (``row_denominators``)
    loss_micro_batch: int = 16          # micro-token-mean's micro-batch (AZR ppo_micro_batch_size_per_gpu)
    clip_ratio_c: float | None = None   # dual clip: a negative advantage's loss capped at -A * c (None = off, as AZR)
    # rollout correction (rollout_correction.py): generator-vs-trainer importance weights on the PG term
    rollout_correction: str = "none"    # none | tis | mis
    rollout_correction_cap: float = 2.0  # tis: weights capped here; mis: tokens outside [1/cap, cap] dropped

    @property
    def clip_high(self) -> float:
        return self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high

    @property
    def needs_base(self) -> bool:
        return self.kl_coef > 0 or self.log_kl


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from the sampled tokens' log-probs (core_algos.py:351-383; Schulman,
    "Approximating KL divergence", 2020): ``kl``/``k1`` log(pi/ref) (unbiased, but its expected gradient on
    on-policy samples is 0), ``mse``/``k2`` (log(pi/ref))^2 / 2 (its expected gradient is the exact KL's),
    ``low_var_kl``/``k3`` ref/pi - log(ref/pi) - 1, clamped to [-10, 10] (>= 0; its expected gradient is
    KL(ref || pi)'s), ``abs`` |log(pi/ref)|.

    >>> lp, ref = torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25]))
    >>> [round(float(kl_penalty(lp, ref, e)), 4) for e in ("k1", "k2", "k3")]
    [0.6931, 0.2402, 0.1931]
    """
    d = logp - ref_logp
    if estimator in ("kl", "k1"):
        return d
    if estimator == "abs":
        return d.abs()
    if estimator in ("mse", "k2"):
        return 0.5 * d.square()
    if estimator in ("low_var_kl", "k3"):
        return torch.clamp(torch.exp(-d) + d - 1, min=-10, max=10)
    raise ValueError(f"unknown KL estimator {estimator!r}; use low_var_kl (k3), kl (k1), mse (k2) or abs")


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


def _rank(order: tuple[str, ...], value: str) -> int:
    return order.index(value) if value in order else len(order)


def azr_mini_batches(kinds: list[str], roles: list[str], size: int) -> list[list[int]]:
    """Row indices in AZR's order (task kind by ``KIND_ORDER``, in a kind the proposer rows then the solver rows,
    else as given), each kind's rows cut into mini-batches of ``size`` (the last one shorter): AZR's
    ``batch.split(ppo_mini_batch_size)`` of its concatenated batch (dp_actor.py:216), whose 128-row mini-batches
    each hold one kind's 64 proposer and 64 solver rows; a mini-batch here never mixes kinds.

    >>> azr_mini_batches(["code_o", "code_i", "code_i", "code_o"], ["student", "student", "teacher", "teacher"], 2)
    [[2, 1], [3, 0]]
    >>> azr_mini_batches(["code_i"] * 3, ["student"] * 3, 2)
    [[0, 1], [2]]
    """
    order = sorted(range(len(kinds)), key=lambda i: (_rank(KIND_ORDER, kinds[i]), kinds[i], _rank(ROLE_ORDER, roles[i])))
    out: list[list[int]] = []
    for i in order:
        if out and kinds[out[-1][-1]] == kinds[i] and len(out[-1]) < size:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def mini_batch_parts(samples: list[TrainSample], spec: UpdateSpec) -> list[list[int]]:
    """One adapter's mini-batches as lists of row indices: ``azr_mini_batches`` with ``spec.mini_batch_size``, else
    ``spec.mini_batches`` contiguous slices."""
    if spec.mini_batch_size is None:
        return mini_batch_slices(len(samples), spec.mini_batches)
    return azr_mini_batches([s.kind for s in samples], [s.role for s in samples], spec.mini_batch_size)


def balanced_partitions(sizes: list[int], k: int) -> list[list[int]]:
    """Indices of ``sizes`` in ``k`` parts of equal count (len(sizes) % k == 0) with balanced sums, by the largest
    differencing method (Karmarkar-Karp), with veRL's tie-breaks (AZR 41ed983 ``verl/verl/utils/seqlen_balancing.py:
    25-130,152-183``, ``equal_size=True``): the sizes taken k at a time from the smallest, each k a partial
    partition; the two partials of largest spread merged (largest set with smallest) until one is left. Parts in
    decreasing sum, each part's indices sorted.

    >>> balanced_partitions([9, 1, 5, 5, 3, 7, 2, 8], 2)  # 5 + 5 + 2 + 8 = 9 + 1 + 3 + 7
    [[2, 3, 6, 7], [0, 1, 4, 5]]
    """
    def order(part):  # a set's rank: its sum, then its count, then its items
        return (part[0], len(part[1]), part[1])

    heap: list[tuple] = []
    ranked = sorted((n, i) for i, n in enumerate(sizes))
    for count, off in enumerate(range(0, len(ranked), k)):
        sets = sorted(((n, [(i, n)]) for n, i in ranked[off:off + k]), key=order, reverse=True)
        heapq.heappush(heap, _Partial(sets))
    while len(heap) > 1:
        a, b = heapq.heappop(heap), heapq.heappop(heap)
        a.sets = sorted(((x[0] + y[0], x[1] + y[1]) for x, y in zip(a.sets, reversed(b.sets))), key=order, reverse=True)
        heapq.heappush(heap, a)
    return [sorted(i for i, _ in items) for _, items in heap[0].sets]


class _Partial:
    """A k-way partial partition of ``balanced_partitions``: sets (sum, [(index, size)]) in decreasing order; the
    heap pops the largest spread first, then the one whose largest set ranks highest."""

    def __init__(self, sets):
        self.sets = sets

    def _key(self):
        top = self.sets[0]
        return self.sets[0][0] - self.sets[-1][0], (top[0], len(top[1]), top[1])

    def __lt__(self, other):
        return self._key() > other._key()


def micro_groups(rows: list[int], samples: list[TrainSample], size: int) -> list[list[int]]:
    """A mini-batch's rows (in its order) as AZR's actor's micro-batches of ``size`` (dp_actor.py:228). AZR first
    reorders each (role, kind) batch so that equal slices hold balanced prompt+response token counts
    (``_balance_batch``, ray_trainer.py:813-828, world size 4; with 64-row batches and micro-batches of 16 each
    slice is one micro-batch): within each run of one (kind, role), its rows go into ceil(n / size) parts, by
    ``balanced_partitions`` where they divide evenly, else dealt longest first back and forth (a snake draft).

    >>> s = [TrainSample([1], [2] * n, 0.0) for n in (1, 4, 2, 3)]
    >>> micro_groups([0, 1, 2, 3], s, 2)  # prompt + completion 2, 5, 3, 4: 3 + 4 = 2 + 5
    [[2, 3], [0, 1]]
    """
    out: list[list[int]] = []
    start = 0
    while start < len(rows):
        key = (samples[rows[start]].kind, samples[rows[start]].role)
        stop = start
        while stop < len(rows) and (samples[rows[stop]].kind, samples[rows[stop]].role) == key:
            stop += 1
        run = rows[start:stop]
        k = -(-len(run) // size)
        if len(run) % k == 0:
            parts = balanced_partitions([len(samples[i].prompt_ids) + len(samples[i].completion_ids) for i in run], k)
            out.extend([run[j] for j in part] for part in parts)
        else:
            ranked = sorted(run, key=lambda i: -len(samples[i].completion_ids))
            groups: list[list[int]] = [[] for _ in range(k)]
            for p, i in enumerate(ranked):
                groups[p % k if (p // k) % 2 == 0 else k - 1 - p % k].append(i)
            out.extend(groups)
        start = stop
    # AZR cuts its whole mini-batch in chunks of ``size``; runs that are not multiples of it share a chunk there
    # (never in AZR's own layout: 64-row runs, micro-batches of 16), here they do not.
    return out


def row_denominators(rows: list[int], samples: list[TrainSample], spec: UpdateSpec) -> list[float]:
    """Each row's denominator in its mini-batch's loss sum_row sum_t term_t / denom_row, for ``spec.loss_agg``:

    - ``token-mean``: the mini-batch's completion tokens (every token weighs alike);
    - ``micro-token-mean``: AZR's: each micro-batch's token mean, averaged over the mini-batch's micro-batches
      (dp_actor.py:264,274: ``masked_mean`` per micro-batch, ``/ gradient_accumulation``), so denom = its
      micro-batch's tokens x the number of micro-batches (``micro_groups``);
    - ``seq-mean-token-sum``: rows (each row's token sum, averaged over rows);
    - ``seq-mean-token-mean``: rows x the row's tokens (each row's token mean, averaged over rows).

    >>> s = [TrainSample([1], [2] * n, 0.0) for n in (1, 3)]
    >>> [row_denominators([0, 1], s, UpdateSpec(loss_agg=a, loss_micro_batch=1)) for a in
    ...  ("token-mean", "micro-token-mean", "seq-mean-token-sum", "seq-mean-token-mean")]
    [[4.0, 4.0], [2.0, 6.0], [2.0, 2.0], [2.0, 6.0]]
    """
    n_tok = [float(len(samples[i].completion_ids)) for i in rows]
    agg = spec.loss_agg
    if agg == "token-mean":
        return [sum(n_tok)] * len(rows)
    if agg == "seq-mean-token-sum":
        return [float(len(rows))] * len(rows)
    if agg == "seq-mean-token-mean":
        return [len(rows) * t for t in n_tok]
    if agg == "micro-token-mean":
        groups = micro_groups(rows, samples, spec.loss_micro_batch)
        denom = {}
        for g in groups:
            tokens = sum(len(samples[i].completion_ids) for i in g)
            denom.update({i: float(tokens * len(groups)) for i in g})
        return [denom[i] for i in rows]
    raise ValueError(f"unknown loss_agg {agg!r}; use token-mean, micro-token-mean, seq-mean-token-sum or seq-mean-token-mean")


@dataclass
class MiniBatch:
    """One adapter's mini-batch as one process (or one data-parallel worker) trains it: its rows (indices into the
    process's own sample list), each row's loss denominator (``row_denominators`` over the whole mini-batch), and
    the whole mini-batch's size over all workers."""

    rows: list[int]
    rollouts: int        # rows of the whole mini-batch, all workers
    tokens: int          # completion tokens of the whole mini-batch, all workers
    denoms: list[float] = field(default_factory=list)  # per row of ``rows``


def mini_batches(samples: list[TrainSample], spec: UpdateSpec) -> list[MiniBatch]:
    """One process's mini-batches of one adapter's rollouts (``mini_batch_parts``), each with its sizes and its
    rows' denominators.

    >>> rows = [TrainSample([1], [2] * n, 1.0) for n in (1, 2, 3)]
    >>> [(m.rows, m.rollouts, m.tokens, m.denoms) for m in mini_batches(rows, UpdateSpec(mini_batches=2))]
    [([0, 1], 2, 3, [3.0, 3.0]), ([2], 1, 3, [3.0])]
    """
    return [MiniBatch(part, len(part), sum(len(samples[i].completion_ids) for i in part),
                      row_denominators(part, samples, spec))
            for part in mini_batch_parts(samples, spec)]


@dataclass
class RowTerms:
    """Each row's share of its adapter's mini-batch loss, and what the stats need, all (B,). New per-row
    statistics are new fields (computed under no_grad in ``row_terms``), summed into the ``Tally``."""

    loss: torch.Tensor       # sum_t (clipped PG - entropy_coef H + kl_coef KL) / denom: backward this
    kl: torch.Tensor         # sum_t KL_t (0 without base log-probs), detached
    entropy: torch.Tensor    # sum_t H_t (detached)
    clipped: torch.Tensor    # tokens whose pessimistic term is the clipped one
    ratio_dev: torch.Tensor  # max_t |ratio - 1|


def token_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, spec: UpdateSpec):
    """(per-token clipped surrogate, clipped mask), both (B, T); ``advantages`` (B,) or (B, T). core_algos.py:272-303
    (max(-A r, -A clip(r))); with ``clip_ratio_c`` the dual clip of current veRL: for A < 0 the loss is also capped
    at -A * clip_ratio_c."""
    ratio = torch.exp(logp - old_logp)                                            # (B, T)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages            # (B, 1) or (B, T)
    surrogate = -adv * ratio
    clipped_surrogate = -adv * ratio.clamp(1 - spec.clip_ratio, 1 + spec.clip_high)
    per_token = torch.maximum(surrogate, clipped_surrogate)                      # PPO's pessimistic bound
    clipped = clipped_surrogate > surrogate
    if spec.clip_ratio_c is not None:
        capped = torch.minimum(per_token, -adv * spec.clip_ratio_c)
        per_token = torch.where(adv < 0, capped, per_token)
        clipped = clipped | ((adv < 0) & (capped < torch.maximum(surrogate, clipped_surrogate)))
    return per_token, clipped


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
    per_token, clipped = token_loss(logp, old_logp, advantages, spec)
    if rollout_weight is not None:  # rollout correction (rollout_correction.py): detached, on the PG term only
        per_token = per_token * rollout_weight
    if entropy is not None and spec.entropy_coef > 0:
        per_token = per_token - spec.entropy_coef * entropy
    kl_tok = kl_penalty(logp, base_logp, spec.kl_estimator) if base_logp is not None else torch.zeros_like(logp)
    if spec.kl_coef > 0:
        per_token = per_token + spec.kl_coef * kl_tok
    ent = entropy.detach() if entropy is not None else torch.zeros_like(logp)
    with torch.no_grad():
        n_clipped = (clipped.float() * mask).sum(1)
        ratio_dev = ((torch.exp(logp - old_logp) - 1).abs() * mask).amax(1)
    return RowTerms(loss=(per_token * mask).sum(1) / denom, kl=(kl_tok.detach() * mask).sum(1),
                    entropy=(ent * mask).sum(1), clipped=n_clipped, ratio_dev=ratio_dev)


@dataclass
class Tally:
    """One adapter's train-step stats, accumulated row by row and mini-batch by mini-batch."""

    tokens: int
    rollouts: int
    has_kl: bool = True       # False: no base forward ran: no "kl" in the stats (not logged) rather than a false 0
    mini_batches: list[dict] = field(default_factory=list)
    kl_sum: float = 0.0       # sum over tokens of the KL estimate
    entropy_sum: float = 0.0
    clipped: float = 0.0
    mismatch: MismatchTally = field(default_factory=MismatchTally)  # generator vs trainer (rollout_correction.py)

    def start(self, rollouts: int, tokens: int) -> None:
        self.mini_batches.append({"rollouts": rollouts, "tokens": tokens, "loss": 0.0, "kl": 0.0, "clip_frac": 0.0,
                                  "ratio_dev": 0.0, "grad_norm": 0.0})

    def add_row(self, terms: RowTerms, i: int) -> None:
        mb = self.mini_batches[-1]
        mb["loss"] += float(terms.loss[i].detach())
        mb["kl"] += float(terms.kl[i]) / mb["tokens"]
        mb["clip_frac"] += float(terms.clipped[i]) / mb["tokens"]
        mb["ratio_dev"] = max(mb["ratio_dev"], float(terms.ratio_dev[i]))
        self.kl_sum += float(terms.kl[i])
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
