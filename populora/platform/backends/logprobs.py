"""Per-token log-probs of completions given prompts, from any forward pass (the update's and the KL's input)."""

from __future__ import annotations

from typing import Callable

import torch
from torch.nn.utils.rnn import pad_sequence

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (input_ids, attention_mask), both (B, T) -> logits (B, T, V)


def sequence_logprobs(forward: Forward, pad_token_id: int, device, prompt_ids: list[list[int]],
                      completion_ids: list[list[int]], max_len: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, mask), both (B, T_completion). Sequences longer than ``max_len`` lose tokens from the left (prompt first);
    gradients flow through ``forward`` when grad is enabled."""
    seqs, starts = [], []
    for p, c in zip(prompt_ids, completion_ids):
        ids = (p + c)[-max_len:]
        seqs.append(torch.tensor(ids, dtype=torch.long))
        starts.append(len(ids) - len(c))
    input_ids = pad_sequence(seqs, batch_first=True, padding_value=pad_token_id).to(device)
    attn = pad_sequence([torch.ones(len(s), dtype=torch.long) for s in seqs], batch_first=True).to(device)
    logits = forward(input_ids, attn)  # (B, T, V)
    logp_all = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    token_logp = logp_all.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    T = max(len(c) for c in completion_ids)
    logp = torch.zeros(len(seqs), T, device=device)
    mask = torch.zeros(len(seqs), T, device=device)
    for i, (start, c) in enumerate(zip(starts, completion_ids)):
        n = len(seqs[i]) - start
        logp[i, :n] = token_logp[i, start - 1:start - 1 + n]
        mask[i, :n] = 1.0
    return logp, mask
