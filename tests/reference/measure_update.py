"""The figures of docs/azr-fidelity.md's update section (issue 65), before and after: each of our update's choices
held against the port of AZR's (azr_update.py) on random inputs with fixed seeds. Run by hand:

    cd tests && ../.venv/bin/python -m reference.measure_update

"Before" re-states what the update computed until issue 65 (log-probs at temperature 1, the k1 KL loss,
``mini_batches: 3`` contiguous slices, one token mean per mini-batch, whitening by the population std + 1e-6 with
empty completions counted as one token); "after" is the code as it is. Lengths "at paper scale" are drawn
uniformly, proposals 200-1,500 tokens and answers 100-800 (an assumption, stated where it is used).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from populora.platform.backends import TrainSample, logprobs
from populora.platform.backends.policy_loss import UpdateSpec, kl_penalty, mini_batch_parts, mini_batch_slices, row_denominators
from populora.training.phases.advantages import task_relative_advantages
from reference import azr_update as ref


def temperature(cases: int = 100, T: float = 0.8) -> None:
    """A sampled token's log-prob from logits ~ N(0, 2^2) over 64 tokens: at temperature 1 (before) and ours at T
    (after), each against the actor's log_softmax(logits / T)."""
    g = torch.Generator().manual_seed(0)
    before, after, agree = [], [], 0
    for _ in range(cases):
        logits = 2 * torch.randn(8, 64, generator=g, dtype=torch.float64)
        y = torch.randint(0, 64, (8,), generator=g)
        want = ref.logprobs_from_logits(logits / T, y)
        old = ref.logprobs_from_logits(logits, y)
        ours = logprobs._head_stats(lambda h: h, logits[None], y[None], False, False, T)[0][0]  # our head path
        before.append(float((old - want).abs().max()))
        after.append(float((ours - want).abs().max()))
        agree += bool(torch.allclose(old, want, atol=1e-6))
    print(f"1. log-prob at T={T}: before max |diff| {max(before):.3f} nats (median {np.median(before):.3f}; "
          f"{agree}/{cases} cases agree to 1e-6), after max |diff| {max(after):.1e}")


def kl(draws: int = 200, vocab: int = 8, spread: float = 0.5) -> None:
    """The expected gradient (exact, over the vocabulary) of each estimator's loss on on-policy samples, against the
    exact KL(p || base)'s, base = softmax(theta + spread * N(0, 1))."""
    g = torch.Generator().manual_seed(0)
    rows = {e: ([], []) for e in ("k1", "k3", "k2")}
    exact_norms = []
    for _ in range(draws):
        theta = torch.randn(vocab, generator=g, dtype=torch.float64)
        log_q = torch.log_softmax(theta + spread * torch.randn(vocab, generator=g, dtype=torch.float64), -1)
        t = theta.clone().requires_grad_(True)
        logp = torch.log_softmax(t, -1)
        (exact,) = torch.autograd.grad((logp.exp() * (logp - log_q)).sum(), t)
        exact_norms.append(float(exact.norm()))
        for e, (norms, cosines) in rows.items():
            t = theta.clone().requires_grad_(True)
            logp = torch.log_softmax(t, -1)
            (grad,) = torch.autograd.grad((logp.exp().detach() * kl_penalty(logp, log_q, e)).sum(), t)
            norms.append(float(grad.norm()))
            cosines.append(float(torch.nn.functional.cosine_similarity(grad, exact, 0)) if grad.norm() > 1e-12 else 0.0)
    print(f"2. KL gradient (mean over {draws} draws, V={vocab}): exact |grad| {np.mean(exact_norms):.3f}; " + "; ".join(
        f"{e} |grad| {np.mean(n):.4f} cosine {np.mean(c):+.2f}" for e, (n, c) in rows.items()))


def _baseline_step(seed: int = 0) -> list[TrainSample]:
    """The paper baseline's rows of one step as update() receives them: 16 proposals (kinds in turn) then the
    solver's 3 x 64 buffer answers, at paper lengths."""
    rng = np.random.default_rng(seed)
    kinds = ("code_o", "code_i", "code_f")
    rows = [TrainSample([1] * 300, [2] * int(rng.integers(200, 1501)), 0.0, kinds[i % 3], "teacher") for i in range(16)]
    rows += [TrainSample([1] * 300, [2] * int(rng.integers(100, 801)), 0.0, k, "student") for k in kinds for _ in range(64)]
    return rows


def mini_batches() -> None:
    rows = _baseline_step()
    before = mini_batch_slices(len(rows), 3)
    after = mini_batch_parts(rows, UpdateSpec(mini_batch_size=128))
    for name, parts in (("before", before), ("after", after)):
        mixed = sum(len({rows[i].kind for i in p}) > 1 for p in parts)
        first = sum(rows[i].role == "teacher" for i in parts[0])
        print(f"3. paper-baseline step ({len(rows)} rows) {name}: {len(parts)} mini-batches of {[len(p) for p in parts]} rows, "
              f"{mixed} mixing kinds, {first}/16 proposer rows in the first (ratio exactly 1, never clipped)")
    n_agree = [n for n in range(1, 1000) if mini_batch_slices(n, 3) == ref.split(list(range(n)), 128)]
    print(f"   before, contiguous thirds equal AZR's split(128) at n in {n_agree[:3]}{'...' if len(n_agree) > 3 else ''}"
          f" ({len(n_agree)} of 999 sizes)")


def aggregation(seed: int = 0) -> None:
    """Per-token loss weights of one AZR mini-batch (64 proposals + 64 answers of one kind, paper lengths), ours
    relative to AZR's micro-batch mean (its micro-batches balanced as AZR balances them), and the cosine of the
    two losses' gradients when every token's gradient is an independent random vector."""
    rng = np.random.default_rng(seed)
    rows = [TrainSample([1] * int(rng.integers(100, 600)), [2] * int(rng.integers(200, 1501)), 0.0, "code_i", "teacher")
            for _ in range(64)]
    rows += [TrainSample([1] * int(rng.integers(100, 600)), [2] * int(rng.integers(100, 801)), 0.0, "code_i", "student")
             for _ in range(64)]
    idx = list(range(128))
    blocks = {("code_i", r): [i for i in idx if rows[i].role == r] for r in ("teacher", "student")}
    balanced = {k: [v[j] for j in ref.balance_batch([len(rows[i].prompt_ids) + len(rows[i].completion_ids) for i in v])]
                for k, v in blocks.items()}
    micro = ref.split(ref.azr_batch(balanced), 16)
    azr = {i: 1.0 / (sum(len(rows[j].completion_ids) for j in m) * len(micro)) for m in micro for i in m}
    g = torch.Generator().manual_seed(seed)
    grads = {i: torch.randn(len(rows[i].completion_ids), 32, generator=g, dtype=torch.float64).sum(0) for i in idx}
    want = sum(azr[i] * grads[i] for i in idx)
    for agg in ("token-mean", "micro-token-mean", "seq-mean-token-mean"):
        denom = row_denominators(idx, rows, UpdateSpec(loss_agg=agg, loss_micro_batch=16))
        ratio = [(1 / d) / azr[i] for i, d in zip(idx, denom)]
        got = sum(grads[i] / d for i, d in zip(idx, denom))
        cos = float(torch.nn.functional.cosine_similarity(got, want, 0))
        print(f"4. {agg}: per-token weight / AZR's {min(ratio):.3f}-{max(ratio):.3f}x, gradient cosine {cos:.4f}")


def _whiten_before(rewards, groups, lengths, eps=1e-6):
    """The whitening until issue 65: population std + 1e-6, an empty completion counted as one token."""
    r, w = np.asarray(rewards, float), np.asarray(lengths, float).clip(min=1)
    adv = np.zeros_like(r)
    for g in set(groups):
        idx = [i for i, x in enumerate(groups) if x == g]
        mean = np.average(r[idx], weights=w[idx])
        std = math.sqrt(np.average((r[idx] - mean) ** 2, weights=w[idx]))
        adv[idx] = 0.0 if std < eps else (r[idx] - mean) / (std + eps)
    return adv


def whitening(seed: int = 0) -> None:
    """64 answers of one group at paper lengths with AZR's rewards, and a small group (4 answers of 1-3 tokens)."""
    rng = np.random.default_rng(seed)
    for name, n, lo, hi in (("64 answers, 100-800 tokens", 64, 100, 801), ("4 answers, 1-3 tokens", 4, 1, 4)):
        worst_before = worst_after = 0.0
        for _ in range(200):
            rewards = rng.choice([-1.0, -0.5, 1.0], n).tolist()
            lengths = rng.integers(lo, hi, n).tolist()
            if len(set(rewards)) == 1:
                continue
            want = ref.reinforce_plus_plus_advantage(*ref.token_level_rewards(rewards, lengths))[:, 0].double().numpy()
            scale = np.abs(want).max()
            worst_before = max(worst_before, np.abs(_whiten_before(rewards, [0] * n, lengths) - want).max() / scale)
            worst_after = max(worst_after, np.abs(task_relative_advantages(rewards, [0] * n, lengths) - want).max() / scale)
        print(f"5. whitening, {name}: max |ours - AZR's| / max |AZR's| before {worst_before:.1e}, after {worst_after:.1e}"
              " (AZR's float32)")


if __name__ == "__main__":
    temperature()
    kl()
    mini_batches()
    aggregation()
    whitening()
