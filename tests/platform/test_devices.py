"""The GPU path without a GPU: the model and adapters live on torch's ``meta`` device, so any CPU tensor mixed
into their math fails exactly as it would on CUDA ("Tensor on device cpu is not on the expected device meta!").

Meta follows CUDA's mixing rules (CPU index tensors and 0-dim CPU scalars are allowed, anything else is refused),
unlike fake CUDA tensors under FakeTensorMode, which on a CPU-only torch fail on plain indexing. Meta tensors hold
no values, so ``MetaDevice`` isolates the value-dependent calls (``.item()``, ``.tolist()``, copies to the CPU,
boolean masks): they return zeros (True for a bool, so HF's generate stops after its first token). It also
refuses a CPU random generator used on a device tensor, which CUDA refuses too.

``scripts/gpu-smoke.sh`` runs this file with ``POPULORA_TEST_DEVICE=cuda`` on a real GPU: the same tests with
real values.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from populora.platform.backends import AdamConfig, LoraSpec, MultiLoraBackend, PeftBackend, TrainSample
from populora.training.run import checkpoint
from populora.training.evolve import operators
from populora.platform.backends.multilora import SlotAdam

DEVICE = os.environ.get("POPULORA_TEST_DEVICE", "meta")
aten = torch.ops.aten
SAMPLES = [TrainSample([1, 2, 3, 4], [5, 6, 7], 1.0), TrainSample([8, 9], [10, 11, 12, 13], -0.5)]


class MetaDevice(TorchDispatchMode):
    """Value-dependent calls on meta tensors return zeros; CPU generators on device tensors are refused."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        gen = kwargs.get("generator")
        if gen is not None and any(t.device != gen.device for t in tensors):
            raise RuntimeError(f"{func}: a {gen.device} generator used on a {tensors[0].device} tensor")
        first = tensors[0] if tensors else None
        if first is None or not first.is_meta:
            return func(*args, **kwargs)
        if func is aten._local_scalar_dense.default:
            return True if first.dtype == torch.bool else 0
        if func is aten._to_copy.default and str(kwargs.get("device", "meta")) == "cpu":
            return torch.zeros(first.shape, dtype=kwargs.get("dtype") or first.dtype)
        if func is aten.nonzero.default:  # a boolean mask on values we do not have: take every element
            return torch.ones(first.shape, dtype=torch.bool).nonzero().to("meta")
        if func is aten.index.Tensor and any(i is not None and i.dtype == torch.bool for i in args[1]):
            return func(first, [j for i in args[1] for j in _all_true(i)])
        return func(*args, **kwargs)


def _all_true(index):
    """A boolean index as the CPU long indices it would give if every element were True (CUDA takes those too)."""
    if index is None or index.dtype != torch.bool:
        return [index]
    return list(torch.ones(index.shape, dtype=torch.bool).nonzero().unbind(1))


@pytest.fixture
def on_device():
    if DEVICE == "meta":
        with MetaDevice():
            yield torch.device("meta")
    else:
        yield torch.device(DEVICE)


@pytest.fixture
def device_model(tiny_model, on_device):
    """A copy of the tiny model on the device (the session's CPU model stays untouched)."""
    model, tok = tiny_model
    return copy.deepcopy(model).to(on_device), tok


def _all_on(tensors, device):
    return all(t.device.type == device.type for t in tensors)


def test_slot_adam_clip_and_step_stay_on_the_device(on_device):
    stacked = torch.nn.Parameter(torch.randn(3, 4, 5, device=on_device))
    stacked.grad = torch.randn(3, 4, 5, device=on_device)
    opt = SlotAdam([stacked], lr=0.1, weight_decay=0.01)
    opt.clip_([1, 2], 1.0)
    opt.step([1, 2])
    opt.step([2])
    assert _all_on([stacked, *opt.exp_avg, *opt.exp_avg_sq], on_device)
    assert opt.exp_avg[0].dtype == torch.float32  # master moments in fp32 (the LoRA weights are fp32)


def test_multilora_generate_train_step_and_growth_on_the_device(device_model, on_device):
    model, tok = device_model
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=4), initial_slots=1)
    for i, name in enumerate(["a", "b", "c"]):  # the third grows the slots and the optimizer's moments
        backend.add_adapter(name, seed=i)
        backend.init_optimizer(name, AdamConfig(lr=1e-3))
    gens = backend.generate(["def f(x):", "print("], ["a", None], max_new_tokens=3, temperature=1.0, top_p=0.9, seed=0)
    assert len(gens) == 2
    stats = backend.train_step({"a": SAMPLES, "c": SAMPLES[:1]}, micro_batch=1, log_kl=True, kl_coef=0.1)
    assert set(stats) == {"a", "c"}
    assert _all_on(backend._params() + backend.optimizer.exp_avg + backend.optimizer.exp_avg_sq, on_device)


def test_peft_generate_and_train_step_on_the_device(device_model, on_device):
    model, tok = device_model
    backend = PeftBackend(model, tok, LoraSpec(rank=4))
    for i, name in enumerate(["a", "b"]):
        backend.add_adapter(name, seed=i)
        if on_device.type == "meta":  # PEFT moves no adapter of a layer that already holds one on meta (its
            backend.to(on_device)  # lazy-loading case); on a real device it moves each new one itself
        backend.init_optimizer(name, AdamConfig(lr=1e-3))
    assert _all_on([p for n in backend.adapters for p in backend.parameters(n)], on_device)
    assert len(backend.generate(["def f(x):", "x ="], ["a", "b"], max_new_tokens=3, seed=0)) == 2
    stats = backend.train_step({"a": SAMPLES, "b": SAMPLES}, micro_batch=2, log_kl=True, kl_coef=0.1)
    assert set(stats) == {"a", "b"}
    state = backend.optimizers["a"].state
    assert state and _all_on([t for s in state.values() for t in s.values() if t.dim() > 0], on_device)


# the update's options added with issue 65/66 (AZR's layout and aggregation, the sampling temperature, the KL
# estimator, the dual clip, rollout correction on the generator's log-probs): each builds tensors of its own
# (temperature scaling, per-kind mini-batches, the generator log-prob tensor, the correction's weights and mask)
# that must be made on the device, not the CPU
UPDATE_OPTIONS = [
    dict(temperature=0.8, kl_coef=0.1, kl_estimator="k3", mini_batch_size=2, loss_agg="seq-mean-token-sum",
         clip_ratio_c=3.0),
    dict(temperature=0.6, loss_agg="seq-mean-token-mean", rollout_correction="tis", rollout_correction_cap=2.0),
    dict(temperature=1.2, loss_agg="token-mean", rollout_correction="mis", rollout_correction_cap=1.5,
         mini_batches=2),
]
GENERATED = [TrainSample([1, 2, 3, 4], [5, 6, 7], 1.0, kind="code_o", role="student", generator_logp=[-1.0, -2.0, -0.5]),
             TrainSample([8, 9], [10, 11, 12, 13], -0.5, kind="code_o", role="student",
                         generator_logp=[-0.3, -1.1, -2.2, -0.7]),
             TrainSample([3, 4], [5, 6], 0.25, kind="code_i", role="teacher", generator_logp=[-0.9, -1.4])]


@pytest.mark.parametrize("backend_cls", [MultiLoraBackend, PeftBackend])
@pytest.mark.parametrize("options", UPDATE_OPTIONS, ids=["azr-layout-k3-dual-clip", "tis", "mis"])
def test_update_options_stay_on_the_device(device_model, on_device, backend_cls, options):
    model, tok = device_model
    backend = backend_cls(model, tok, LoraSpec(rank=4))
    for i, name in enumerate(["a", "b"]):
        backend.add_adapter(name, seed=i)
        if on_device.type == "meta" and backend_cls is PeftBackend:  # as in the PEFT test above
            backend.to(on_device)
        backend.init_optimizer(name, AdamConfig(lr=1e-3))
    stats = backend.train_step({"a": GENERATED, "b": GENERATED[:2]}, micro_batch=2, log_kl=True, **options)
    assert set(stats) == {"a", "b"}
    assert _all_on([p for n in ("a", "b") for p in backend.parameters(n)], on_device)


@pytest.mark.parametrize("backend_cls", [MultiLoraBackend, PeftBackend])
def test_activation_checkpointing_recomputes_on_the_device(device_model, on_device, backend_cls):
    """The checkpointed layers' recomputation (and the multi-LoRA slot restore around it) in the backward pass
    creates no tensor off the device: what the paper presets run on a GPU."""
    from populora.platform.backends import checkpointing

    model, tok = device_model
    assert checkpointing.enable(model) == len(checkpointing.decoder_layers(model))
    backend = backend_cls(model, tok, LoraSpec(rank=4), **({"initial_slots": 2} if backend_cls is MultiLoraBackend else {}))
    for i, name in enumerate(["a", "b"]):
        backend.add_adapter(name, seed=i)
        if on_device.type == "meta" and backend_cls is PeftBackend:
            backend.to(on_device)  # see test_peft_generate_and_train_step_on_the_device
        backend.init_optimizer(name, AdamConfig(lr=1e-3))
    stats = backend.train_step({"a": SAMPLES, "b": SAMPLES[:1]}, micro_batch=2)
    assert set(stats) == {"a", "b"}
    grads_seen = [p for n in ("a", "b") for p in backend.parameters(n)]
    assert _all_on(grads_seen, on_device)


@pytest.mark.parametrize("name", list(operators.FAMILY))
def test_evolution_operators_keep_children_on_the_device(on_device, name):
    """Every operator of the family: its CPU generator's draws move to the device, no CPU tensor mixes in."""
    gen = torch.Generator().manual_seed(0)  # evolution's generator is a CPU one (the same children on any device)
    state = lambda: {f"m{i}.lora_A.weight": torch.randn(4, 16, device=on_device) for i in range(2)} | {
        f"m{i}.lora_B.weight": torch.randn(12, 4, device=on_device) for i in range(2)}
    parents = [state()] if operators.FAMILY[name].kind == "mutation" else [state(), state(), state()]
    child = operators.apply(name, parents if name == "xes" else parents[:2], [0.5, 0.3, 0.2] if name == "xes" else None, gen)
    assert _all_on(child.values(), on_device)
    assert {k: v.shape for k, v in child.items()} == {k: v.shape for k, v in parents[0].items()}


def test_checkpoint_save_and_restore_members_onto_the_device(device_model, on_device, tmp_path):
    model, tok = device_model
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=4), initial_slots=2)
    for name in ("a", "b"):
        backend.add_adapter(name, seed=0)
        backend.init_optimizer(name, AdamConfig(lr=1e-3))
    backend.train_step({"a": SAMPLES}, micro_batch=2, log_kl=False)
    path, _ = checkpoint.save(tmp_path, 1, {"step": 1}, "x: 1\n", backend, ["a", "b"], {"torch": torch.get_rng_state()})
    backend.unwrap()
    fresh = MultiLoraBackend(model, tok, LoraSpec(rank=4), initial_slots=2)
    for name in ("a", "b"):
        checkpoint.restore_member(fresh, path, name, AdamConfig(lr=1e-3))
    assert fresh.optimizer.steps[fresh.slots["a"]] == 1
    fresh.train_step({"a": SAMPLES, "b": SAMPLES}, micro_batch=2, log_kl=False)  # restored moments mix with device grads
    assert _all_on(fresh._params() + fresh.optimizer.exp_avg + fresh.optimizer.exp_avg_sq, on_device)
    fresh.unwrap()


def test_evaluation_generation_on_the_device(device_model):
    from populora.evaluation.harness.generation import GenConfig, chat_prompt, complete

    model, tok = device_model
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=4))
    backend.add_adapter("a", seed=0)
    prompts = [chat_prompt(backend, "Write add(a, b).", "```python\n")] * 3
    out = complete(backend, "a", prompts, GenConfig(max_new_tokens=3, temperature=0.7, n_samples=2, batch_size=4))
    assert [len(s) for s in out] == [2, 2, 2]
    backend.unwrap()


@pytest.mark.slow
@pytest.mark.parametrize("backend_cls", [MultiLoraBackend, PeftBackend])
def test_bfloat16_base_trains_and_generates_with_fp32_lora_and_moments(backend_cls):
    """The paper presets' dtype on the real embedded model: the base in bf16, LoRA weights and AdamW moments in
    fp32 (master copies: bf16 moments would lose updates of lr 1e-5 against weights of ~1e-2)."""
    from populora.platform.model.models import load_base, resolve_source

    model, tok = load_base(resolve_source("embedded"), dtype="bfloat16", device=DEVICE if DEVICE != "meta" else "cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    backend = backend_cls(model, tok, LoraSpec(rank=4))
    backend.add_adapter("a", seed=0)
    backend.init_optimizer("a", AdamConfig(lr=1e-3))
    prompt = backend.encode_chat([{"role": "user", "content": "Write a Python function that adds two numbers."}])
    gen = backend.generate([prompt], ["a"], max_new_tokens=8, temperature=0)[0]
    assert gen.completion_ids
    before = {k: v.clone() for k, v in backend.adapter_state("a").items()}
    # the chat prompt's last 8 tokens: on a CPU a bf16 backward through the 49,152-token head is slow (~9 s per
    # 40-token sample), and what is checked here (dtypes, a finite loss, moved fp32 weights) is the same
    sample = TrainSample(gen.prompt_ids[-8:], gen.completion_ids, 1.0)
    stats = backend.train_step({"a": [sample] * 2}, micro_batch=2, log_kl=True)
    assert stats["a"]["grad_norm"] > 0 and stats["a"]["loss"] == stats["a"]["loss"]  # finite
    after = backend.adapter_state("a")
    assert all(v.dtype == torch.float32 for v in after.values())
    assert any(not torch.equal(after[k], before[k]) for k in before)
    if isinstance(backend, MultiLoraBackend):
        moments = backend.optimizer.exp_avg + backend.optimizer.exp_avg_sq
    else:
        moments = [t for s in backend.optimizers["a"].state.values() for k, t in s.items() if k.startswith("exp_avg")]
    assert moments and all(m.dtype == torch.float32 for m in moments)
