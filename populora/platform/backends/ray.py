"""Scale-out with Ray: members spread over model-worker actors (sandbox checks over verifier actors: ray_verifier.py).

Each ``ModelWorker`` actor (one per GPU on a cluster) holds the frozen base and the batched multi-LoRA adapters of
the members assigned to it. ``RayBackend`` implements the ``Backend`` protocol and routes each call to the
owning worker(s); a generation or update touching several workers runs on all of them at once. With one worker
the batches are exactly those of the local path, so a seeded step gives the same result.

Adapter dirs are written by the worker that owns the member: on a multi-node cluster ``output_dir`` must be on
storage every node sees (NFS, a mounted bucket).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections import defaultdict
from pathlib import Path

import psutil
import torch

from populora.platform.jobs import reaper
from populora.platform.backends import checkpointing, generation
from populora.platform.backends.base import Generation, LoraSpec, TrainSample
from populora.platform.backends.multilora import MultiLoraBackend
from populora.platform.backends.optimizer import AdamConfig
from populora.platform.model.models import load_base, resolve_source
from populora.platform.ray_settings import PLACEMENTS, RayError, RaySettingError, check_ray, default_placement  # noqa: F401 - their names here too

log = logging.getLogger(__name__)

# A local Ray instance's raylet must register with its GCS within 30 s, a limit written into Ray itself
# (ray/_private/node.py, Node.__init__: ``raylet_start_wait_time_s = 30``, Ray 2.60) that no setting raises; on a
# loaded 2-core machine (a test suite, vLLM engines starting beside) it was seen to take longer. The start is tried
# this many times, the failed try's processes (GCS, raylet, ...) ended before the next.
LOCAL_START_TRIES = 3
LOCAL_START_TIMEOUT = "timed out during startup"
# Ray's GCS marks a node dead after 5 missed health checks 3 s apart (10 s timeout each; ray_config_def.h,
# health_check_*), and every actor on it dies with "Owner's node has crashed": seen on a local instance whose raylet
# was starved of CPU for that long (the paper path's resume at load average 33 on 2 cores). A local instance is this
# machine: its raylet is not lost to a network, so it gets 20 checks of 30 s (a raylet that really died still ends
# its workers, which the run sees at once).
LOCAL_HEALTH_CHECKS = {"health_check_failure_threshold": 20, "health_check_timeout_ms": 30000}
# Ray starts every worker (each actor) at niceness 15 (ray_config_def.h ``worker_niceness``; its job manager starts
# job supervisors at 0), so that a worker never slows its driver. Here the workers do the run's work (training,
# generation) while the driver mostly waits on them: beside two busy processes at niceness 0 on 2 cores an actor got
# ~1/30 of a core, and a data-parallel run of 2 workers took 277 s where it takes 98 s at niceness 0. A local
# instance's workers run at the niceness of every other process.
LOCAL_SYSTEM_CONFIG = {**LOCAL_HEALTH_CHECKS, "worker_niceness": 0}


def _start_local(ray, num_cpus: int | None) -> None:
    for attempt in range(1, LOCAL_START_TRIES + 1):
        before = reaper.children()
        try:
            # address "local": a new instance; with none Ray joins RAY_ADDRESS or the newest cluster `ray start`
            # left in /tmp/ray (ray/_private/services.py get_ray_address_from_environment), and num_cpus then fails
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                     _system_config=LOCAL_SYSTEM_CONFIG)
            return
        except Exception as err:  # noqa: BLE001 - Ray raises a bare Exception for this one
            if LOCAL_START_TIMEOUT not in str(err) or attempt == LOCAL_START_TRIES:
                raise
            left = [psutil.Process(pid) for pid in reaper.new_children(before) if psutil.pid_exists(pid)]
            reaper.end(left, grace=0)
            log.warning("Ray's local start timed out (try %d of %d; a loaded machine): ended its %d processes, "
                        "starting again", attempt, LOCAL_START_TRIES, len(left))


def init_ray(address: str, num_cpus: int | None = None):
    """``local`` starts a Ray instance in this process (``LOCAL_START_TRIES`` tries); ``auto`` or
    ``ray://host:port`` joins a cluster."""
    try:
        import ray
    except ImportError as err:
        raise RayError("Ray is not installed: pip install 'populora-platform[ray]' (or pip install 'ray[default]')") from err
    if not ray.is_initialized():
        # ray.init installs its own SIGTERM handler (SystemExit); keep the caller's (the trainer's: SIGTERM stops
        # the run like Ctrl-C, ending it KILLED rather than FAILED)
        on_sigterm = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
        if address == "local":
            _start_local(ray, num_cpus)
        else:
            ray.init(address=address, log_to_driver=False)
        if on_sigterm is not None:
            signal.signal(signal.SIGTERM, on_sigterm)
    return ray


class _ModelWorker:
    """Runs inside a Ray actor: a MultiLoraBackend over its own copy of the base model."""

    def __init__(self, model: dict, spec: LoraSpec, slots: int, gpus: float = 0):
        # 'auto' on a worker that reserved no GPU must not find one anyway (Ray does not hide them)
        device = "cpu" if model["device"] == "auto" and gpus <= 0 else model["device"]
        base, tok = load_base(resolve_source(model["base"], model.get("gguf_file")), model["dtype"],
                              device, model["tiny_random"])
        if model.get("activation_checkpointing"):
            checkpointing.enable(base)
        self.backend = MultiLoraBackend(base, tok, spec, slots)

    def where(self) -> dict:
        """Which GPU(s) Ray gave this worker and where its model is (scripts/gpu-smoke.sh check d)."""
        import ray

        return {"gpu_ids": [str(g) for g in ray.get_gpu_ids()], "device": str(self.backend.device),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def call(self, method: str, *args, **kwargs):
        # results leave the worker on the CPU: Ray pickles a CUDA tensor as CUDA storage, which lands on the
        # driver's cuda:0 (a CUDA context beside worker 0's) or fails to load on a head without a GPU
        return to_cpu(getattr(self.backend, method)(*args, **kwargs))


def to_cpu(obj):
    """``obj`` with every tensor inside (dicts, lists, tuples, nested) moved to the CPU.

    >>> import torch; to_cpu({"a": [torch.ones(1)], "b": (1, "x")})
    {'a': [tensor([1.])], 'b': (1, 'x')}
    """
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


class RayBackend:
    """The ``Backend`` protocol over ModelWorker actors; the driver keeps only the tokenizer.

    ``model`` says which base each worker loads: keys base, gguf_file, dtype, device, tiny_random.
    """

    def __init__(self, ray, model: dict, tokenizer, spec: LoraSpec, workers: int, slots: int,
                 gpus_per_worker: float = 0, cpus_per_worker: float = 1.0):
        self.ray, self.tokenizer, self.lora = ray, tokenizer, spec
        actor = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker)(_ModelWorker)
        self.workers = [actor.remote(model, spec, max(1, slots // workers + 1), gpus_per_worker) for _ in range(workers)]
        self.owner: dict[str, int] = {}

    def close(self) -> None:
        for w in self.workers:
            self.ray.kill(w)
        self.workers = []

    def _on(self, name: str, method: str, *args, **kwargs):
        return self.ray.get(self.workers[self.owner[name]].call.remote(method, *args, **kwargs))

    @property
    def adapters(self) -> list[str]:
        return list(self.owner)

    def add_adapter(self, name: str, from_dir: str | Path | None = None, seed: int | None = None) -> None:
        load = [list(self.owner.values()).count(i) for i in range(len(self.workers))]
        self.owner[name] = load.index(min(load))
        self._on(name, "add_adapter", name, None if from_dir is None else str(from_dir), seed)

    def remove_adapter(self, name: str) -> None:
        self._on(name, "remove_adapter", name)
        del self.owner[name]

    def adapter_state(self, name: str):
        return self._on(name, "adapter_state", name)

    def set_adapter_state(self, name: str, state) -> None:
        self._on(name, "set_adapter_state", name, state)

    def save_adapter(self, name: str, directory) -> Path:
        return Path(self._on(name, "save_adapter", name, str(directory)))

    def init_optimizer(self, name: str, optim: AdamConfig) -> None:
        self._on(name, "init_optimizer", name, optim.adam())

    def optimizer_state(self, name: str) -> dict:
        return self._on(name, "optimizer_state", name)

    def load_optimizer_state(self, name: str, state: dict) -> None:
        self._on(name, "load_optimizer_state", name, state)

    def encode_chat(self, messages: list[dict], prefill: str = "") -> str:
        return generation.encode_chat(self.tokenizer, messages, prefill)

    def generate(self, prompts: list[str], adapters: list[str | None], max_new_tokens: int, seed: int | None = None,
                 **kwargs) -> list[Generation]:
        """Rows go to their adapter's worker; base rows (every worker holds the base) are dealt round-robin, so
        step-0 seeding (hundreds of base proposals) uses every GPU. Worker w samples from ``seed + 1_000_003 w``: with one
        worker the rows and stream are the local path's."""
        rows = defaultdict(list)  # worker -> row indices, in order
        dealt = 0
        for i, a in enumerate(adapters):
            if a is None:
                rows[dealt % len(self.workers)].append(i)
                dealt += 1
            else:
                rows[self.owner[a]].append(i)
        futures = {w: self.workers[w].call.remote("generate", [prompts[i] for i in idx], [adapters[i] for i in idx],
                                                  max_new_tokens, seed=None if seed is None else seed + 1_000_003 * w, **kwargs)
                   for w, idx in rows.items()}
        out: list[Generation | None] = [None] * len(prompts)
        for w, gens in zip(futures, self.ray.get(list(futures.values()))):
            for i, g in zip(rows[w], gens):
                out[i] = g
        return out

    def train_step(self, batches: dict[str, list[TrainSample]], *args, **kwargs) -> dict[str, dict]:
        per_worker = defaultdict(dict)
        for name, samples in batches.items():
            per_worker[self.owner[name]][name] = samples
        results = self.ray.get([self.workers[w].call.remote("train_step", b, *args, **kwargs) for w, b in per_worker.items()])
        return {k: v for r in results for k, v in r.items()}

    def sequence_logprobs(self, adapter, prompt_ids, completion_ids, max_len: int = 1024, temperature: float = 1.0):
        worker = 0 if adapter is None else self.owner[adapter]
        return self.ray.get(self.workers[worker].call.remote("sequence_logprobs", adapter, prompt_ids, completion_ids,
                                                             max_len, temperature))
