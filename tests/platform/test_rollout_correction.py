"""Rollout correction and the generator-vs-trainer mismatch (rollout_correction.py) against the formulas as veRL
and slime define them, restated here in float64 numpy:

- tis: w = min(rho, cap) (veRL compute_rollout_correction_weights, token level; slime vanilla_tis_function);
- mis: w = rho if 1/cap <= rho <= cap else 0 (slime mis.py ``mask``, icepop_function);
- k3 = mean_t exp(lr) - lr - 1, lr = log pi_old - log pi_gen; ppl ratio = mean over rows of
  exp(mean_t log pi_gen - mean_t log pi_old) (veRL compute_offpolicy_metrics);

then in the update: the weight multiplies the policy-gradient term only, the same in the multi-LoRA and PEFT
backends, and the data-parallel merge adds the workers' mismatch up."""

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from populora.platform.backends import AdamConfig, LoraSpec, PeftBackend, TrainSample
from populora.platform.backends.multilora import MultiLoraBackend
from populora.platform.backends.policy_loss import Tally, UpdateSpec, row_terms
from populora.platform.backends.rollout_correction import (SAFETY_BOUND, MismatchTally, correct, generator_logp,
                                                           weights)
from populora.platform.backends.shard_update import merge_tallies
from tolerance import gamma

EPS32 = torch.finfo(torch.float32).eps
log_ratios = st.lists(st.floats(-25, 25, allow_nan=False, width=32), min_size=1, max_size=12)


def ref_weight(lr: float, mode: str, cap: float) -> float:
    rho = math.exp(min(max(lr, -SAFETY_BOUND), SAFETY_BOUND))
    if mode == "none":
        return 1.0
    if mode == "tis":
        return min(rho, cap)
    return rho if 1 / cap <= rho <= cap else 0.0


@settings(max_examples=150, deadline=None)
@given(lrs=log_ratios, cap=st.floats(1.0, 10.0), mode=st.sampled_from(["none", "tis", "mis"]),
       masked=st.lists(st.booleans(), min_size=12, max_size=12))
def test_weights_equal_the_reference_formula_and_are_zero_on_padding(lrs, cap, mode, masked):
    lr = torch.tensor([lrs], dtype=torch.float32)                               # (1, T)
    mask = torch.tensor([masked[:len(lrs)]], dtype=torch.float32)
    # a ratio within float32's rounding of mis's bounds may fall on either side: not a disagreement of formulas
    for x in lrs:
        assume(abs(abs(x) - math.log(cap)) > 8 * EPS32 * max(1.0, abs(x)) or mode != "mis")
    got = weights(lr, mask, mode, cap)[0].tolist()
    for g, x, m in zip(got, lrs, mask[0].tolist()):
        want = ref_weight(x, mode, cap) * m
        assert math.isclose(g, want, rel_tol=4 * EPS32, abs_tol=0.0), (mode, x, cap, g, want)
    assert not weights(lr.requires_grad_(), mask, mode, cap).requires_grad  # detached: it changes the measure only


def test_bad_mode_and_cap_are_refused_by_name():
    with pytest.raises(ValueError, match="optim.rollout_correction='is'"):
        weights(torch.zeros(1, 1), torch.ones(1, 1), "is", 2.0)
    with pytest.raises(ValueError, match="optim.rollout_correction_cap=0.5"):
        weights(torch.zeros(1, 1), torch.ones(1, 1), "tis", 0.5)


rows_strategy = st.lists(st.tuples(st.lists(st.floats(-8, 0, width=32), min_size=1, max_size=9),   # trainer log-probs
                                   st.lists(st.floats(-3, 3, width=32), min_size=9, max_size=9),   # gen - trainer
                                   st.booleans()),                                                 # has gen log-probs
                         min_size=1, max_size=5)


@settings(max_examples=120, deadline=None)
@given(rows=rows_strategy, mode=st.sampled_from(["none", "tis", "mis"]), cap=st.floats(1.0, 5.0))
def test_mismatch_sums_equal_the_reference_over_the_rows_that_have_generator_logprobs(rows, mode, cap):
    T = max(len(old) for old, _, _ in rows)
    old = torch.zeros(len(rows), T)
    mask = torch.zeros(len(rows), T)
    gen_rows = []
    for i, (o, d, has) in enumerate(rows):
        old[i, :len(o)] = torch.tensor(o)
        mask[i, :len(o)] = 1
        gen_rows.append([a + b for a, b in zip(o, d)] if has else None)
    gen, has = generator_logp(gen_rows, T, "cpu")
    c = correct(old, gen, has, mask, mode, cap)
    tally = MismatchTally()
    for i in range(len(rows)):
        tally.add_row(c.rows, i)
    stats = tally.stats()
    compared = [(np.array(o, dtype=np.float64), np.array(g[:len(o)], dtype=np.float32).astype(np.float64))
                for (o, _, _), g in zip(rows, gen_rows) if g is not None]
    if not compared:
        assert c.weights is None and c.rows is None and stats == {}
        return
    lr = np.concatenate([o - g for o, g in compared])
    n = len(lr)
    k3_terms = np.exp(lr) - lr - 1
    # float32 exp(lr) - lr - 1: each term within a few eps of its parts' size, then a sum of n terms
    room = 8 * EPS32 * float(np.mean(np.exp(lr) + np.abs(lr) + 1)) + 2 * gamma(n, torch.float32) * float(k3_terms.max())
    assert abs(stats["mismatch_k3"] - k3_terms.mean()) <= room
    assert math.isclose(stats["mismatch_max_abs"], np.abs(lr).max(), rel_tol=4 * EPS32, abs_tol=4 * EPS32 * 8)
    ppl = np.mean([math.exp(np.mean(g) - np.mean(o)) for o, g in compared])
    assert math.isclose(stats["mismatch_ppl_ratio"], ppl, rel_tol=64 * EPS32)
    assert stats["mismatch_tokens"] == n and stats["mismatch_rollouts"] == len(compared)
    if mode == "none":
        assert c.weights is None and stats["rollout_corrected"] == 0
        return
    # rows without generator log-probs keep weight 1 on their tokens
    for i, g in enumerate(gen_rows):
        if g is None:
            assert torch.equal(c.weights[i], mask[i])


def test_row_terms_weight_the_policy_gradient_term_only():
    """With a weight w per token the loss is sum_t w_t * max(-A r, -A clip(r)) - entropy_coef * H, over denom."""
    g = torch.Generator().manual_seed(0)
    logp, old = -torch.rand(3, 5, generator=g) * 3, -torch.rand(3, 5, generator=g) * 3
    mask = (torch.rand(3, 5, generator=g) > 0.2).float()
    adv, denom, ent = torch.tensor([1.0, -0.5, 2.0]), torch.tensor([7.0, 7.0, 4.0]), torch.rand(3, 5, generator=g)
    w = torch.rand(3, 5, generator=g) * 2
    spec = UpdateSpec(clip_ratio=0.2, clip_ratio_high=0.28, entropy_coef=0.01)
    got = row_terms(logp, mask, old, adv, denom, spec, ent, rollout_weight=w).loss
    r = np.exp(logp.double().numpy() - old.double().numpy())
    a = adv.double().numpy()[:, None]
    pg = np.maximum(-a * r, -a * np.clip(r, 0.8, 1.28))
    want = ((w.double().numpy() * pg - 0.01 * ent.double().numpy()) * mask.numpy()).sum(1) / denom.numpy()
    assert np.allclose(got.double().numpy(), want, rtol=0, atol=2 * gamma(5, torch.float32) * np.abs(want).max() + 8 * EPS32)
    ones = row_terms(logp, mask, old, adv, denom, spec, ent, rollout_weight=torch.ones_like(w)).loss
    assert torch.equal(ones, row_terms(logp, mask, old, adv, denom, spec, ent).loss)


def test_the_data_parallel_merge_adds_the_workers_mismatch_up():
    parts = []
    for k3, tokens, dev in ((0.5, 10.0, 0.3), (0.25, 6.0, 0.7)):
        t = Tally(16, 4)
        t.start(4, 16)
        t.end(1.0)
        t.mismatch = MismatchTally(tokens=tokens, rows=2, k3_sum=k3, max_abs=dev, ppl_ratio_sum=2.5, corrected=1.0)
        parts.append(t)
    s = merge_tallies(parts).stats()
    assert s["mismatch_k3"] == 0.75 / 16 and s["mismatch_max_abs"] == 0.7 and s["mismatch_ppl_ratio"] == 5.0 / 4
    assert s["mismatch_tokens"] == 16 and s["rollout_corrected"] == 2 / 16


def _step(backend, samples, mode, cap=1.5):
    backend.add_adapter("A", seed=3)
    backend.init_optimizer("A", AdamConfig(lr=1e-3))
    return backend.train_step({"A": samples}, micro_batch=2, max_len=64, grad_clip=1.0, kl_coef=0.0, log_kl=False,
                              mini_batches=1, clip_ratio=0.2, entropy_coef=0.0, rollout_correction=mode,
                              rollout_correction_cap=cap)["A"]


@pytest.mark.parametrize("kind", ["multilora", "peft"])
def test_a_generator_twice_as_likely_as_the_trainer_is_truncated_or_masked_in_the_update(tiny_model, kind):
    """Every token's generator log-prob is the trainer's - log 2 (rho = pi_old / pi_gen = 2). On the first
    mini-batch the ratio is 1, so the loss is sum_t w_t (-A) / tokens: tis scales it by the cap, mis drops every
    token (loss 0, all corrected), none leaves it; k3 = 2 - log 2 - 1 per token, whatever the backend."""
    model, tok = tiny_model
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(5, 400, (4,), generator=g).tolist() for _ in range(3)]
    comps = [torch.randint(5, 400, (3 + i,), generator=g).tolist() for i in range(3)]
    probe = MultiLoraBackend(copy.deepcopy(model), tok, LoraSpec(rank=4), 2)
    probe.add_adapter("A", seed=3)
    logp, mask = probe.rows_logprobs(["A"] * 3, prompts, comps)
    gen = [(logp[i, :len(c)] - math.log(2)).tolist() for i, c in enumerate(comps)]  # pi_old / pi_gen = 2
    samples = lambda with_gen: [TrainSample(p, c, 1.0, generator_logp=gen[i] if with_gen else None) for i, (p, c) in enumerate(zip(prompts, comps))]
    make = (lambda: MultiLoraBackend(copy.deepcopy(model), tok, LoraSpec(rank=4), 2)) if kind == "multilora" \
        else (lambda: PeftBackend(copy.deepcopy(model), tok, LoraSpec(rank=4)))
    none, tis, mis = (_step(make(), samples(True), mode) for mode in ("none", "tis", "mis"))
    plain = _step(make(), samples(False), "tis")
    n = sum(len(c) for c in comps)
    k3 = 2 - math.log(2) - 1
    for s in (none, tis, mis):
        assert abs(s["mismatch_k3"] - k3) <= 64 * EPS32 and s["mismatch_tokens"] == n
        assert abs(s["mismatch_max_abs"] - math.log(2)) <= 16 * EPS32
    assert none["loss"] == pytest.approx(-1.0, abs=8 * EPS32) and none["rollout_corrected"] == 0
    assert tis["loss"] == pytest.approx(-1.5, abs=8 * EPS32) and tis["rollout_corrected"] == 1
    assert mis["loss"] == 0 and mis["rollout_corrected"] == 1
    assert "mismatch_k3" not in plain and plain["loss"] == pytest.approx(-1.0, abs=8 * EPS32)  # torch generation


def test_data_parallel_workers_give_the_one_process_mismatch_and_corrected_update(tiny_model, monkeypatch):
    """test_update_loop.py's two thread workers (the data-parallel update loop with its all-reduce), with generator
    log-probs on two rows of three and tis: the merged mismatch and the corrected losses are the one process's."""
    import test_update_loop as loop

    plain = loop._batches

    def with_generator_logp():
        g, out = torch.Generator().manual_seed(5), plain()
        for samples in out.values():
            for i, s in enumerate(samples):
                if i % 3:
                    s.generator_logp = (-8 - torch.rand(len(s.completion_ids), generator=g) * 8).tolist()  # ~ -log V
        return out

    monkeypatch.setattr(loop, "_batches", with_generator_logp)
    monkeypatch.setitem(loop.UPDATE, "rollout_correction", "tis")
    monkeypatch.setitem(loop.UPDATE, "rollout_correction_cap", 1.5)
    one = loop._backend(tiny_model)
    ref = [one.train_step(with_generator_logp(), **loop.UPDATE) for _ in range(2)]
    _, stats = loop._on_workers(tiny_model, 2)
    for step, theirs in zip(stats, ref):
        for n in ("T0", "S0"):
            assert 0 < theirs[n]["rollout_corrected"] < 1 and theirs[n]["mismatch_k3"] > 0
            for key in ("mismatch_k3", "mismatch_max_abs", "mismatch_ppl_ratio", "mismatch_tokens", "rollout_corrected"):
                assert step[n][key] == pytest.approx(theirs[n][key], rel=1e-5), (n, key)
            for mine, their in zip(step[n]["per_mini_batch"], theirs[n]["per_mini_batch"]):
                assert mine["loss"] == pytest.approx(their["loss"], rel=1e-4, abs=1e-6), n
