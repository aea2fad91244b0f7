"""One train step of ours on the tiny model equals the ported veRL actor's (tests/reference/azr_update.py,
``update_policy``, AZR paper 41ed983) for every ``loss_agg``: AZR's mini-batch layout (two mini-batches, so the
second sees a moved policy and the clip), log-probs at temperature 0.7, the k3 KL loss against the base, the
entropy bonus, the dual clip on. The port runs the model's own full forward (left-padded prompts, position ids,
all logits divided by the temperature), not our completion-only path; plain SGD on both sides, so the weights
after the step are the gradients themselves and no optimizer state hides a difference."""

import copy

import pytest
import torch

from populora.platform.backends import LoraSpec, PeftBackend, TrainSample
from populora.platform.backends.policy_loss import UpdateSpec, micro_groups, mini_batch_parts
from reference import azr_update as ref
from tolerance import assert_close

AGGS = ("token-mean", "micro-token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
SPEC = dict(micro_batch=2, max_len=64, grad_clip=1.0, kl_coef=0.1, log_kl=True, clip_ratio=0.2, entropy_coef=0.01,
            temperature=0.7, kl_estimator="low_var_kl", mini_batch_size=3, loss_micro_batch=2, clip_ratio_c=3.0)
LR = 0.5


def _samples() -> list[TrainSample]:
    """Two kinds, both roles, ragged lengths, arriving out of AZR's order; rows repeated so the second mini-batch
    re-scores tokens the first step trained on (ratios move past the clip)."""
    g = torch.Generator().manual_seed(3)
    layout = [("code_o", "student"), ("code_i", "teacher"), ("code_o", "teacher"), ("code_i", "student"),
              ("code_i", "student"), ("code_o", "student")]
    prompt = torch.randint(5, 300, (4,), generator=g).tolist()
    completion = torch.randint(5, 300, (5,), generator=g).tolist()
    out = []
    for i, (kind, role) in enumerate(layout):
        p = prompt[:2 + i % 3]
        c = completion[:1 + (2 * i) % 5]
        out.append(TrainSample(p, c, float(torch.randn((), generator=g)) * 2, kind, role))
    return out


class _Base(torch.nn.Module):
    """The reference policy of the port's KL: the same PEFT model with its adapter switched off."""

    def __init__(self, peft_model):
        super().__init__()
        self.peft_model = peft_model

    def forward(self, **kwargs):
        with self.peft_model.disable_adapter():
            return self.peft_model(**kwargs)


def test_one_step_equals_the_ported_actor_for_every_loss_agg(tiny_model):
    model, tok = tiny_model
    samples = _samples()
    for agg in AGGS:
        spec = UpdateSpec(loss_agg=agg, **SPEC)
        ours = PeftBackend(copy.deepcopy(model), tok, LoraSpec(rank=4))
        theirs = PeftBackend(copy.deepcopy(model), tok, LoraSpec(rank=4))
        for b in (ours, theirs):
            b.add_adapter("a", seed=7)
        with torch.no_grad():
            g = torch.Generator().manual_seed(11)
            for p in ours.parameters("a"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
        theirs.set_adapter_state("a", ours.adapter_state("a"))
        ours.optimizers["a"] = torch.optim.SGD(ours.parameters("a"), lr=LR)
        stats = ours.train_step({"a": samples}, **SPEC, loss_agg=agg)["a"]

        parts = mini_batch_parts(samples, spec)
        assert len(parts) == 2 and [len(p) for p in parts] == [3, 3]  # code_i's three rows, then code_o's
        micro = [micro_groups(part, samples, spec.loss_micro_batch) if agg == "micro-token-mean" else [part] for part in parts]
        params = theirs.parameters("a")
        theirs.model.set_adapter("a")
        rows = [{"prompt": s.prompt_ids, "response": s.completion_ids, "advantage": s.weight} for s in samples]
        norms = ref.update_policy(theirs.model, torch.optim.SGD(params, lr=LR), params, rows, parts, micro,
                                  spec.temperature, spec.clip_ratio, spec.entropy_coef, spec.grad_clip,
                                  tok.pad_token_id, "token-mean" if agg == "micro-token-mean" else agg,
                                  use_kl_loss=True, kl_loss_coef=spec.kl_coef, kl_loss_type="low_var_kl",
                                  ref_model=_Base(theirs.model), clip_ratio_c=spec.clip_ratio_c)
        vocab = model.config.vocab_size
        assert [m["grad_norm"] for m in stats["per_mini_batch"]] == [pytest.approx(n, rel=1e-4) for n in norms], agg
        assert stats["per_mini_batch"][1]["ratio_dev"] > 0  # the second mini-batch saw the policy the first moved
        after, want = ours.adapter_state("a"), theirs.adapter_state("a")
        for k in want:
            # the LM head's log-softmax (vocab terms) and the hidden sums dominate the reduction; two steps of lr 0.5
            assert_close(after[k], want[k], 4 * vocab, f"{agg}: {k}", scale=float(want[k].abs().max()) + LR)
        for b in (ours, theirs):
            b.model.unload()
