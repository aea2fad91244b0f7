"""The tiny Qwen2 model (``model.base: tiny-qwen2``) on the real vLLM CPU engine, with LoRA: Qwen2's biases on
q/k/v, its untied LM head and its GQA served by vLLM's Qwen2 code, greedy tokens equal to the trainer's for
adapters and base rows in one batch, and generation that stops at ``<|im_end|>`` under the chat template and at
``<|endoftext|>`` for a base-style prompt, exactly where the model says them.

Where: the model's LM-head rows are swapped so that it says each stop token at a known place
(tests/stop_swap.py): ``<|im_end|>`` on adapter A's path for the chat prompt, ``<|endoftext|>`` on the base's
path for the base-style prompt. One engine serves that swapped copy for the whole module."""

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from populora.platform.model import chat_template, tiny_qwen2
from populora.platform.backends import LoraSpec
from populora.platform.backends.factory import vllm_max_loras
from populora.platform.backends.multilora import MultiLoraBackend
from populora.platform.backends.vllm import VllmBackend
from populora.platform.model.models import load_base, resolve_source
from stop_swap import stop_place, swap_head_rows

pytestmark = pytest.mark.slow
TOKENS = 24


def perturbed(state: dict, seed: int, scale: float = 0.5) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=gen) * scale if ".lora_B." in k else v) for k, v in state.items()}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(vLLM backend, trainer, prompts, expected completions) over the swapped tiny Qwen2."""
    source = resolve_source(tiny_qwen2.NAME)
    base, tok = load_base(source, "float32", "cpu")
    trainer = MultiLoraBackend(base, tok, LoraSpec(rank=8, alpha=16.0), 2)
    trainer.add_adapter("A", seed=0)
    trainer.set_adapter_state("A", perturbed(trainer.adapter_state("A"), seed=1))
    chat = trainer.encode_chat([{"role": "user", "content": "Say hello."}])
    plain = "def add(a, b):\n"
    im_end, eos = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    chat_path, plain_path = (g.completion_ids for g in trainer.generate([chat, plain], ["A", None], TOKENS, temperature=0.0, seed=0))
    t1, at1 = stop_place(chat_path, im_end)
    t2, at2 = stop_place(plain_path, eos)
    # the two swaps must not touch each other's path before its stop
    assert t1 != t2 and not {t2, eos} & set(chat_path[:at1 + 1]) and not {t1, im_end} & set(plain_path[:at2 + 1])
    swap_head_rows(base, t1, im_end)
    swap_head_rows(base, t2, eos)
    # the same swaps in a copy of the model dir for vLLM (the trainer's base now holds multi-LoRA wrappers)
    model_dir = tmp_path_factory.mktemp("tiny-qwen2-swapped")
    for f in Path(source.path_or_id).iterdir():
        shutil.copy(f, model_dir / f.name)
    weights = load_file(str(model_dir / "model.safetensors"))
    head = weights["lm_head.weight"]
    head[[t1, im_end]], head[[t2, eos]] = head[[im_end, t1]], head[[eos, t2]]
    save_file(weights, str(model_dir / "model.safetensors"))
    backend = VllmBackend(trainer, str(model_dir), tmp_path_factory.mktemp("sync"), vllm_max_loras(2), 8,
                          max_model_len=256, dtype="float32")
    expected = {"chat": chat_path[:at1] + [im_end], "plain": plain_path[:at2] + [eos]}
    yield backend, trainer, (chat, plain), expected
    backend.close()


def test_vllm_serves_qwen2_with_its_biases_and_untied_head(served):
    backend, trainer, _, _ = served
    hf = backend.engine.llm_engine.vllm_config.model_config.hf_config
    assert hf.model_type == "qwen2" and hf.tie_word_embeddings is False and hf.num_key_value_heads < hf.num_attention_heads
    served_weights = load_file(str(Path(backend.engine.llm_engine.vllm_config.model_config.model) / "model.safetensors"))
    assert {f"model.layers.0.self_attn.{p}_proj.bias" for p in "qkv"} <= set(served_weights) and "lm_head.weight" in served_weights
    assert chat_template.stop_token_ids(trainer.tokenizer) == trainer.tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])


def test_chat_stops_at_im_end_and_a_base_prompt_at_endoftext_where_the_model_says_them(served):
    backend, trainer, (chat, plain), expected = served
    got = [g.completion_ids for g in backend.generate([chat, plain], ["A", None], TOKENS, temperature=0.0, seed=0)]
    assert got == [expected["chat"], expected["plain"]]
    ref = [g.completion_ids for g in trainer.generate([chat, plain], ["A", None], TOKENS, temperature=0.0, seed=0)]
    assert ref == got


def test_greedy_tokens_equal_the_trainers_for_an_adapter_and_the_base_in_one_batch(served):
    backend, trainer, (chat, plain), _ = served
    rows, adapters = [chat, plain, chat, plain], [None, "A", "A", None]
    got = [g.completion_ids for g in backend.generate(rows, adapters, TOKENS, temperature=0.0, seed=0)]
    assert got == [g.completion_ids for g in trainer.generate(rows, adapters, TOKENS, temperature=0.0, seed=0)]
    assert got[0] != got[2], "adapter A changes the chat answer (else this shows nothing)"
