"""Per-token log-probs (and entropies) of completions given prompts, from any forward pass: the update's, the
KL's and the PPO ratio's input.

The forward returns the decoder's final hidden states and the LM head is applied to the completion positions
only: prompts are long and completions short, and the (B, T, V) logits with their float32 log-softmax and
entropy over every prompt position were most of the update's time and memory (docs/performance.md). Rows are
right-padded, so every real token keeps the positions and attention of an unpadded forward.

Long completions go through the head in chunks of ``CHUNK`` positions: at paper scale (2,048-token answers,
a 152k vocabulary) one fp32 (B, T, V) log-softmax is 5 GB at B=4, and the entropy bonus kept a second one for
the backward. With gradients each chunk is checkpointed (its logits are rebuilt in the backward, one more head
matmul per token), so only one chunk's logits exist at a time.

``temperature`` is the one parameter that says which distribution the log-probs are of: the logits are divided by
it before the softmax, as veRL's actor does with the rollout temperature (AZR 41ed983
``verl/verl/workers/actor/dp_actor.py:100,136``, ``logits.div_(temperature)``). The update passes the temperature the
rollouts were sampled at (``UpdateSpec.temperature``, from ``tasks.temperature``), so ratio, entropy and KL are of
the policy that produced the samples; 1.0 (the default) is the model's own distribution (evolution's probes).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.checkpoint import checkpoint

CHUNK = 256  # completion positions per head chunk (a multiple of 8, see token_stats)

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (input_ids, attention_mask), both (B, T) -> hidden (B, T, H)
Head = Callable[[torch.Tensor], torch.Tensor]                    # hidden (..., H) -> logits (..., V)

# Configs whose causal-LM forward does more than lm_head(hidden): their logits need the model's own forward.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def decoder_and_head(model) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(decoder, lm_head) of a Hugging Face causal LM (or a PEFT model around one): ``decoder(input_ids=,
    attention_mask=).last_hidden_state`` then ``lm_head`` is the model's own forward, logits = lm_head(hidden)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PeftModel: LoRA layers are in place
    config = getattr(inner, "config", None)
    transforms = [k for k in _LOGIT_TRANSFORMS if getattr(config, k, None) not in (None, 1, 1.0)]
    if transforms:
        raise NotImplementedError(f"{type(inner).__name__} transforms its logits ({', '.join(transforms)}); "
                                  "completion-only log-probs apply lm_head(hidden) only")
    return inner.get_decoder(), inner.get_output_embeddings()


def sequence_logprobs(forward: Forward, head: Head, pad_token_id: int, device, prompt_ids: list[list[int]],
                      completion_ids: list[list[int]], max_len: int = 1024,
                      temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, mask), both (B, T_completion), of softmax(logits / temperature). Sequences longer than ``max_len`` lose
    tokens from the left (prompt first); gradients flow through ``forward`` when grad is enabled."""
    logp, _, mask = token_stats(forward, head, pad_token_id, device, prompt_ids, completion_ids, max_len, entropy=None,
                                temperature=temperature)
    return logp, mask


def token_stats(forward: Forward, head: Head, pad_token_id: int, device, prompt_ids: list[list[int]],
                completion_ids: list[list[int]], max_len: int = 1024,
                entropy: str | None = "detached",
                temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(logp, entropy, mask), each (B, T_completion): log-prob of each sampled token and the entropy of the
    policy's distribution softmax(logits / temperature) at that position (zero past a row's completion).
    ``entropy``: None (not computed), "detached" (for logging only, no graph kept) or "grad" (the entropy bonus
    trains through it)."""
    if not temperature > 0:
        raise ValueError(f"temperature {temperature}: log-probs are of softmax(logits / temperature), so it must be > 0 "
                         "(greedy decoding has no log-probs to train on)")
    seqs, starts = [], []
    for p, c in zip(prompt_ids, completion_ids):
        ids = (p + c)[-max_len:]
        seqs.append(torch.tensor(ids, dtype=torch.long))
        starts.append(len(ids) - len(c))  # first completion token; position start - 1 predicts it
    input_ids = pad_sequence(seqs, batch_first=True, padding_value=pad_token_id).to(device)
    attn = pad_sequence([torch.ones(len(s), dtype=torch.long) for s in seqs], batch_first=True).to(device)
    T_c = max(len(c) for c in completion_ids)
    # Positions padded to a multiple of 8: BLAS rounds a row of the head's matmuls alike whatever the batch around it
    # only in full row blocks, and a row's log-probs must not depend on its batch-mates (multi-LoRA equals PEFT).
    steps = torch.arange(-(-T_c // 8) * 8)                                                  # (Tp,)
    mask = steps[None, :] < torch.tensor([len(c) for c in completion_ids])[:, None]         # (B, Tp)
    pos = torch.tensor(starts)[:, None] - 1 + torch.where(mask, steps, 0)                   # (B, Tp): predicting positions
    pos, mask = pos.to(device), mask.to(device)
    hidden = forward(input_ids, attn)                                                       # (B, T, H)
    h = hidden.gather(1, pos[..., None].expand(-1, -1, hidden.shape[-1]))                  # (B, Tp, H)
    targets = input_ids.gather(1, pos + 1)                                                  # (B, Tp)
    grad_entropy = torch.is_grad_enabled() and entropy == "grad"
    parts = []
    for c in range(0, h.shape[1], CHUNK):
        args = (head, h[:, c:c + CHUNK], targets[:, c:c + CHUNK], entropy is not None, grad_entropy, temperature)
        # one chunk needs no checkpoint (short completions: as before); several keep only one chunk's logits
        many = torch.is_grad_enabled() and h.shape[1] > CHUNK
        parts.append(checkpoint(_head_stats, *args, use_reentrant=False) if many else _head_stats(*args))
    token_logp, token_ent = torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 1)  # (B, Tp)
    logp = torch.where(mask, token_logp, 0.0)[:, :T_c]
    ent = torch.where(mask, token_ent, 0.0)[:, :T_c] if entropy is not None else None       # (B, T_c)
    return logp, ent, mask[:, :T_c].float()


def _head_stats(head: Head, h: torch.Tensor, targets: torch.Tensor, want_entropy: bool, grad_entropy: bool,
                temperature: float = 1.0):
    """(log-prob of each target, entropy) for one chunk of positions, both (B, t); h (B, t, H), targets (B, t)."""
    logits = head(h).float()                                                                # (B, t, V)
    if temperature != 1.0:  # the sampling distribution (dp_actor.py:136); 1.0 skips a (B, t, V) copy
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)                                            # (B, t, V)
    token_logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)                        # (B, t)
    if not want_entropy:
        return token_logp, torch.zeros_like(token_logp)
    with torch.set_grad_enabled(torch.is_grad_enabled() and grad_entropy):
        ent = -(logp_all.exp() * logp_all).sum(-1)                                          # (B, t)
    return token_logp, ent


@torch.no_grad()
def next_token_kl(forward_p: Forward, forward_q: Forward, head: Head, pad_token_id: int, device,
                  prompt_ids: list[list[int]]) -> float:
    """Mean KL(p || q) of the next-token distributions of two policies at every position of the prompts (the
    functional distance evolution logs per operator): one forward of each, padding excluded."""
    seqs = [torch.tensor(p, dtype=torch.long) for p in prompt_ids]
    input_ids = pad_sequence(seqs, batch_first=True, padding_value=pad_token_id).to(device)        # (B, T)
    attn = pad_sequence([torch.ones(len(s), dtype=torch.long) for s in seqs], batch_first=True).to(device)
    logp = torch.log_softmax(head(forward_p(input_ids, attn)).float(), dim=-1)                   # (B, T, V)
    logq = torch.log_softmax(head(forward_q(input_ids, attn)).float(), dim=-1)
    kl = (logp.exp() * (logp - logq)).sum(-1)                                                    # (B, T)
    mask = attn.to(kl.dtype)
    return max(0.0, float((kl * mask).sum() / mask.sum()))  # KL >= 0: float32 rounding gives ~-1e-8 for twins
