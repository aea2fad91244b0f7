"""The completion-only log-prob path (LM head on completion positions) equals the full-sequence computation."""

import pytest
import torch
from torch.nn.utils.rnn import pad_sequence

from populora.platform.backends import LoraSpec, MultiLoraBackend, PeftBackend, logprobs
from tolerance import assert_close

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9], [7, 8], [9, 10, 11], [3, 3, 3, 3, 3, 3]]
COMPLETIONS = [[6, 7], [9, 10, 11, 12, 13, 14, 15], [13], [4, 5, 6]]


def full_sequence_token_stats(logits_forward, pad_token_id, prompt_ids, completion_ids, max_len=1024):
    """The previous implementation: lm_head and a float32 log-softmax + entropy over every position, then slice."""
    seqs, starts = [], []
    for p, c in zip(prompt_ids, completion_ids):
        ids = (p + c)[-max_len:]
        seqs.append(torch.tensor(ids, dtype=torch.long))
        starts.append(len(ids) - len(c))
    input_ids = pad_sequence(seqs, batch_first=True, padding_value=pad_token_id)
    attn = pad_sequence([torch.ones(len(s), dtype=torch.long) for s in seqs], batch_first=True)
    logp_all = torch.log_softmax(logits_forward(input_ids, attn)[:, :-1].float(), dim=-1)
    token_logp = logp_all.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    token_ent = -(logp_all.exp() * logp_all).sum(-1)
    T = max(len(c) for c in completion_ids)
    logp, ent, mask = torch.zeros(len(seqs), T), torch.zeros(len(seqs), T), torch.zeros(len(seqs), T)
    for i, (start, c) in enumerate(zip(starts, completion_ids)):
        n = len(seqs[i]) - start
        logp[i, :n] = token_logp[i, start - 1:start - 1 + n]
        ent[i, :n] = token_ent[i, start - 1:start - 1 + n]
        mask[i, :n] = 1.0
    return logp, ent, mask


@pytest.fixture
def multi(tiny_model):
    model, tok = tiny_model
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=4), initial_slots=2)
    torch.manual_seed(0)
    for n in ("m0", "m1"):
        backend.add_adapter(n, seed=1)
        with torch.no_grad():
            for p in backend.parameters(n):
                p.normal_(0, 0.1)
    yield backend
    backend.unwrap()


def _loss(logp, ent, mask):
    weights = torch.tensor([1.0, -0.5, 2.0, 0.3])[:, None]
    return ((weights * logp - 0.1 * ent) * mask).sum()


@pytest.mark.parametrize("max_len", [1024, 8])  # 8: rows cut from the left
def test_completion_positions_equal_the_full_sequence_values_and_grads(multi, max_len):
    rows = ["m0", "m1", "m0", None]  # different members and the bare base in one batch, every length different
    pad = multi.tokenizer.pad_token_id

    def full_logits(ids, attn):
        multi.router.index = multi._slot_index(rows)
        try:
            return multi.base_model(input_ids=ids, attention_mask=attn).logits
        finally:
            multi.router.index = None

    ref = full_sequence_token_stats(full_logits, pad, PROMPTS, COMPLETIONS, max_len)
    _loss(*ref).backward()
    ref_grads = [p.grad.clone() for p in multi._params()]
    for p in multi._params():
        p.grad = None
    got = logprobs.token_stats(lambda ids, attn: multi._forward_rows(rows, ids, attn), multi._head, pad, multi.device,
                               PROMPTS, COMPLETIONS, max_len, entropy="grad")
    # the two paths differ in the LM head's grouping and in the log-softmax / entropy sums over the vocabulary:
    # the longest reduction whose order differs (tests/tolerance.py)
    vocab = multi.base_model.config.vocab_size
    for g, r, what in zip(got[:2], ref[:2], ("logp", "entropy")):
        assert_close(g, r, vocab, what)
    assert torch.equal(got[2], ref[2])
    _loss(*got).backward()
    for p, r in zip(multi._params(), ref_grads):
        assert_close(p.grad, r, vocab, "grad")
    assert any(r.abs().max() > 0 for r in ref_grads)


def test_peft_backend_equals_the_full_sequence_computation(tiny_model):
    model, tok = tiny_model
    peft = PeftBackend(model, tok, LoraSpec(rank=4))
    try:
        peft.add_adapter("m0", seed=0)
        with torch.no_grad():
            for p in peft.parameters("m0"):
                p.normal_(0, 0.1)
        for adapter in ("m0", None):
            def full_logits(ids, attn):
                peft.model.set_adapter("m0")
                if adapter is None:
                    with peft.model.disable_adapter():
                        return peft.model(input_ids=ids, attention_mask=attn).logits
                return peft.model(input_ids=ids, attention_mask=attn).logits

            ref_logp, _, ref_mask = full_sequence_token_stats(full_logits, tok.pad_token_id, PROMPTS, COMPLETIONS)
            logp, mask = peft.sequence_logprobs(adapter, PROMPTS, COMPLETIONS)
            assert torch.equal(mask, ref_mask)
            assert_close(logp, ref_logp, model.config.vocab_size, f"logp of {adapter}")  # head and log-softmax order
    finally:
        peft.model.unload()


def test_models_that_transform_their_logits_are_refused():
    class Config:
        final_logit_softcapping = 30.0

    class Softcapped(torch.nn.Module):
        config = Config()

    with pytest.raises(NotImplementedError, match="final_logit_softcapping"):
        logprobs.decoder_and_head(Softcapped())


def test_chunked_head_gives_the_same_values_and_grads(multi, monkeypatch):
    """Long completions go through the LM head in checkpointed chunks (one chunk's (B, t, V) logits at a time):
    the values and gradients are those of the whole completion at once."""
    rows, pad = ["m0", "m1", None], multi.tokenizer.pad_token_id
    prompts = [[1, 2, 3], [4, 5], [6]]
    completions = [list(range(7, 7 + n)) for n in (21, 9, 17)]  # 24 positions padded: 3 chunks of 8

    def run(chunk):
        monkeypatch.setattr(logprobs, "CHUNK", chunk)
        for p in multi._params():
            p.grad = None
        out = logprobs.token_stats(lambda ids, attn: multi._forward_rows(rows, ids, attn), multi._head, pad,
                                   multi.device, prompts, completions, 1024, entropy="grad")
        weights = torch.tensor([1.0, -0.5, 2.0])[:, None]
        ((weights * out[0] - 0.1 * out[1]) * out[2]).sum().backward()
        return out, [p.grad.clone() for p in multi._params()]

    (whole, whole_grads), (chunked, chunked_grads) = run(256), run(8)
    # Chunking changes only how reductions are grouped: a value goes through the head's matmul (hidden_size terms,
    # blocked differently for a (B, 8, V) chunk than for (B, 24, V)); a LoRA gradient element sums over every
    # position of the batch, in chunks or at once. Tolerances: eps * that length * the tensor's scale
    # (tests/tolerance.py); a lost or doubled chunk would be off by the size of the gradient itself.
    hidden, positions = multi.base_model.config.hidden_size, len(rows) * max(len(p) + len(c) for p, c in
                                                                              zip(prompts, completions))
    for a, b, what in zip(whole, chunked, ("logp", "entropy", "mask")):
        assert_close(b, a, hidden, what)
    for i, (a, b) in enumerate(zip(whole_grads, chunked_grads)):
        assert a.abs().max() > 0, f"parameter {i} got no gradient"
        assert_close(b, a, positions, f"gradient of parameter {i}")
    with torch.no_grad():  # without gradients: plain chunks, same values
        monkeypatch.setattr(logprobs, "CHUNK", 8)
        logp, mask = logprobs.sequence_logprobs(lambda ids, attn: multi._forward_rows(rows, ids, attn), multi._head,
                                                pad, multi.device, prompts, completions)
    assert torch.equal(mask, whole[2])
    assert_close(logp, whole[0], hidden, "logp without gradients")
