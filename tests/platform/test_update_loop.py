"""The one mini-batch update loop (``MultiLoraBackend.update``) run as the batched backend runs it (one process,
``train_step``) and as each data-parallel worker runs it (``shard_update.shard`` + an all-reduce), without Ray:
workers are threads on their own copies of the tiny model, summing gradients through a barrier.

The reference is the one-process update: a single worker must give its weights and optimizer moments bit for bit,
two workers must give them up to summation order and hold bit-identical adapters (test_data_parallel.py checks
the same on real Ray workers over gloo; test_multilora.py checks the one-process update against PEFT)."""

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from populora.platform.backends import AdamConfig, LoraSpec, TrainSample
from populora.platform.backends.multilora import MultiLoraBackend
from populora.platform.backends.policy_loss import UpdateSpec
from populora.platform.backends.shard_update import merge_tallies, shard

# micro-token-mean with micro-batches of 2: every row's denominator depends on rows another worker holds
UPDATE = dict(micro_batch=2, max_len=64, grad_clip=0.5, kl_coef=0.05, log_kl=True, mini_batches=2, clip_ratio=0.2,
              entropy_coef=0.01, temperature=0.7, loss_agg="micro-token-mean", loss_micro_batch=2)
NAMES = ("T0", "S0", "idle")  # "idle" gets no rollouts: it must not move


def _batches() -> dict[str, list[TrainSample]]:
    """Uneven rollouts (7 and 4 rows of different lengths), so the workers' shares differ in rows and tokens."""
    g = torch.Generator().manual_seed(0)
    rows = lambda n: [TrainSample(torch.randint(5, 400, (3 + i % 4,), generator=g).tolist(),
                                  torch.randint(5, 400, (2 + (3 * i) % 7,), generator=g).tolist(),
                                  float(torch.randn((), generator=g))) for i in range(n)]
    return {"T0": rows(7), "S0": rows(4), "idle": []}


def _backend(tiny_model) -> MultiLoraBackend:
    model, tok = tiny_model
    backend = MultiLoraBackend(copy.deepcopy(model), tok, LoraSpec(rank=4), 2)
    for i, name in enumerate(NAMES):
        backend.add_adapter(name, seed=100 + i)
        backend.init_optimizer(name, AdamConfig(lr=1e-2))
    return backend


def _state(backend) -> dict:
    return {n: (backend.adapter_state(n), backend.optimizer_state(n)) for n in NAMES}


def _on_workers(tiny_model, workers: int) -> tuple[list[MultiLoraBackend], list[dict]]:
    """Two train steps on ``workers`` threads, each running the update loop on its shard with a SUM all-reduce."""
    backends = [_backend(tiny_model) for _ in range(workers)]
    barrier, sent = threading.Barrier(workers, timeout=120), [None] * workers

    def all_reduce(w):
        def reduce(flat):
            sent[w] = flat.clone()
            barrier.wait()
            total = sum(sent[1:], sent[0].clone())
            barrier.wait()  # every worker has read every part before any overwrites its own
            flat.copy_(total)
        return reduce

    def step(w, parts):
        samples, layout = parts[w]
        try:
            return backends[w].update(samples, layout, UpdateSpec(**UPDATE), all_reduce(w))
        except BaseException:
            barrier.abort()  # the other workers fail at their next wait instead of hanging
            raise

    stats = []
    with ThreadPoolExecutor(workers) as pool:
        for _ in range(2):
            parts = shard(_batches(), workers, UpdateSpec(**UPDATE))
            tallies = [f.result() for f in [pool.submit(step, w, parts) for w in range(workers)]]
            stats.append({n: merge_tallies([t[n] for t in tallies]).stats() for n in tallies[0]})
    return backends, stats


@pytest.fixture(scope="module")
def one_process(tiny_model):
    backend = _backend(tiny_model)
    before = _state(backend)
    stats = [backend.train_step(_batches(), **UPDATE) for _ in range(2)]
    return before, _state(backend), stats


def test_one_worker_with_the_all_reduce_hook_is_the_one_process_update_bit_for_bit(tiny_model, one_process):
    before, ref, ref_stats = one_process
    (backend,), stats = _on_workers(tiny_model, 1)
    assert stats == ref_stats
    for n in NAMES:
        (weights, optim), (ref_weights, ref_optim) = _state(backend)[n], ref[n]
        assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights), n
        assert optim["step"] == ref_optim["step"] == (0 if n == "idle" else 4)  # two optimizer steps per train step
        assert all(torch.equal(a, b) for key in ("exp_avg", "exp_avg_sq") for a, b in zip(optim[key], ref_optim[key]))
    assert all(torch.equal(v, before["idle"][0][k]) for k, v in ref["idle"][0].items())  # no rollouts: not moved


def test_two_workers_give_the_one_process_update_and_identical_adapters(tiny_model, one_process):
    before, ref, ref_stats = one_process
    backends, stats = _on_workers(tiny_model, 2)
    for step, theirs in zip(stats, ref_stats):
        assert step.keys() == theirs.keys() == {"T0", "S0"}
        for n in theirs:
            for mine, their in zip(step[n]["per_mini_batch"], theirs[n]["per_mini_batch"]):
                for key in ("loss", "kl", "grad_norm", "clip_frac", "ratio_dev", "tokens", "rollouts"):
                    assert mine[key] == pytest.approx(their[key], rel=1e-4, abs=1e-6), (n, key)
    for n in ("T0", "S0"):
        # AdamW divides by sqrt(v): where a gradient is ~0 its fp noise (summation order) moves a weight by up to lr,
        # so "equal" is relative to how far the step moved the weights (as in test_data_parallel.py)
        moved = max(float((v - before[n][0][k]).abs().max()) for k, v in ref[n][0].items())
        off = max(float((v - backends[0].adapter_state(n)[k]).abs().max()) for k, v in ref[n][0].items())
        assert moved > 1e-3 and off < 2e-3 * moved, (n, off, moved)
        first, second = backends[0].adapter_state(n), backends[1].adapter_state(n)
        assert all(torch.equal(first[k], second[k]) for k in first), n  # the all-reduced steps kept them identical
