"""The tiny Qwen2 model (``model.base: tiny-qwen2``, populora/platform/model/tiny_qwen2.py): Qwen2.5's family traits
(q/k/v biases, untied embeddings, GQA), its tokens and chat template, and generation that stops at ``<|im_end|>``
under the template and at ``<|endoftext|>`` for a base-style prompt on the torch backend (the real vLLM engine:
tests/vllm_real/test_qwen2.py)."""

from pathlib import Path

import pytest

from populora.platform.model import chat_template, tiny_qwen2
from populora.platform.backends import LoraSpec, MultiLoraBackend
from populora.platform.model.models import load_base, resolve_source
from stop_swap import stop_place, swap_head_rows

# Qwen2.5's template, one user turn (the text transformers writes with Qwen/Qwen2.5-7B's tokenizer_config.json)
QWEN_TURN = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
             "<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def qwen():
    model, tok = load_base(resolve_source(tiny_qwen2.NAME), device="cpu")
    return model, tok


def test_the_model_is_qwen2_with_biases_untied_embeddings_and_gqa(qwen):
    model, _ = qwen
    cfg, attn = model.config, model.model.layers[0].self_attn
    assert cfg.model_type == "qwen2" and type(model).__name__ == "Qwen2ForCausalLM"
    assert all(getattr(attn, p).bias is not None for p in ("q_proj", "k_proj", "v_proj")) and attn.o_proj.bias is None
    assert cfg.tie_word_embeddings is False
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert cfg.num_attention_heads == 2 * cfg.num_key_value_heads
    weights = Path(resolve_source(tiny_qwen2.NAME).path_or_id) / "model.safetensors"
    written = weights.stat().st_mtime_ns
    assert Path(resolve_source(tiny_qwen2.NAME).path_or_id) / "model.safetensors" == weights
    assert weights.stat().st_mtime_ns == written  # built once, then reused (every process, every Ray worker)


def test_the_tokenizer_has_qwens_tokens_template_and_two_stops(qwen):
    _, tok = qwen
    for t in tiny_qwen2.spec()["special_tokens"] + tiny_qwen2.spec()["added_tokens"]:
        assert len(tok(t, add_special_tokens=False).input_ids) == 1, t
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|endoftext|>", "<|endoftext|>", None)
    eos, im_end = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    assert eos != im_end and chat_template.end_of_turn_id(tok) == im_end
    assert chat_template.stop_token_ids(tok) == [eos, im_end]
    q = "Write f(x) = x + 1 in Python."
    text = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    assert text == QWEN_TURN.format(q=q)
    code = "def f(x):\n    return [x ** 2 for x in range(10)]  # 12345 ü\n"
    assert tok.decode(tok(code, add_special_tokens=False).input_ids) == code
    assert all(len(tok(d, add_special_tokens=False).input_ids) == 1 for d in "0123456789")  # Qwen splits digits


@pytest.mark.parametrize("style, stop", [("chat", "<|im_end|>"), ("base", "<|endoftext|>")])
def test_torch_generation_stops_at_the_stop_token_where_the_model_says_it(qwen, style, stop):
    """Greedy decoding of the unmodified model gives a path; with the LM-head rows of the path's k-th new token and
    ``stop`` swapped, generation must end exactly there with ``stop`` (tests/stop_swap.py), with and without LoRA."""
    model, tok = qwen
    stop_id = tok.convert_tokens_to_ids(stop)
    prompt = (tok.apply_chat_template([{"role": "user", "content": "Say hello."}], tokenize=False, add_generation_prompt=True)
              if style == "chat" else "def add(a, b):\n")
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=4), 2)
    backend.add_adapter("A", seed=1)
    try:
        for adapter in (None, "A"):
            path = backend.generate([prompt], [adapter], 24, temperature=0.0, seed=0)[0].completion_ids
            assert len(path) == 24, "the random model stopped by itself"
            t, at = stop_place(path, stop_id)
            swap_head_rows(model, t, stop_id)
            try:
                got = backend.generate([prompt], [adapter], 24, temperature=0.0, seed=0)[0].completion_ids
            finally:
                swap_head_rows(model, t, stop_id)
            assert got == path[:at] + [stop_id], (adapter, path, got)
    finally:
        backend.unwrap()
