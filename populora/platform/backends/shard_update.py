"""One train step of batched multi-LoRA split over data-parallel workers, equal to the same step on one.

The driver cuts each adapter's rollouts into mini-batches exactly as one process would (``mini_batch_parts``, with
each row's loss denominator over the whole mini-batch, ``row_denominators``) and deals each mini-batch's rows over
the workers (``shard``). Each worker then runs the one update loop
(``MultiLoraBackend.update``, with an all-reduce) over every mini-batch of every adapter, rows or not, in the same order:

    loss_w = sum over its rows of sum_t term_t / denom(row, WHOLE mini-batch)     (e.g. token-mean: its token count)
    grad   = all_reduce_SUM(grad_w)                                                (= the one-process gradient)

then clips and steps every member of the mini-batch. Each worker's loss is normalised by the global token count,
not its own, so the sum over workers is the one-process token mean (a mean of per-worker means would weight a
worker's tokens by how few it got). Clipping sees the reduced gradient, so every worker computes the same norm
and the same AdamW step, and adapters and optimizer moments stay identical on every worker.

The stats come back per worker as partial ``Tally`` sums; ``merge_tallies`` adds them up on the driver.
"""

from __future__ import annotations

from populora.platform.backends.base import TrainSample
from populora.platform.backends.policy_loss import MiniBatch, Tally, UpdateSpec, mini_batch_parts, row_denominators
from populora.platform.backends.rollout_correction import MismatchTally


def shard(batches: dict[str, list[TrainSample]], workers: int,
          spec: UpdateSpec) -> list[tuple[dict[str, list[TrainSample]], dict[str, list[MiniBatch]]]]:
    """Per worker: (its samples per adapter, its part of each adapter's mini-batches). Every worker gets every
    adapter and every mini-batch (maybe with no rows) since each takes part in every all-reduce and step.
    Rows of a mini-batch are dealt round-robin in order of length, so each worker gets a like share of tokens.

    >>> s = [TrainSample([1], [2] * n, 1.0) for n in (1, 2, 3, 4, 5)]
    >>> parts = shard({"T0": s}, 2, UpdateSpec(mini_batches=2))
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
        for part in mini_batch_parts(samples, spec):
            tokens = sum(len(samples[i].completion_ids) for i in part)
            denom = dict(zip(part, row_denominators(part, samples, spec)))
            by_length = sorted(part, key=lambda i: -len(samples[i].completion_ids))
            for w, (samples_w, layout_w) in enumerate(out):
                mine = sorted(by_length[w::workers])
                layout_w[name].append(MiniBatch(list(range(len(samples_w[name]), len(samples_w[name]) + len(mine))),
                                                len(part), tokens, [denom[i] for i in mine]))
                samples_w[name].extend(samples[i] for i in mine)
    return out


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
    out.mismatch = MismatchTally.merged([p.mismatch for p in parts])
    return out
