"""The generator-vs-trainer mismatch on the sampled tokens, and the rollout correction that reweights it.

Where the generator is not the trainer (the vLLM engine, in bf16 or with its own kernels; a stale adapter), the
tokens are sampled from pi_gen while the update's "old" policy pi_old is the trainer's forward of the same adapter:
on-policy RL quietly turns off-policy. Per sampled token, with log_ratio = log pi_old - log pi_gen:

- the mismatch, as veRL logs it (verl/trainer/ppo/rollout_corr_helper.py ``compute_offpolicy_metrics``, commit
  b178a3c): ``k3`` = exp(log_ratio) - log_ratio - 1, the k3 estimator of KL(pi_gen || pi_old), token mean;
  ``ppl_ratio`` = the mean over sequences of exp(mean_t log pi_gen - mean_t log pi_old), the trainer's perplexity
  over the generator's; and ``max_abs`` = max_t |log pi_old - log pi_gen| (veRL's verl/utils/debug/metrics.py
  ``rollout_probs_diff_max`` takes it on probabilities; on log-probs it also shows a rare token's disagreement);
- the correction (``optim.rollout_correction``), a detached weight w_t on each token's policy-gradient term
  (veRL core_algos.py: ``pg_losses = pg_losses * rollout_is_weights``), rho_t = exp(log_ratio):
  ``tis`` (truncated importance sampling): w_t = min(rho_t, cap) (veRL ``compute_rollout_correction_weights``,
  token level, ``rollout_is_threshold``; slime ``vanilla_tis_function``, slime/backends/megatron_utils/loss.py,
  commit 624b824);
  ``mis`` (masked importance sampling): w_t = rho_t where 1/cap <= rho_t <= cap, else 0, the token dropped (slime
  examples/train_infer_mismatch_helper/mis.py ``mask`` with its default lower bound 1/upper, and loss.py
  ``icepop_function``); ``none``: w_t = 1.
  log_ratio is clamped to +-20 before exp, as veRL's ``SAFETY_BOUND``.

Rows whose generator log-probs are unknown (torch generation: the generator is the trainer) get w = 1 and no
mismatch. Pure tensor functions and a per-adapter tally; the backends call ``correct`` once per micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MODES = ("none", "tis", "mis")
SAFETY_BOUND = 20.0  # |log ratio| clamp before exp (veRL's SAFETY_BOUND): exp(20) ~ 4.9e8


def generator_logp(rows: list[list[float] | None], T: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, has), (B, T) and (B,): the generator's log-probs of each row's sampled tokens, zero-padded, and
    whether the row has them (a row with none, or with a count other than its completion's, has none)."""
    out = torch.zeros(len(rows), T, device=device)
    has = torch.zeros(len(rows), dtype=torch.bool, device=device)
    for i, r in enumerate(rows):
        if r:
            out[i, :min(len(r), T)] = torch.tensor(r[:T], dtype=out.dtype)
            has[i] = True
    return out, has


def weights(log_ratio: torch.Tensor, mask: torch.Tensor, mode: str, cap: float) -> torch.Tensor:
    """(B, T) detached rollout-correction weights of the tokens (0 on padding), from log pi_old - log pi_gen.

    >>> lr = torch.log(torch.tensor([[0.25, 1.0, 3.0]])); m = torch.ones(1, 3)
    >>> weights(lr, m, "tis", 2.0).tolist(), weights(lr, m, "mis", 2.0).tolist(), weights(lr, m, "none", 2.0).tolist()
    ([[0.25, 1.0, 2.0]], [[0.0, 1.0, 0.0]], [[1.0, 1.0, 1.0]])
    """
    if mode not in MODES:
        raise ValueError(f"optim.rollout_correction={mode!r}: one of {', '.join(MODES)}")
    if not cap >= 1:
        raise ValueError(f"optim.rollout_correction_cap={cap}: must be >= 1 (the largest weight kept)")
    with torch.no_grad():
        if mode == "none":
            return mask.clone()
        rho = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
        if mode == "tis":
            w = rho.clamp(max=cap)
        else:
            w = torch.where((rho >= 1 / cap) & (rho <= cap), rho, torch.zeros_like(rho))
        return w * mask


@dataclass
class RowMismatch:
    """Each row's sums over its sampled tokens, all (B,): what ``MismatchTally`` adds up."""

    tokens: torch.Tensor     # tokens with generator log-probs (0 for a row without them)
    k3: torch.Tensor         # sum_t exp(lr) - lr - 1
    max_abs: torch.Tensor    # max_t |lr|
    ppl_ratio: torch.Tensor  # exp(mean_t log pi_gen - mean_t log pi_old) (0 for a row without them)
    corrected: torch.Tensor  # tokens whose weight is not rho_t (truncated or masked)


@dataclass
class Correction:
    weights: torch.Tensor | None   # (B, T) for row_terms' ``rollout_weight``; None: nothing to correct
    rows: RowMismatch | None       # None: no row has generator log-probs


def correct(old_logp: torch.Tensor, gen_logp: torch.Tensor, has: torch.Tensor, mask: torch.Tensor, mode: str,
            cap: float) -> Correction:
    """The rows' correction weights and mismatch sums; ``old_logp``, ``gen_logp``, ``mask`` (B, T), ``has`` (B,).

    >>> old = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]])); gen = torch.log(torch.tensor([[0.5, 0.25], [0.1, 0.1]]))
    >>> c = correct(old, gen, torch.tensor([True, False]), torch.ones(2, 2), "tis", 1.5)
    >>> c.weights.tolist(), c.rows.tokens.tolist(), c.rows.corrected.tolist()
    ([[1.0, 1.5], [1.0, 1.0]], [2.0, 0.0], [1.0, 0.0])
    """
    if not bool(has.any()):
        return Correction(None, None)
    with torch.no_grad():
        m = mask * has[:, None].to(mask.dtype)                                               # (B, T)
        lr = (old_logp.detach() - gen_logp) * m
        safe = lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)
        k3 = (torch.exp(safe) - safe - 1) * m
        n = m.sum(1)                                                                         # (B,)
        mean_gen, mean_old = (gen_logp * m).sum(1) / n.clamp(min=1), (old_logp.detach() * m).sum(1) / n.clamp(min=1)
        ppl = torch.where(n > 0, torch.exp((mean_gen - mean_old).clamp(-SAFETY_BOUND, SAFETY_BOUND)), torch.zeros_like(n))
        w_is = weights(lr, m, "tis", float("inf")) if mode != "none" else m                 # rho_t, masked
        w = weights(lr, m, mode, cap)
        corrected = (((w - w_is).abs() > 0).to(m.dtype) * m).sum(1) if mode != "none" else torch.zeros_like(n)
        rows = RowMismatch(tokens=n, k3=k3.sum(1), max_abs=(lr.abs() * m).amax(1), ppl_ratio=ppl, corrected=corrected)
        # rows without generator log-probs keep weight 1 (on their real tokens)
        full = torch.where(has[:, None], w, mask) if mode != "none" else None
    return Correction(full, rows)


@dataclass
class MismatchTally:
    """One adapter's mismatch over a train step, row by row (and, data-parallel, worker by worker: ``merged``)."""

    tokens: float = 0.0
    rows: int = 0
    k3_sum: float = 0.0
    max_abs: float = 0.0
    ppl_ratio_sum: float = 0.0
    corrected: float = 0.0

    def add_row(self, rows: RowMismatch | None, i: int) -> None:
        if rows is None or float(rows.tokens[i]) == 0:
            return
        self.tokens += float(rows.tokens[i])
        self.rows += 1
        self.k3_sum += float(rows.k3[i])
        self.max_abs = max(self.max_abs, float(rows.max_abs[i]))
        self.ppl_ratio_sum += float(rows.ppl_ratio[i])
        self.corrected += float(rows.corrected[i])

    @classmethod
    def merged(cls, parts: list["MismatchTally"]) -> "MismatchTally":
        return cls(sum(p.tokens for p in parts), sum(p.rows for p in parts), sum(p.k3_sum for p in parts),
                   max((p.max_abs for p in parts), default=0.0), sum(p.ppl_ratio_sum for p in parts),
                   sum(p.corrected for p in parts))

    def stats(self) -> dict[str, float]:
        """``mismatch_k3`` (token mean), ``mismatch_max_abs``, ``mismatch_ppl_ratio`` (sequence mean),
        ``mismatch_tokens`` and ``mismatch_rollouts`` (compared), ``rollout_corrected`` (the share of tokens
        truncated or masked); empty when no row had generator log-probs (nothing to compare: no false 0)."""
        if not self.tokens:
            return {}
        return {"mismatch_k3": self.k3_sum / self.tokens, "mismatch_max_abs": self.max_abs,
                "mismatch_ppl_ratio": self.ppl_ratio_sum / self.rows, "mismatch_tokens": self.tokens,
                "mismatch_rollouts": float(self.rows),
                "rollout_corrected": self.corrected / self.tokens}


def for_samples(samples: list, old_logp: torch.Tensor, mask: torch.Tensor, mode: str, cap: float) -> Correction:
    """``correct`` for a micro-batch of ``TrainSample``s (their ``generator_logp``), ``old_logp`` and ``mask`` (B, T):
    the one call a backend's update makes."""
    gen, has = generator_logp([s.generator_logp for s in samples], old_logp.shape[1], old_logp.device)
    return correct(old_logp, gen, has, mask, mode, cap)
