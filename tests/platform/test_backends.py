"""The backend family: one protocol, no backend built on another, one factory for training and evaluation, and
evaluation's greedy outputs the same whichever backend generates them."""

import json

import pytest
import torch

from populora.evaluation.harness.generation import GenConfig, chat_prompt, complete
from populora.platform.backends import Backend, BackendConfig, LoraSpec, MultiLoraBackend, PeftBackend, make_backend
from populora.platform.backends.ray import RayBackend
from populora.platform.backends.vllm import VllmBackend

PROTOCOL = [name for name in dir(Backend) if not name.startswith("_")] + ["tokenizer", "lora"]


@pytest.mark.parametrize("cls", [PeftBackend, MultiLoraBackend, RayBackend, VllmBackend])
def test_every_backend_implements_the_protocol_itself(cls):
    assert cls.__mro__ == (cls, object), "composition, not subclassing of another backend"
    assert "__getattr__" not in vars(cls), "no forwarding: every protocol method is written out"
    methods = [n for n in PROTOCOL if n not in ("tokenizer", "lora")]
    assert {"generate", "train_step", "add_adapter", "save_adapter", "optimizer_state"} <= set(methods)
    missing = [n for n in methods if n not in vars(cls)]
    assert not missing, f"{cls.__name__} lacks {missing}"


@pytest.mark.parametrize("kind, cls", [("peft", PeftBackend), ("multilora", MultiLoraBackend)])
def test_make_backend_builds_the_configured_kind(kind, cls):
    backend = make_backend(BackendConfig(tiny_random=True, device="cpu", lora=LoraSpec(rank=4), kind=kind, slots=2))
    assert type(backend) is cls and isinstance(backend, Backend)
    backend.add_adapter("m0", seed=0)
    assert backend.adapters == ["m0"] and backend.lora.rank == 4


def _random_adapter(tiny_backend, directory):
    tiny_backend.add_adapter("a", seed=0)
    g = torch.Generator().manual_seed(0)  # non-zero B: the adapter really changes the outputs
    tiny_backend.set_adapter_state("a", {k: torch.randn(v.shape, generator=g) * 0.5
                                         for k, v in tiny_backend.adapter_state("a").items()})
    return tiny_backend.save_adapter("a", directory)


def test_evaluation_greedy_outputs_equal_on_multilora_and_peft(tiny_backend, tmp_path):
    from populora.evaluation import targets as T
    from populora.evaluation.evaluate import backend_factory as _backend_factory
    from populora.platform.config import ModelSource

    path = _random_adapter(tiny_backend, tmp_path / "a")
    target = T.adapter_target(str(path))
    lora = T.lora_spec([target, T.Target(T.BASE_LABEL, T.BASE, None)])
    assert (lora.rank, lora.alpha) == (4, 16.0)
    gen = GenConfig(max_new_tokens=12, batch_size=2)
    texts = {}
    for kind in ("peft", "multilora"):
        backend = _backend_factory(ModelSource(tiny_random=True), "cpu", kind, lora)()
        backend.add_adapter("eval_a", from_dir=target.adapter_dir)
        prompts = [chat_prompt(backend, q) for q in ("Write f(x) = x + 1.", "What is 2 + 2?", "Hi")]
        texts[kind] = (complete(backend, "eval_a", prompts, gen), complete(backend, None, prompts, gen))
    assert texts["multilora"] == texts["peft"]
    adapted, base = texts["peft"]
    assert adapted != base  # the adapter acts, so equal outputs mean equal adapters


def test_multilora_evaluation_refuses_adapters_of_different_shapes(tmp_path):
    from populora.evaluation import targets as T

    found = []
    for name, r in (("a", 4), ("b", 8)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(json.dumps(
            {"r": r, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}))
        found.append(T.adapter_target(str(tmp_path / name)))
    assert T.lora_spec(found[:1]) == LoraSpec(4, 16.0, 0.0, ("q_proj", "v_proj"))
    with pytest.raises(T.TargetError, match="--backend peft"):
        T.lora_spec(found)
