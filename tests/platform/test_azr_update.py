"""Our update's pure functions against the port of AZR's (tests/reference/azr_update.py, AZR paper 41ed983):
log-probs and entropy at the sampling temperature, the clipped loss (and the dual clip), the KL estimators and
their gradients against the exact KL, TRR++ whitening, the mini-batch layout and the loss aggregations, fed random
inputs over their edges (groups of one, equal rewards, empty completions, ratios past both clip bounds,
temperatures 0.3-1.5)."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.platform.backends import TrainSample, logprobs
from populora.platform.backends.policy_loss import (UpdateSpec, azr_mini_batches, balanced_partitions, kl_penalty,
                                                    micro_groups, mini_batch_parts, row_denominators, row_terms,
                                                    token_loss)
from populora.training import load_config
from populora.training.phases.advantages import task_relative_advantages
from reference import azr_update as ref
from tolerance import assert_close, gamma

FAST = settings(max_examples=60, deadline=None)
MANY = settings(max_examples=400, deadline=None)  # the cheap pure ones: hundreds of cases
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
temperatures = st.floats(0.3, 1.5)


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------ 1. log-probs at the temperature


@FAST
@given(seed=st.integers(0, 2**31), temperature=temperatures, lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4))
def test_logprobs_and_entropy_at_the_temperature_equal_veRLs(seed, temperature, lengths):
    """``logprobs.token_stats`` at ``temperature`` equals the actor's log_softmax(logits / T) and entropy of the
    full-sequence logits (dp_actor.py:130-141) on random hidden states and head."""
    g, V, H = _seeded(seed), 11, 5
    table, head = torch.randn(40, H, generator=g), torch.nn.Linear(H, V)
    with torch.no_grad():
        head.weight.copy_(3 * torch.randn(V, H, generator=g))  # logits of a few units: temperature matters
        head.bias.zero_()
    prompts = [torch.randint(0, 40, (1 + i % 3,), generator=g).tolist() for i in range(len(lengths))]
    completions = [torch.randint(0, V, (n,), generator=g).tolist() for n in lengths]
    forward = lambda ids, attn: table[ids]                                               # (B, T, H)
    logp, ent, mask = logprobs.token_stats(forward, head, 0, "cpu", prompts, completions, temperature=temperature)
    with torch.no_grad():
        for b, (p, c) in enumerate(zip(prompts, completions)):
            ids = torch.tensor(p + c)
            logits = head(table[ids]).float()[len(p) - 1:-1] / temperature              # (len(c), V)
            want_logp = ref.logprobs_from_logits(logits, torch.tensor(c))
            want_ent = ref.entropy_from_logits(logits)
            room = float(logits.abs().max())  # both sides subtract terms of the logits' size (logsumexp - E[logit])
            assert_close(logp[b, :len(c)].detach(), want_logp, V, "log-prob", scale=room)
            assert_close(ent[b, :len(c)].detach(), want_ent, 2 * V, "entropy", scale=room)
            assert mask[b].sum() == len(c)


def test_a_temperature_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="temperature"):
        logprobs.token_stats(lambda i, a: torch.zeros(1, 2, 3), torch.nn.Linear(3, 4), 0, "cpu", [[1]], [[2]], temperature=0)


# ------------------------------------------------------------------------------------ 2. the KL estimators


@FAST
@given(seed=st.integers(0, 2**31), scale=st.floats(0.0, 30.0))
def test_kl_estimators_equal_veRLs(seed, scale):
    """Every name and alias, on log-prob differences up to +-30 (k3's clamp at 10 engaged)."""
    g = _seeded(seed)
    logp, ref_logp = -scale * torch.rand(64, generator=g), -scale * torch.rand(64, generator=g)
    for ours, theirs in (("low_var_kl", "low_var_kl"), ("k3", "low_var_kl"), ("kl", "kl"), ("k1", "kl"),
                         ("mse", "mse"), ("k2", "mse"), ("abs", "abs")):
        want = ref.kl_penalty(logp, ref_logp, theirs)
        assert_close(kl_penalty(logp, ref_logp, ours), want, 4, ours, scale=float(want.abs().max()) + scale)
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(logp, ref_logp, "k4")


def _expected_estimator_grad(theta: torch.Tensor, log_q: torch.Tensor, estimator: str) -> torch.Tensor:
    """d/dtheta of E_{y ~ p_old}[KL_est(y)] at p_old = p = softmax(theta): the estimator's expected gradient on
    on-policy samples, exactly (every token of the vocabulary weighted by its sampling probability)."""
    theta = theta.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1)
    (logp.exp().detach() * kl_penalty(logp, log_q, estimator)).sum().backward()
    return theta.grad


def _exact_kl_grad(theta: torch.Tensor, log_q: torch.Tensor, reverse: bool = False) -> torch.Tensor:
    theta = theta.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1)
    kl = (log_q.exp() * (log_q - logp)).sum() if reverse else (logp.exp() * (logp - log_q)).sum()
    kl.backward()
    return theta.grad


@MANY
@given(seed=st.integers(0, 2**31), vocab=st.integers(2, 12), spread=st.floats(0.05, 0.5))  # k3 unclamped: ref/pi < 13
def test_kl_estimator_gradients_against_the_exact_kl(seed, vocab, spread):
    """On a small vocabulary, exactly: k2 (mse)'s expected gradient is the exact KL(p || base)'s, k3 (low_var_kl)'s
    is KL(base || p)'s (so it pulls towards the base as the exact one does: the two agree to second order), and k1's
    is zero: a k1 loss term does not regularise."""
    g = _seeded(seed)
    theta = torch.randn(vocab, generator=g, dtype=torch.float64)
    log_q = torch.log_softmax(theta + spread * torch.randn(vocab, generator=g, dtype=torch.float64), -1)
    exact = _exact_kl_grad(theta, log_q)
    k2, k3, k1 = (_expected_estimator_grad(theta, log_q, e) for e in ("k2", "k3", "k1"))
    n = 4 * vocab  # the expectation's sum over the vocabulary and log_softmax's backward (another), each side
    assert_close(k2, exact, n, "k2", scale=float(exact.abs().max()) + 1.0)
    assert_close(k3, _exact_kl_grad(theta, log_q, reverse=True), n, "k3", scale=1.0)
    assert_close(k1, torch.zeros_like(k1), n, "k1", scale=1.0)
    if spread <= 0.2:  # near the base: k3's gradient follows the exact KL's
        assert float(torch.nn.functional.cosine_similarity(k3, exact, 0)) > 0.9


# ------------------------------------------------------------------------------------ the clipped loss


@MANY
@given(seed=st.integers(0, 2**31), B=st.integers(1, 5), T=st.integers(1, 7), clip=st.floats(0.05, 0.5),
       dual=st.sampled_from([None, 3.0]), zero_adv=st.booleans())
def test_clipped_loss_and_its_gradient_equal_veRLs(seed, B, T, clip, dual, zero_adv):
    """Ratios e^[-1, 1] (past both clip bounds), advantages of both signs (or all 0), ragged masks: the token-mean
    loss (core_algos.py:272-303, with the dual clip of later veRL) and its gradient."""
    g = _seeded(seed)
    logp = (-3 * torch.rand(B, T, generator=g, dtype=torch.float64)).requires_grad_(True)
    old = logp.detach() + 2 * torch.rand(B, T, generator=g, dtype=torch.float64) - 1
    adv = torch.zeros(B, dtype=torch.float64) if zero_adv else 2 * torch.randn(B, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    spec = UpdateSpec(clip_ratio=clip, clip_ratio_c=dual)
    per_token, clipped = token_loss(logp, old, adv, spec)
    ours = (per_token * mask).sum() / mask.sum()
    (g_ours,) = torch.autograd.grad(ours, logp)
    want, clipfrac, _, _ = ref.compute_policy_loss(old, logp, adv[:, None] * mask, mask, clip, dual)
    (g_want,) = torch.autograd.grad(want, logp)
    assert_close(ours.detach(), want.detach(), B * T, "loss", scale=float(adv.abs().max()) * math.e + 1e-300)
    assert_close(g_ours, g_want, B * T, "gradient", scale=float(adv.abs().max()) * math.e / float(mask.sum()) + 1e-300)
    if dual is None:  # without the dual clip, our clipped count is veRL's pg_clipfrac
        assert float((clipped.double() * mask).sum() / mask.sum()) == pytest.approx(float(clipfrac), abs=1e-12)


# ------------------------------------------------------------------------------------ TRR++ whitening

REWARDS = [-1.0, -0.5, 0.0, 0.125, 0.5, 0.875, 1.0]  # AZR's rewards: format, wrong, trivial, 1 - solve rate, correct


@MANY
@given(st.lists(st.tuples(st.sampled_from(REWARDS), st.integers(0, 9), st.integers(0, 2)), min_size=1, max_size=24))
def test_whitening_equals_azrs_masked_whiten(rows):
    """Per group: AZR's reward on the last token, REINFORCE++ returns with gamma 1, masked_whiten (Bessel,
    rsqrt(var + 1e-8)) in float32. Groups of one, equal rewards and empty completions included; where AZR raises
    (fewer than two tokens in a group) ours gives 0."""
    rewards, lengths, groups = [r for r, _, _ in rows], [n for _, n, _ in rows], [(g,) for _, _, g in rows]
    ours = task_relative_advantages(rewards, groups, lengths)
    for key in set(groups):
        idx = [i for i, g in enumerate(groups) if g == key]
        r, n = [rewards[i] for i in idx], [lengths[i] for i in idx]
        tokens = sum(n)
        if tokens < 2:
            with pytest.raises(ValueError):
                ref.reinforce_plus_plus_advantage(*ref.token_level_rewards(r, n))
            assert all(ours[i] == 0.0 for i in idx)
            continue
        adv = ref.reinforce_plus_plus_advantage(*ref.token_level_rewards(r, n))
        want = np.array([float(adv[j, 0]) if n[j] else 0.0 for j in range(len(idx))])
        live = [x for x, m in zip(r, n) if m]
        if all(x == live[0] for x in live):  # no signal: ours exactly 0, AZR's its float32 rounding x 1e4
            assert all(ours[i] == 0.0 for i in idx)
            assert np.abs(want).max() <= 1e4 * 4 * gamma(tokens, torch.float32) * max(map(abs, r))
            continue
        std = float(np.sqrt(np.cov(np.repeat(r, n), ddof=1)))
        room = 8 * gamma(tokens, torch.float32) * (1 + max(map(abs, r)) / std) * max(1.0, np.abs(want).max())
        assert np.abs(ours[idx] - want).max() <= room, (r, n, ours[idx], want)


# ------------------------------------------------------------------------------------ 3. the mini-batch layout

blocks_strategy = st.dictionaries(st.tuples(st.sampled_from(["code_i", "code_o", "code_f"]), st.sampled_from(["teacher", "student"])),
                                  st.integers(1, 9), min_size=1)


@FAST
@given(blocks=blocks_strategy, size=st.integers(1, 12), seed=st.integers(0, 2**31))
def test_mini_batches_follow_azrs_order_one_kind_each(blocks, size, seed):
    """Rows arriving shuffled: ours concatenate in AZR's order (gen then pred per kind, kinds as 7b.sh lists them,
    AT:1636-1685), never mix kinds, hold at most ``size`` rows; where each kind's rows fill whole mini-batches
    (AZR's own case: 64 + 64 rows, 128 a mini-batch) they are AZR's ``batch.split(128)`` exactly."""
    rows = [(k, r) for (k, r), n in blocks.items() for _ in range(n)]
    perm = torch.randperm(len(rows), generator=_seeded(seed)).tolist()
    kinds, roles = [rows[i][0] for i in perm], [rows[i][1] for i in perm]
    ours = azr_mini_batches(kinds, roles, size)
    by_block = {key: [i for i in range(len(perm)) if (kinds[i], roles[i]) == key] for key in blocks}
    assert [i for mb in ours for i in mb] == ref.azr_batch(by_block)
    assert all(len(mb) <= size and len({kinds[i] for i in mb}) == 1 for mb in ours)
    if all(sum(n for (k, _), n in blocks.items() if k == kind) % size == 0 for kind in {k for k, _ in blocks}):
        assert ours == ref.split(ref.azr_batch(by_block), size)


@FAST
@given(seqlens=st.lists(st.integers(1, 40), min_size=1, max_size=24), k=st.integers(1, 5))
def test_balanced_partitions_are_verls_karmarkar_karp(seqlens, k):
    seqlens = seqlens[:len(seqlens) - len(seqlens) % k] or [1] * k
    assert balanced_partitions(seqlens, k) == ref.karmarkar_karp(seqlens, k)


def test_the_paper_presets_form_azrs_mini_batches_and_micro_batches():
    """AZR's step (per kind 64 proposer and 64 solver rows, random lengths): with a paper preset's optim, ours
    cuts AZR's three mini-batches, and each mini-batch's micro-batches are AZR's (_balance_batch per role and kind
    with 4 partitions, then split(16)), so every row's loss weight is AZR's."""
    for preset in ("paper-1t1s", "paper-4t4s", "paper-4t8s", "paper-baseline"):
        oc = load_config(CONFIGS / f"{preset}.yaml").optim
        assert (oc.mini_batch_size, oc.loss_agg, oc.loss_micro_batch, oc.clip_ratio_c, oc.kl_estimator) == (
            ref.MINI_BATCH, "micro-token-mean", ref.MICRO_BATCH, None, "low_var_kl"), preset
    spec = UpdateSpec(mini_batch_size=oc.mini_batch_size, loss_agg=oc.loss_agg, loss_micro_batch=oc.loss_micro_batch)
    g = _seeded(5)
    samples, blocks = [], {}
    for kind in ("code_f", "code_o", "code_i"):  # arriving in another order than AZR's
        for role in ("student", "teacher"):
            blocks[(kind, role)] = list(range(len(samples), len(samples) + 64))
            samples += [TrainSample([1] * int(p), [2] * int(c), 0.0, kind, role)
                        for p, c in torch.randint(1, 200, (64, 2), generator=g)]
    ours = mini_batch_parts(samples, spec)
    balanced = {key: [rows[i] for i in ref.balance_batch([len(samples[j].prompt_ids) + len(samples[j].completion_ids)
                                                          for j in rows])] for key, rows in blocks.items()}
    theirs = ref.split(ref.azr_batch(blocks), ref.MINI_BATCH)
    assert [sorted(m) for m in ours] == [sorted(m) for m in theirs]
    for mb, mb_theirs in zip(ours, ref.split(ref.azr_batch(balanced), ref.MINI_BATCH)):
        micro = ref.split(mb_theirs, ref.MICRO_BATCH)  # AZR: the token mean of each, / gradient_accumulation 8
        want = {i: float(sum(len(samples[j].completion_ids) for j in m) * len(micro)) for m in micro for i in m}
        assert dict(zip(mb, row_denominators(mb, samples, spec))) == want


def test_azrs_own_step_gives_three_mini_batches_of_one_kind():
    kinds = [k for k in ref.PROBLEM_TYPES for _ in range(128)]
    roles = [r for _ in ref.PROBLEM_TYPES for r in ("teacher", "student") for _ in range(64)]
    blocks = {(k, r): [i for i in range(384) if (kinds[i], roles[i]) == (k, r)] for k in ref.PROBLEM_TYPES for r in ("teacher", "student")}
    assert azr_mini_batches(kinds, roles, ref.MINI_BATCH) == ref.split(ref.azr_batch(blocks), ref.MINI_BATCH)


# ------------------------------------------------------------------------------------ 4. the aggregations


def _samples(lengths, kinds=None, roles=None):
    kinds = kinds or ["code_o"] * len(lengths)
    roles = roles or ["student"] * len(lengths)
    return [TrainSample([1], [2] * n, 0.0, k, r) for n, k, r in zip(lengths, kinds, roles)]


@FAST
@given(seed=st.integers(0, 2**31), n_teacher=st.integers(1, 9), n_student=st.integers(1, 9), micro=st.integers(1, 4),
       agg=st.sampled_from(["token-mean", "micro-token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]))
def test_each_aggregation_equals_veRLs_on_its_micro_batches(seed, n_teacher, n_student, micro, agg):
    """A mini-batch's loss sum_rows sum_t term / denom (``row_denominators``) equals the port's: ``agg_loss`` per
    micro-batch over the number of micro-batches (dp_actor.py:264,274), micro-batches as ours cut them
    (``micro_groups``) for micro-token-mean, the whole mini-batch as one for the others (one micro-batch per
    mini-batch: AZR's arithmetic gives the mini-batch's own token mean, and the row means do not depend on it)."""
    g = _seeded(seed)
    lengths = torch.randint(1, 7, (n_teacher + n_student,), generator=g).tolist()
    samples = _samples(lengths, roles=["teacher"] * n_teacher + ["student"] * n_student)
    rows = list(range(len(samples)))
    spec = UpdateSpec(loss_agg=agg, loss_micro_batch=micro)
    T = max(lengths)
    terms = torch.randn(len(rows), T, generator=g, dtype=torch.float64)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).double()
    denom = torch.tensor(row_denominators(rows, samples, spec), dtype=torch.float64)
    ours = ((terms * mask).sum(1) / denom).sum()
    groups = micro_groups(rows, samples, micro) if agg == "micro-token-mean" else [rows]
    theirs = sum(ref.agg_loss(terms[g_], mask[g_], "token-mean" if agg == "micro-token-mean" else agg) for g_ in groups) / len(groups)
    assert_close(ours, theirs, sum(lengths), agg, scale=float(terms.abs().max()))
    assert sorted(i for g_ in groups for i in g_) == rows
    assert agg != "micro-token-mean" or all(len(g_) <= micro for g_ in groups)


def test_micro_groups_never_mix_roles_and_balance_tokens():
    samples = _samples([9, 1, 5, 5, 3, 7, 2, 8], roles=["teacher"] * 4 + ["student"] * 4)
    groups = micro_groups(list(range(8)), samples, 2)
    assert all(len({samples[i].role for i in grp}) == 1 for grp in groups)
    assert [sum(len(samples[i].completion_ids) for i in grp) for grp in groups] == [10, 10, 10, 10]  # 9+1, 5+5 | 8+2, 7+3


def test_row_terms_token_mean_is_the_mini_batch_token_mean_with_entropy_and_kl():
    """row_terms summed over rows with token-mean denominators = veRL's policy loss - entropy_coeff * entropy +
    kl_coef * k3 on one micro-batch (dp_actor.py:247-266), value and gradient."""
    g = _seeded(0)
    B, T = 4, 6
    logp = (-2 * torch.rand(B, T, generator=g, dtype=torch.float64)).requires_grad_(True)
    old, base = logp.detach() + 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64), -2 * torch.rand(B, T, generator=g, dtype=torch.float64)
    ent = torch.rand(B, T, generator=g, dtype=torch.float64).requires_grad_(True)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.arange(T)[None, :] < torch.tensor([6, 1, 3, 4])[:, None]).double()
    spec = UpdateSpec(clip_ratio=0.2, entropy_coef=0.01, kl_coef=0.1, kl_estimator="low_var_kl")
    ours = row_terms(logp, mask, old, adv, mask.sum().expand(B), spec, ent, base).loss.sum()
    pg, _, _, _ = ref.compute_policy_loss(old, logp, adv[:, None] * mask, mask, 0.2)
    theirs = pg - ref.masked_mean(ent, mask) * 0.01 + ref.masked_mean(ref.kl_penalty(logp, base, "low_var_kl"), mask) * 0.1
    grads = torch.autograd.grad(ours, (logp, ent)), torch.autograd.grad(theirs, (logp, ent))
    assert_close(ours.detach(), theirs.detach(), B * T, "loss", scale=4.0)
    for a, b in zip(*grads):
        assert_close(a, b, B * T, "gradient", scale=1.0)
