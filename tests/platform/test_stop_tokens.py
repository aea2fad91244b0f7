"""Stopping at the end of a turn, in every backend: ``generation.stop_token_ids`` is the one owner.

The tokenizer stands in for Qwen2.5 *base*: the embedded SmolLM2 tokenizer has Qwen's ChatML template (turns
close with ``<|im_end|>``, id 2 here, 151645 in Qwen) and ``<|endoftext|>`` (id 0 here, 151643 in Qwen); with its
``eos_token`` set to ``<|endoftext|>``, as Qwen2.5-7B's generation config has it, EOS alone would let a
completion run on past ``<|im_end|>`` into an invented next turn."""

import copy

import pytest
import torch

from populora.platform.backends import generation

IM_END, ENDOFTEXT = 2, 0


@pytest.fixture(scope="module")
def qwen_base_like():
    from populora.platform.model.models import cached_source, load_tokenizer, resolve_source

    tok = copy.deepcopy(load_tokenizer(cached_source(resolve_source("embedded"), need_weights=False)))
    tok.eos_token = "<|endoftext|>"
    assert tok.convert_tokens_to_ids("<|im_end|>") == IM_END and tok.eos_token_id == ENDOFTEXT
    return tok


def test_stop_tokens_are_eos_and_the_templates_end_of_turn(qwen_base_like):
    assert generation.stop_token_ids(qwen_base_like) == [ENDOFTEXT, IM_END]
    instruct = copy.deepcopy(qwen_base_like)
    instruct.eos_token = "<|im_end|>"  # an instruct model whose EOS is the end of turn: listed once
    assert generation.stop_token_ids(instruct) == [IM_END]
    no_template = copy.deepcopy(qwen_base_like)
    no_template.chat_template = None
    assert generation.stop_token_ids(no_template) == [ENDOFTEXT]


def test_torch_generate_stops_at_end_of_turn_and_trims_after_it(qwen_base_like):
    """Every torch backend (PEFT, multi-LoRA, Ray workers) generates through ``generation.generate``: HF generate
    gets every stop id as ``eos_token_id``, and the completion ends at the first of them."""
    seen = {}

    def run_generate(enc, adapters, kwargs):  # HF generate's output: the prompt, then a turn and an invented one
        seen.update(kwargs)
        width = enc.input_ids.shape[1]
        tail = torch.tensor([[11, 12, IM_END, 13, 14]] * enc.input_ids.shape[0])
        return torch.cat([enc.input_ids, tail], dim=1)[:, :width + 5]

    gens = generation.generate(qwen_base_like, "cpu", run_generate, ["Hi", "Hello there"], [None, None], 8, seed=0)
    assert seen["eos_token_id"] == [ENDOFTEXT, IM_END]
    assert [g.completion_ids for g in gens] == [[11, 12, IM_END]] * 2


def test_real_hf_generate_stops_on_the_end_of_turn_token(tiny_model):
    """The tiny model, forced to say <|im_end|> as its third token: HF generate stops there for every row."""
    from populora.platform.backends import LoraSpec, MultiLoraBackend

    model, tok = tiny_model
    tok = copy.deepcopy(tok)
    tok.eos_token = "<|endoftext|>"
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=4), 1)
    try:
        calls = {"n": 0}

        def force(module, args, out):  # logits: <|im_end|> wins from the third generated token on
            calls["n"] += 1
            if calls["n"] >= 3:
                out.logits[:, -1, :] = -1e9
                out.logits[:, -1, IM_END] = 0
            return out

        handle = model.register_forward_hook(force)
        gens = backend.generate(["a", "b c"], [None, None], 12, temperature=1.0, seed=0)
        handle.remove()
        assert all(g.completion_ids[-1] == IM_END and len(g.completion_ids) <= 3 for g in gens), gens
    finally:
        backend.unwrap()
