"""Activation checkpointing (model.activation_checkpointing): the same update, bit for bit up to float noise, with
fewer activations kept for the backward pass, on every local backend; generation untouched."""

from __future__ import annotations

import pytest
import torch

from populora.platform.backends import AdamConfig, BackendConfig, LoraSpec, TrainSample, make_backend
from populora.platform.backends import checkpointing


def _backend(kind: str, on: bool):
    torch.manual_seed(0)
    backend = make_backend(BackendConfig(tiny_random=True, device="cpu", lora=LoraSpec(rank=4), kind=kind, slots=2,
                                         activation_checkpointing=on))
    for name in ("m0", "m1"):
        backend.add_adapter(name, seed=1 if name == "m0" else 2)
        backend.init_optimizer(name, AdamConfig(lr=1e-2))
    return backend


def _samples(seed: int) -> list[TrainSample]:
    g = torch.Generator().manual_seed(seed)
    return [TrainSample(torch.randint(5, 200, (n,), generator=g).tolist(), torch.randint(5, 200, (c,), generator=g).tolist(), w)
            for n, c, w in ((9, 4, 1.0), (5, 7, -0.5), (12, 3, 0.25))]


def _saved_bytes(backend, kind: str) -> int:
    """Bytes autograd keeps for the backward of one training forward through the decoder (what checkpointing
    trades for compute; the LM head on completion positions is the same either way)."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    ids = torch.randint(5, 200, (2, 64), generator=torch.Generator().manual_seed(3))
    attn = torch.ones_like(ids)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        hidden = backend._forward_rows(["m0", "m1"], ids, attn) if kind == "multilora" else backend._forward("m0", ids, attn)
    hidden.float().pow(2).sum().backward()
    return total


@pytest.mark.parametrize("kind", ["multilora", "peft"])
def test_checkpointed_update_equals_the_plain_one_and_keeps_fewer_activations(kind):
    plain, ckpt = _backend(kind, False), _backend(kind, True)
    batches = {"m0": _samples(0), "m1": _samples(1)}
    stats = [b.train_step(batches, micro_batch=2, log_kl=False, mini_batches=2, entropy_coef=0.01) for b in (plain, ckpt)]
    for name in ("m0", "m1"):
        assert stats[0][name]["loss"] == pytest.approx(stats[1][name]["loss"], rel=1e-5, abs=1e-7)
        a, b = plain.adapter_state(name), ckpt.adapter_state(name)
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
        assert any(not torch.equal(v, _backend(kind, False).adapter_state(name)[k]) for k, v in a.items())  # it trained
    assert _saved_bytes(ckpt, kind) < 0.6 * _saved_bytes(plain, kind)


def test_generation_is_unchanged_and_enable_is_idempotent():
    plain, ckpt = _backend("multilora", False), _backend("multilora", True)
    prompts = [plain.encode_chat([{"role": "user", "content": "hi"}])] * 2
    outs = [b.generate(prompts, ["m0", None], max_new_tokens=6, temperature=0.0) for b in (plain, ckpt)]
    assert [g.completion_ids for g in outs[0]] == [g.completion_ids for g in outs[1]]
    layers = checkpointing.decoder_layers(ckpt.base_model)
    forwards = [layer.forward for layer in layers]
    assert checkpointing.enable(ckpt.base_model) == len(layers)
    assert [layer.forward for layer in layers] == forwards  # not wrapped twice
