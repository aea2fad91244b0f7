"""AZR's update, ported as the reference our policy loss, KL, advantages, mini-batches and aggregation are tested
against (tests/platform/test_azr_update.py).

Source: LeapLabTHU/Absolute-Zero-Reasoner, branch ``paper``, commit 41ed983cdf541cfcd2f963f33c055d50074f3c90, the
veRL copy it vendors under ``verl/verl/`` (``VC`` below: ``verl/verl/trainer/ppo/core_algos.py``, ``VA``:
``verl/verl/workers/actor/dp_actor.py``, ``VF``: ``verl/verl/utils/torch_functional.py``, ``VB``:
``verl/verl/utils/seqlen_balancing.py``, ``VT``: ``verl/verl/trainer/ppo/ray_trainer.py``) and
``absolute_zero_reasoner/trainer/ppo/azr_ray_trainer.py`` (``AT``), run as ``scripts/selfplay/7b.sh`` sets it: 4 GPUs,
Ulysses sequence parallel 4 (so one data-parallel rank sees the whole batch), ``ppo_mini_batch_size`` 128,
``ppo_micro_batch_size_per_gpu`` 16, ``use_dynamic_bsz`` False, ``rollout.temperature`` 1.0, ``use_kl_loss`` False
(``kl_loss_type`` low_var_kl). Each function cites the lines it ports; the port keeps AZR's arithmetic (float32
torch, masks) and its failures (a one-token whitening raises).

Two pieces are not in AZR's copy and come from veRL after it (volcengine/verl ``verl/trainer/ppo/core_algos.py``,
``agg_loss`` and ``compute_policy_loss``'s ``clip_ratio_c``): the named aggregations other than AZR's micro-batch
token mean, and the dual clip. They are ported from their definitions (cited by name, not line).
"""

from __future__ import annotations

import heapq

import torch

COMMIT = "41ed983cdf541cfcd2f963f33c055d50074f3c90"
PROBLEM_TYPES = ("code_i", "code_o", "code_f")  # 7b.sh: azr.problem_types
MINI_BATCH = 128                                # 7b.sh: ppo_mini_batch_size
MICRO_BATCH = 16                                # 7b.sh: ppo_micro_batch_size_per_gpu
WORLD_SIZE = 4                                  # 7b.sh: n_gpus_per_node (``_balance_batch``'s partitions)

# ------------------------------------------------------------------------------------ torch_functional (VF)


def masked_mean(values, mask, axis=None):
    """VF:118-120"""
    return (values * mask).sum(axis=axis) / mask.sum(axis=axis)


def masked_var(values, mask):
    """VF:123-138 (unbiased=True): raises on an empty mask and on a one-element mask."""
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    mask_sum = mask.sum()
    if mask_sum == 0:
        raise ValueError("At least one element in the mask has to be 1.")
    if mask_sum == 1:
        raise ValueError("The sum of the mask is one, which can cause a division by zero.")
    return variance * (mask_sum / (mask_sum - 1))


def masked_whiten(values, mask):
    """VF:141-147 (shift_mean=True)"""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    return (values - mean) * torch.rsqrt(var + 1e-8)


def entropy_from_logits(logits):
    """VF:106-110"""
    pd = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)


def logprobs_from_logits(logits, labels):
    """VF:71-74 (logprobs_from_logits_naive; the flash-attn and v2 variants compute the same log-softmax)"""
    return torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


# ------------------------------------------------------------------------------------ core_algos (VC)


def token_level_rewards(scores: list[float], lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_level_rewards, eos_mask), both (B, T): each score on its response's last token
    (absolute_zero_reasoner/rewards/reward_managers.py:432-436, ``reward_tensor[i, valid_response_length - 1]``; an
    empty response's lands on the last column, where its mask is 0)."""
    T = max(max(lengths), 1)
    rewards, mask = torch.zeros(len(scores), T), torch.zeros(len(scores), T)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        rewards[i, n - 1] = s
        mask[i, :n] = 1.0
    return rewards, mask


def reinforce_plus_plus_advantage(rewards: torch.Tensor, eos_mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """VC:202-233 (compute_reinforce_plus_plus_outcome_advantage), the advantages; AZR calls it once per
    (role, kind) batch (AT:795-988, ``_compute_batch``), which is TRR++'s grouping."""
    with torch.no_grad():
        returns = torch.zeros_like(rewards)
        running = 0
        for t in reversed(range(rewards.shape[1])):
            running = rewards[:, t] + gamma * running
            returns[:, t] = running
            running = running * eos_mask[:, t]
        return masked_whiten(returns, eos_mask) * eos_mask


def compute_policy_loss(old_log_prob, log_prob, advantages, eos_mask, cliprange, clip_ratio_c=None):
    """VC:272-303: (token-mean pg_loss, clip fraction, ppo_kl). With ``clip_ratio_c`` (later veRL, not AZR's copy):
    the dual clip, min(-A * c, the clipped loss) where A < 0. Also returns the per-token loss (for ``agg_loss``)."""
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, eos_mask)
    pg_losses = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    per_token = torch.max(pg_losses, pg_losses2)
    if clip_ratio_c is not None:
        per_token = torch.where(advantages < 0, torch.min(-advantages * clip_ratio_c, per_token), per_token)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses).float(), eos_mask)
    return masked_mean(per_token, eos_mask), pg_clipfrac, ppo_kl, per_token


def kl_penalty(logprob, ref_logprob, kl_penalty):
    """VC:351-383"""
    if kl_penalty == "kl":
        return logprob - ref_logprob
    if kl_penalty == "abs":
        return (logprob - ref_logprob).abs()
    if kl_penalty == "mse":
        return 0.5 * (logprob - ref_logprob).square()
    if kl_penalty == "low_var_kl":
        kl = ref_logprob - logprob
        ratio = torch.exp(kl)
        kld = (ratio - kl - 1).contiguous()
        return torch.clamp(kld, min=-10, max=10)
    raise NotImplementedError


def agg_loss(loss_mat, loss_mask, loss_agg_mode):
    """Later veRL's ``agg_loss`` (core_algos.py), per micro-batch: ``token-mean`` is ``masked_mean`` (AZR's VA:264
    for every term), ``seq-mean-token-sum`` the mean over rows of each row's token sum, ``seq-mean-token-mean``
    the mean over rows of each row's token mean."""
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    if loss_agg_mode == "seq-mean-token-sum":
        return torch.sum(loss_mat * loss_mask, dim=-1).mean()
    if loss_agg_mode == "seq-mean-token-mean":
        return (torch.sum(loss_mat * loss_mask, dim=-1) / torch.sum(loss_mask, dim=-1)).mean()
    raise ValueError(loss_agg_mode)


# ------------------------------------------------------------------------------------ the batch layout


def karmarkar_karp(seqlens: list[int], k: int) -> list[list[int]]:
    """VB:25-130 with ``equal_size=True`` (largest differencing over k-way partial partitions), then VB:152-183's
    sort of each partition's indices. Partitions of equal size whose length sums are balanced."""
    assert len(seqlens) % k == 0, f"{len(seqlens)} % {k} != 0"

    def set_key(s):  # Set.__lt__ (VB:42-47): by sum, then item count, then items
        return (s[0], len(s[1]), s[1])

    class State:
        def __init__(self, sets):
            self.sets = sorted(sets, key=set_key, reverse=True)

        @property
        def spread(self):
            return self.sets[0][0] - self.sets[-1][0]

        def merge(self, other):  # VB:72-76: largest with smallest
            merged = [(a[0] + b[0], a[1] + b[1]) for a, b in zip(self.sets, reversed(other.sets))]
            self.sets = sorted(merged, key=set_key, reverse=True)

        def __lt__(self, other):  # VB:81-87: the largest spread pops first, then the largest first set
            if self.spread != other.spread:
                return self.spread > other.spread
            return set_key(self.sets[0]) > set_key(other.sets[0])

    ordered = sorted((n, i) for i, n in enumerate(seqlens))
    heap = []
    for off in range(0, len(ordered), k):
        heapq.heappush(heap, State([(n, [(i, n)]) for n, i in ordered[off:off + k]]))
    while len(heap) > 1:
        a, b = heapq.heappop(heap), heapq.heappop(heap)
        a.merge(b)
        heapq.heappush(heap, a)
    return [sorted(i for i, _ in s[1]) for s in heap[0].sets]


def balance_batch(seqlens: list[int], world_size: int = WORLD_SIZE) -> list[int]:
    """VT:813-828 (``_balance_batch``, AT:811 calls it on each (role, kind) batch): the batch reordered so that
    each of ``world_size`` equal slices has a balanced prompt+response token count (``seqlens``)."""
    return [i for part in karmarkar_karp(seqlens, world_size) for i in part]


def azr_batch(blocks: dict[tuple[str, str], list[int]]) -> list[int]:
    """AT:1636-1685: the step's batch as AZR concatenates it, for each problem type in order ``gen_<kind>`` then
    ``pred_<kind>``; ``blocks[(kind, role)]`` lists each block's row ids, role ``teacher`` (gen) or ``student``
    (pred), already in the block's order."""
    out = []
    for kind in PROBLEM_TYPES:
        for role in ("teacher", "student"):
            out.extend(blocks.get((kind, role), []))
    return out


def split(rows: list, size: int) -> list[list]:
    """``TensorDict.split(size)`` (VA:216 mini-batches, VA:228 micro-batches): consecutive chunks, the last shorter."""
    return [rows[i:i + size] for i in range(0, len(rows), size)]


# ------------------------------------------------------------------------------------ the actor (VA)


def forward_micro_batch(model, prompts: list[list[int]], responses: list[list[int]], temperature: float, pad: int):
    """VA:58-141 without remove-padding (VA:130-141): the prompts left-padded and the responses right-padded, as
    veRL's rollout lays them out, position ids from the attention mask, logits divided by the temperature, then
    log-probs and entropy of the response positions. Returns (entropy, log_probs, response_mask), each (B, R)."""
    P, R = max(len(p) for p in prompts), max(max(len(r) for r in responses), 1)
    ids = torch.full((len(prompts), P + R), pad, dtype=torch.long)
    attn = torch.zeros(len(prompts), P + R, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, P - len(p):P], attn[i, P - len(p):P] = torch.tensor(p, dtype=torch.long), 1
        if r:
            ids[i, P:P + len(r)], attn[i, P:P + len(r)] = torch.tensor(r, dtype=torch.long), 1
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids, use_cache=False).logits.float()
    logits = logits.div(temperature)[:, -R - 1:-1, :]
    return entropy_from_logits(logits), logprobs_from_logits(logits, ids[:, P:]), attn[:, P:].float()


def update_policy(model, optimizer, params, rows: list[dict], mini_batches: list[list[int]],
                  micro_batches: list[list[list[int]]], temperature: float, clip_ratio: float, entropy_coeff: float,
                  grad_clip: float, pad: int, loss_agg_mode: str = "token-mean", use_kl_loss: bool = False,
                  kl_loss_coef: float = 0.0, kl_loss_type: str = "low_var_kl", ref_model=None,
                  clip_ratio_c=None) -> list[float]:
    """VA:203-289 (``update_policy``, ``use_dynamic_bsz`` False) after VA:153-201 (``compute_log_prob``: the old
    log-probs of every row before any step, at the same temperature). ``rows[i]``: {prompt, response, advantage};
    ``micro_batches[j]``: mini-batch j cut as AZR cuts it (its rows in AZR's order, ``split(.., 16)``). Every term is
    aggregated by ``agg_loss`` per micro-batch and divided by the number of micro-batches (VA:226,274: AZR's
    ``gradient_accumulation``, ``ppo_mini_batch_size // ppo_micro_batch_size_per_gpu``). ``ref_model``: the base
    for the KL loss (VA:258-268). Returns the grad norms."""
    def fwd(m, idx):
        return forward_micro_batch(m, [rows[i]["prompt"] for i in idx], [rows[i]["response"] for i in idx], temperature, pad)

    with torch.no_grad():
        old = {i: fwd(model, [i])[1][0] for mb in mini_batches for i in mb}
        ref = {i: fwd(ref_model, [i])[1][0] for mb in mini_batches for i in mb} if use_kl_loss else {}
    norms = []
    for micros in micro_batches:
        optimizer.zero_grad()
        for idx in micros:
            entropy, log_prob, mask = fwd(model, idx)
            width = log_prob.shape[1]
            pad_to = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[0]))
            old_log_prob = torch.stack([pad_to(old[i]) for i in idx])
            advantages = torch.tensor([rows[i]["advantage"] for i in idx])[:, None] * mask
            _, _, _, per_token = compute_policy_loss(old_log_prob, log_prob, advantages, mask, clip_ratio, clip_ratio_c)
            policy_loss = agg_loss(per_token, mask, loss_agg_mode) - agg_loss(entropy, mask, loss_agg_mode) * entropy_coeff
            if use_kl_loss:
                ref_log_prob = torch.stack([pad_to(ref[i]) for i in idx])
                kld = kl_penalty(log_prob, ref_log_prob, kl_loss_type)
                policy_loss = policy_loss + agg_loss(kld, mask, loss_agg_mode) * kl_loss_coef
            (policy_loss / len(micros)).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm=grad_clip)))
        optimizer.step()
    optimizer.zero_grad()
    return norms
