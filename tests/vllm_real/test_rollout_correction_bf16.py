"""Rollout correction where the mismatch is real: the vLLM CPU engine in bfloat16 samples, the fp32 multi-LoRA
trainer updates (the embedded SmolLM2-135M, one adapter with B drawn at random). One engine for the module.

The engine's log-probs differ from the trainer's by bf16's rounding (scripts/mismatch_figures.py: k3 ~3e-3),
so: the update logs that mismatch, below the out-of-sync flag's threshold; and with a cap close to 1 the
correction acts on real tokens, its loss on the first mini-batch (ratio 1) equal to the reference
sum_t w_t * (-A) / tokens with w from veRL's / slime's formulas on the engine's and the trainer's log-probs."""

import copy
import math

import numpy as np
import pytest
import torch

from populora.platform.backends import AdamConfig, LoraSpec, TrainSample
from populora.platform.backends.multilora import MultiLoraBackend
from populora.training.measures import monitors

pytestmark = pytest.mark.slow
# conftest.py's ``engine``: one bf16 engine, an fp32 trainer with one adapter A (B drawn from seed 1), rank 8
DTYPE, RANK, ALPHA, MEMBERS, ADAPTERS, MAX_LEN, PRISTINE = "bfloat16", 8, 16.0, 1, {"A": 1}, 192, True
CAP = 1.02  # bf16's per-token ratios spread over ~[0.75, 1.34]: a cap this close to 1 truncates / masks many


@pytest.fixture(scope="module")
def sampled(engine):
    """(base model, tokenizer, adapter state, generations of the bf16 engine, the trainer's log-probs of them)."""
    backend, trainer, pristine = engine
    rows = [trainer.encode_chat([{"role": "user", "content": q}]) for q in
            ("Write a Python function that reverses a list.", "What is 17 * 23?")] * 3
    gens = backend.generate(rows, ["A"] * len(rows), 24, temperature=1.0, seed=0)
    with torch.no_grad():
        logp, mask = trainer.rows_logprobs(["A"] * len(gens), [g.prompt_ids for g in gens],
                                           [g.completion_ids for g in gens])
    return pristine, trainer.tokenizer, trainer.adapter_state("A"), gens, logp, mask


def _step(sampled, mode):
    base, tok, state, gens, _, _ = sampled
    trainer = MultiLoraBackend(copy.deepcopy(base), tok, LoraSpec(rank=8, alpha=16.0), 2)
    trainer.add_adapter("A", seed=0)
    trainer.set_adapter_state("A", state)
    trainer.init_optimizer("A", AdamConfig(lr=1e-5))
    samples = [TrainSample(g.prompt_ids, g.completion_ids, 1.0 if i % 2 else -1.0, generator_logp=g.logprobs) for i, g in enumerate(gens)]
    return trainer.train_step({"A": samples}, micro_batch=3, max_len=192, grad_clip=1.0, kl_coef=0.0, log_kl=False,
                              mini_batches=1, entropy_coef=0.0, rollout_correction=mode, rollout_correction_cap=CAP)["A"]


def _reference(sampled, mode) -> tuple[float, float]:
    """(loss, share of tokens corrected) from the formulas, in float64."""
    _, _, _, gens, logp, _ = sampled
    total, corrected, n = 0.0, 0, 0
    for i, g in enumerate(gens):
        rho = np.exp(logp[i, :len(g.logprobs)].double().numpy() - np.array(g.logprobs, dtype=np.float64))
        w = np.minimum(rho, CAP) if mode == "tis" else np.where((rho >= 1 / CAP) & (rho <= CAP), rho, 0.0)
        total += float(w.sum()) * -(1.0 if i % 2 else -1.0)
        corrected += int((w != rho).sum())
        n += len(g.logprobs)
    return total / n, corrected / n


def test_the_bf16_engine_differs_from_the_fp32_trainer_by_numerics_below_the_flag(sampled):
    stats = _step(sampled, "none")
    assert 1e-5 < stats["mismatch_k3"] < monitors.OUT_OF_SYNC_K3, stats["mismatch_k3"]
    assert stats["mismatch_tokens"] == sum(len(g.completion_ids) for g in sampled[3])
    assert stats["rollout_corrected"] == 0


@pytest.mark.parametrize("mode", ["tis", "mis"])
def test_the_correction_acts_on_real_tokens_as_the_reference_formula_says(sampled, mode):
    stats = _step(sampled, mode)
    loss, corrected = _reference(sampled, mode)
    assert corrected > 0.05, "a cap this close to 1 must act on bf16's ratios"
    assert math.isclose(stats["rollout_corrected"], corrected, abs_tol=2 / stats["mismatch_tokens"])
    assert math.isclose(stats["loss"], loss, rel_tol=1e-4, abs_tol=1e-5), (stats["loss"], loss)
