"""One train step of batched multi-LoRA split over data-parallel workers, equal to the same step on one.

The driver cuts each adapter's rollouts into mini-batches exactly as one process would (``mini_batch_slices``) and
deals each mini-batch's rows over the workers (``shard``). Each worker then runs every mini-batch of every adapter,
rows or not, in the same order:

    loss_w = sum over its rows of sum_t term_t / T_global(adapter, mini-batch)     (token mean of the WHOLE batch)
    grad   = all_reduce_SUM(grad_w)                                                (= the one-process gradient)

then clips and steps every member of the mini-batch. Each worker's loss is normalised by the global token count,
not its own, so the sum over workers is the one-process token mean (a mean of per-worker means would weight a
worker's tokens by how few it got). Clipping sees the reduced gradient, so every worker computes the same norm
and the same AdamW step, and adapters and optimizer moments stay identical on every worker.

The stats come back per worker as partial ``Tally`` sums; ``merge_tallies`` adds them up on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from populora.platform.backends.base import TrainSample
from populora.platform.backends.policy_loss import Tally, UpdateSpec, mini_batch_slices


@dataclass
class MiniBatch:
    """One worker's part of one adapter's mini-batch: its rows (indices into its own sample list) and the whole
    mini-batch's size, which normalises the loss."""

    rows: list[int]
    rollouts: int        # rows of the whole mini-batch, all workers
    tokens: int          # completion tokens of the whole mini-batch, all workers


def shard(batches: dict[str, list[TrainSample]], workers: int,
          mini_batches: int) -> list[tuple[dict[str, list[TrainSample]], dict[str, list[MiniBatch]]]]:
    """Per worker: (its samples per adapter, its part of each adapter's mini-batches). Every worker gets every
    adapter and every mini-batch (maybe with no rows) since each takes part in every all-reduce and step.
    Rows of a mini-batch are dealt round-robin in order of length, so each worker gets a like share of tokens.

    >>> s = [TrainSample([1], [2] * n, 1.0) for n in (1, 2, 3, 4, 5)]
    >>> parts = shard({"T0": s}, 2, 2)
    >>> [[len(x.completion_ids) for x in samples["T0"]] for samples, _ in parts]
    [[1, 3, 5], [2, 4]]
    >>> [[(m.rows, m.rollouts, m.tokens) for m in layout["T0"]] for _, layout in parts]
    [[([0, 1], 3, 6), ([2], 2, 9)], [([0], 3, 6), ([1], 2, 9)]]
    """
    out = [({}, {}) for _ in range(workers)]
    for name, samples in batches.items():
        if not samples:
            continue
        for samples_w, layout_w in out:
            samples_w[name], layout_w[name] = [], []
        for part in mini_batch_slices(len(samples), mini_batches):
            tokens = sum(len(samples[i].completion_ids) for i in part)
            by_length = sorted(part, key=lambda i: -len(samples[i].completion_ids))
            for w, (samples_w, layout_w) in enumerate(out):
                mine = by_length[w::workers]
                layout_w[name].append(MiniBatch(list(range(len(samples_w[name]), len(samples_w[name]) + len(mine))),
                                                len(part), tokens))
                samples_w[name].extend(samples[i] for i in sorted(mine))
    return out


def train_shard(ml, batches: dict[str, list[TrainSample]], layout: dict[str, list[MiniBatch]], all_reduce,
                micro_batch: int = 4, max_len: int = 1024, grad_clip: float = 1.0, kl_coef: float = 0.0,
                log_kl: bool = True, **clipped) -> dict[str, Tally]:
    """``MultiLoraBackend.train_step`` (``ml``) on this worker's rows, gradients summed over workers by
    ``all_reduce(flat_tensor)`` (in place, SUM) before each clipped optimizer step. Returns partial tallies."""
    spec = UpdateSpec(micro_batch, max_len, grad_clip, kl_coef, log_kl, **clipped)
    later = [(n, i) for n, mbs in layout.items() for mb in mbs[1:] for i in mb.rows]
    old = ml._old_logprobs(batches, later, spec)  # the sampling policy, before any step (local rows only)
    tallies = {n: Tally(sum(mb.tokens for mb in mbs), sum(mb.rollouts for mb in mbs), spec.needs_base)
               for n, mbs in layout.items()}
    length = lambda r: len(batches[r[0]][r[1]].prompt_ids) + len(batches[r[0]][r[1]].completion_ids)
    for j in range(max((len(mbs) for mbs in layout.values()), default=0)):
        members = [n for n in layout if j < len(layout[n])]
        n_tokens = {n: layout[n][j].tokens for n in members}
        for n in members:
            tallies[n].start(layout[n][j].rollouts, n_tokens[n])
        rows = sorted(((n, i) for n in members for i in layout[n][j].rows), key=length)
        params = ml._params()
        for p in params:
            p.grad = None
        for k in range(0, len(rows), spec.micro_batch):
            ml._micro_step(rows[k:k + spec.micro_batch], batches, old if j else None, n_tokens, tallies, spec)
        slots = [ml.slots[n] for n in members]
        reduce_slot_grads(params, slots, all_reduce)
        norms = ml.optimizer.clip_(slots, spec.grad_clip)
        ml.optimizer.step(slots)
        for n in members:
            tallies[n].end(norms[ml.slots[n]])
    return tallies


def reduce_slot_grads(params: list[torch.Tensor], slots: list[int], all_reduce) -> None:
    """Sum the members' slot gradients over workers in one collective: a worker that had no rows (no backward)
    sends zeros. Only the stepped slots travel (the population's other adapters have no gradient here)."""
    index = torch.tensor(slots, device=params[0].device)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.index_select(0, index).flatten() for p in params])
    all_reduce(flat)
    start = 0
    for p in params:
        size = p.grad[0].numel() * len(slots)
        p.grad.index_copy_(0, index, flat[start:start + size].view(len(slots), *p.grad.shape[1:]))
        start += size


def merge_tallies(parts: list[Tally]) -> Tally:
    """One adapter's tally from every worker's partial one: sums add up, ``ratio_dev`` is the max, the sizes
    (global on every worker) and the grad norm (computed after the all-reduce, equal on every worker) are kept.

    >>> a, b = Tally(10, 4), Tally(10, 4)
    >>> for t, (loss, dev) in ((a, (0.5, 0.1)), (b, (0.25, 0.3))):
    ...     t.start(4, 10); t.mini_batches[-1].update(loss=loss, ratio_dev=dev); t.end(2.0); t.entropy_sum = 1.0
    >>> m = merge_tallies([a, b]).mini_batches[0]
    >>> m["loss"], m["ratio_dev"], m["grad_norm"]
    (0.75, 0.3, 2.0)
    """
    first = parts[0]
    out = Tally(first.tokens, first.rollouts, first.has_kl)
    for j, mb in enumerate(first.mini_batches):
        merged = dict(mb)
        for key in ("loss", "kl", "clip_frac"):
            merged[key] = sum(p.mini_batches[j][key] for p in parts)
        merged["ratio_dev"] = max(p.mini_batches[j]["ratio_dev"] for p in parts)
        out.mini_batches.append(merged)
    out.kl_sum = sum(p.kl_sum for p in parts)
    out.entropy_sum = sum(p.entropy_sum for p in parts)
    out.clipped = sum(p.clipped for p in parts)
    return out
