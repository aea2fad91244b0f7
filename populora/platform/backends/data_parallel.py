"""Data-parallel model workers on Ray: every worker holds the base and every adapter, every GPU works on every step.

``ray.placement: by_member`` (ray.py) gives each worker some members, so a member never uses more than one GPU
and the single-agent baseline uses one. Here (``ray.placement: data_parallel``) N workers each hold the frozen base
and all adapters (a population of LoRAs is small: ~1.3 GB at r16 on a 7B base), and every phase's rows are dealt
evenly over the workers whatever their adapter:

* generation: a call's rows go round-robin in order of prompt length; row i samples from its own seed
  (``generation.row_seeds`` by its place in the whole call), so 1 or N workers give the same completions
  (seeded_sampling.py on torch; per-request seeds on vLLM, one engine per worker, asleep while it trains);
* training: each adapter's mini-batches are cut as one process cuts them and dealt over the workers; gradients
  are all-reduced (SUM, each worker's loss over the global token count) before every clipped AdamW step, so every
  worker's adapters and optimizer moments stay identical (shard_update.py);
* adapter state, optimizer state and saved adapters are read from rank 0 (evolution and checkpoints run on the
  driver from rank 0's copy); what the driver sets (an evolved child, a restored checkpoint) goes to every worker.

The process group is plain ``torch.distributed`` (gloo on CPU, NCCL on GPUs), met as Ray Train meets its own:
rank 0 reports its node IP and a free port, every worker joins at ``tcp://ip:port`` with its rank, the world size
and a timeout (ray/train/torch/config.py ``_setup_torch_process_group``, ray/train/_internal/utils.py
``get_address_and_port``, Ray 2.60). The group is not torch.distributed's default one: a vLLM engine running
inline in the worker (vllm.py, the default on vLLM's CPU build) has set that up for itself (world size 1), so each
worker builds its own gloo or NCCL group on a store of its own (``torch.distributed.rendezvous``), as vLLM builds
its stateless groups (vllm/distributed/utils.py ``stateless_init_torch_distributed_process_group``), and the
all-reduce goes through it alone. ``ray.util.collective`` was not used: its gloo group needs ``pygloo`` (not
shipped with ray) and its NCCL group ``cupy``.

A worker lost or failing mid-call ends the call at once (the driver waits on every worker, not in order), kills the
others (whose adapters may now differ) and raises ``WorkerLost``: the run ends FAILED with its resume line, never
continuing on diverged workers. Adapter dirs and checkpoints are written by rank 0: on a multi-node cluster
``output_dir`` must be on storage every node sees (NFS, a mounted bucket), as with by_member.
"""

from __future__ import annotations

import socket
from pathlib import Path

import torch

from populora.platform.backends import generation, seeded_sampling, shard_update
from populora.platform.backends.base import Generation, LoraSpec, TrainSample
from populora.platform.backends.optimizer import AdamConfig
from populora.platform.backends.policy_loss import UpdateSpec
from populora.platform.backends.ray import RayError, _ModelWorker
from populora.platform.backends.vllm import VllmBackend

CLOSE_TIMEOUT_S = 60  # for the workers to stop their engines at the run's end (vLLM's own shutdown takes ~5 s)
COLLECTIVE_TIMEOUT_S = 1800  # Ray Train's default; the driver kills the group far sooner when a worker is lost


class WorkerLost(RayError):
    """A data-parallel worker died or failed mid-call: the others cannot go on without it (their gradients are
    all-reduced with its), so the run stops and resumes from its last checkpoint."""


class _DataParallelWorker(_ModelWorker):
    """Runs inside a Ray actor: rank ``rank`` of ``world``, a MultiLoraBackend (``trainer``) over its own copy of
    the base, and on GPUs its own vLLM engine (``backend``, the trainer behind it) when ``vllm`` says so."""

    def __init__(self, model: dict, spec: LoraSpec, slots: int, gpus: float, rank: int, world: int,
                 vllm: dict | None = None):
        super().__init__(model, spec, slots, gpus)
        self.trainer, self.rank, self.world = self.backend, rank, world
        self.rows = {"generated": 0, "trained": 0}  # this worker's share, for where() (tests, bench scale)
        if vllm is not None:
            self.backend = VllmBackend(self.trainer, vllm["model_path"], Path(vllm["sync_dir"]) / f"rank{rank}",
                                       vllm["max_loras"], spec.rank, vllm["gpu_memory"], vllm["max_model_len"],
                                       model.get("dtype", "auto"), vllm.get("engine", "auto"))
        self.group = None  # the gradient all-reduce's own process group (join)

    def where(self) -> dict:
        import os

        import ray

        return {"rank": self.rank, "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "device": str(self.trainer.device),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "rows": dict(self.rows)}

    def rendezvous(self) -> str:
        """Rank 0: the TCP address of the process group's store (this node's IP, a free port)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return f"tcp://{ray.util.get_node_ip_address()}:{port}"

    def join(self, url: str, timeout_s: float = COLLECTIVE_TIMEOUT_S) -> str:
        """This worker's place in the gradient all-reduce's own group (not torch.distributed's default one, which an
        inline vLLM engine holds): a store at ``url`` (rank 0 serves it), then gloo or NCCL over it."""
        from datetime import timedelta

        import torch.distributed as dist

        timeout = timedelta(seconds=timeout_s)
        store, _, _ = next(dist.rendezvous(url, self.rank, self.world, timeout=timeout))
        store = dist.PrefixStore("populora-data-parallel", store)
        if self.trainer.device.type == "cuda":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.group = dist.ProcessGroupNCCL(store, self.rank, self.world, options)
            return "nccl"
        self.group = dist.ProcessGroupGloo(store, self.rank, self.world, timeout)
        return "gloo"

    def generate_rows(self, prompts, adapters, seeds, max_new_tokens, temperature=1.0, top_p=1.0, stop=(),
                      batch_size=16) -> list[Generation]:
        self.rows["generated"] += len(prompts)
        if self.backend is not self.trainer:  # vLLM: one request per row, each with its own seed
            return self.backend.generate(prompts, adapters, max_new_tokens, temperature, top_p, stop=stop, seeds=seeds)
        return seeded_sampling.generate(self.trainer, prompts, adapters, seeds, max_new_tokens, temperature, top_p,
                                        stop, batch_size)

    def train_shard(self, batches: dict[str, list[TrainSample]], layout: dict, spec: UpdateSpec) -> dict:
        import torch.distributed as dist

        if self.backend is not self.trainer:  # torch needs the GPU vLLM holds; the trained adapters re-sync
            self.backend.sleep()
            self.backend.stale.update(layout)
        self.rows["trained"] += sum(len(v) for v in batches.values())
        options = dist.AllreduceOptions()
        options.reduceOp = dist.ReduceOp.SUM
        reduce = lambda flat: self.group.allreduce([flat], options).wait()
        return self.trainer.update(batches, layout, spec, reduce)

    def leave(self) -> None:
        self.group = None

    def close(self) -> None:
        """Stop this worker's vLLM engine (its engine-core process is this actor's child: ``ray.kill`` ends the
        actor at once, with no chance to stop it)."""
        if self.backend is not self.trainer:
            self.backend.close()


class DataParallelBackend:
    """The ``Backend`` protocol over N data-parallel workers; the driver keeps only the tokenizer.

    ``model`` says which base each worker loads (keys base, gguf_file, dtype, device, tiny_random,
    activation_checkpointing); ``vllm`` (None: torch generation) the engine each worker starts."""

    def __init__(self, ray, model: dict, tokenizer, spec: LoraSpec, workers: int, slots: int,
                 gpus_per_worker: float = 0, cpus_per_worker: float = 1.0, vllm: dict | None = None):
        self.ray, self.tokenizer, self.lora = ray, tokenizer, spec
        actor = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker)(_DataParallelWorker)
        self.workers = [actor.remote(model, spec, slots, gpus_per_worker, rank, workers, vllm) for rank in range(workers)]
        url = self._all([self.workers[0].rendezvous.remote()], "start")[0]
        self.collective = self._all([w.join.remote(url) for w in self.workers], "start")[0]
        self.names: list[str] = []

    # ------------------------------------------------------------------ calls on workers
    def _all(self, futures: list, what: str) -> list:
        """Every result, in order; the first failure (in whatever order they end) stops every worker."""
        rank = {f: i for i, f in enumerate(futures)}
        pending = list(futures)
        while pending:
            ready, pending = self.ray.wait(pending, num_returns=1)
            try:
                self.ray.get(ready[0])
            except Exception as err:
                self.shutdown()
                if what == "start":
                    raise RayError(f"data-parallel model worker {rank[ready[0]]} of {len(self.workers)} could not start "
                                   f"or join the process group: {type(err).__name__}: {err}") from err
                raise WorkerLost(f"data-parallel model worker {rank[ready[0]]} of {len(self.workers)} failed during "
                                 f"{what} ({type(err).__name__}: {str(err).strip().splitlines()[0][:300]}); the other "
                                 "workers were stopped, as their adapters can no longer be trusted to match. Resume the "
                                 "run from its last checkpoint (populora train --resume RUN_ID)") from err
        return self.ray.get(futures)

    def _everywhere(self, method: str, *args, what: str | None = None):
        refs = [self.ray.put(a) for a in args]  # one copy in the object store, not one per worker
        return self._all([w.call.remote(method, *refs) for w in self.workers], what or method)

    def _rank0(self, method: str, *args):
        return self._all([self.workers[0].call.remote(method, *args)], method)[0]

    def shutdown(self) -> None:
        for w in self.workers:
            self.ray.kill(w)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """The run's end: each worker stops its vLLM engine (waited on for ``timeout_s`` at most; a lost worker's
        engine went with it), then every worker is killed."""
        if not self.workers:
            return
        try:
            self.ray.wait([w.close.remote() for w in self.workers], num_returns=len(self.workers), timeout=timeout_s)
        finally:
            self.shutdown()
            self.workers = []

    def where(self) -> list[dict]:
        return self._all([w.where.remote() for w in self.workers], "where")

    # ------------------------------------------------------------------ adapters: on every worker, read from rank 0
    @property
    def adapters(self) -> list[str]:
        return list(self.names)

    def add_adapter(self, name: str, from_dir: str | Path | None = None, seed: int | None = None) -> None:
        self._everywhere("add_adapter", name, None if from_dir is None else str(from_dir), seed)
        self.names.append(name)

    def remove_adapter(self, name: str) -> None:
        self._everywhere("remove_adapter", name)
        self.names.remove(name)

    def adapter_state(self, name: str):
        return self._rank0("adapter_state", name)

    def adapter_states(self, name: str) -> list[dict]:
        """The adapter's tensors on every worker (the tests' and ``bench scale``'s check that none diverged)."""
        return self._all([w.call.remote("adapter_state", name) for w in self.workers], "adapter_state")

    def set_adapter_state(self, name: str, state) -> None:
        self._everywhere("set_adapter_state", name, state)

    def save_adapter(self, name: str, directory) -> Path:
        return Path(self._rank0("save_adapter", name, str(directory)))

    def init_optimizer(self, name: str, optim: AdamConfig) -> None:
        self._everywhere("init_optimizer", name, optim.adam())

    def optimizer_state(self, name: str) -> dict:
        return self._rank0("optimizer_state", name)

    def load_optimizer_state(self, name: str, state: dict) -> None:
        self._everywhere("load_optimizer_state", name, state)

    # ------------------------------------------------------------------ rows dealt over the workers
    def encode_chat(self, messages: list[dict], prefill: str = "") -> str:
        return generation.encode_chat(self.tokenizer, messages, prefill)

    def deal(self, n: int, lengths: list[int]) -> list[list[int]]:
        """Row indices per worker: round-robin in order of length (longest first), an even share of the work."""
        order = sorted(range(n), key=lambda i: -lengths[i])
        return [order[w::len(self.workers)] for w in range(len(self.workers))]

    def generate(self, prompts: list[str], adapters: list[str | None], max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None, stop: tuple[str, ...] = (),
                 batch_size: int = 16) -> list[Generation]:
        """Rows of any adapters over every worker; row i samples from seed ``row_seeds(seed, n)[i]`` wherever it
        runs (seed None: a fresh one from torch's RNG, as the local path draws from it)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()))
        seeds = generation.row_seeds(seed, len(prompts))
        rows = [(w, idx) for w, idx in enumerate(self.deal(len(prompts), [len(p) for p in prompts])) if idx]
        futures = [self.workers[w].generate_rows.remote([prompts[i] for i in idx], [adapters[i] for i in idx],
                                                        [seeds[i] for i in idx], max_new_tokens, temperature, top_p,
                                                        tuple(stop), batch_size)
                   for w, idx in rows]
        out: list[Generation | None] = [None] * len(prompts)
        for (_, idx), gens in zip(rows, self._all(futures, "generation")):
            for i, g in zip(idx, gens):
                out[i] = g
        return out

    def train_step(self, batches: dict[str, list[TrainSample]], micro_batch: int = 4, max_len: int = 1024,
                   grad_clip: float = 1.0, kl_coef: float = 0.0, log_kl: bool = True, **clipped) -> dict[str, dict]:
        """Every worker takes part (a worker without rows still sends zeros to each all-reduce and steps)."""
        if not any(batches.values()):
            return {}
        spec = UpdateSpec(micro_batch, max_len, grad_clip, kl_coef, log_kl, **clipped)
        parts = shard_update.shard(batches, len(self.workers), spec)
        results = self._all([w.train_shard.remote(s, layout, spec) for w, (s, layout) in zip(self.workers, parts)],
                            "the update")
        return {n: shard_update.merge_tallies([r[n] for r in results]).stats() for n in results[0]}

    def sequence_logprobs(self, adapter, prompt_ids, completion_ids, max_len: int = 1024, temperature: float = 1.0):
        """(logp, mask), (B, T): rows dealt over the workers, padded back to the longest completion."""
        rows = [(w, idx) for w, idx in enumerate(self.deal(len(prompt_ids), [len(c) for c in completion_ids])) if idx]
        results = self._all([self.workers[w].call.remote("sequence_logprobs", adapter, [prompt_ids[i] for i in idx],
                                                         [completion_ids[i] for i in idx], max_len, temperature)
                             for w, idx in rows], "log-probs")
        width = max(lp.shape[1] for lp, _ in results)
        logp, mask = torch.zeros(len(prompt_ids), width), torch.zeros(len(prompt_ids), width)
        for (_, idx), (lp, m) in zip(rows, results):
            logp[idx, :lp.shape[1]], mask[idx, :m.shape[1]] = lp, m.to(mask.dtype)
        return logp, mask

