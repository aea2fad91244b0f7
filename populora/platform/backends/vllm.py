"""vLLM for generation, torch for training: the paper-scale path on GPUs.

``VllmBackend`` holds a training backend (batched multi-LoRA by default). Generation goes to one vLLM engine
with ``enable_lora`` and one ``LoRARequest`` per member (``max_loras`` = population size); everything else
(updates, evolution, checkpoints) is the training backend's. Before a generation that follows an update or an
evolution, the changed adapters are written as PEFT dirs and given fresh LoRA ids, so vLLM loads the new weights
instead of its cached copy. vLLM is an optional extra: ``pip install 'populora-platform[vllm]'``.

vLLM and torch share one GPU and take turns: vLLM holds ``gpu_memory_utilization`` of it (its own copy of the
base, KV cache) while it generates, torch needs the room for the update's activations. So the first trainer-side
call after a generation (an update, an evolution, a log-prob forward) puts the engine to sleep (level 1: weights
to CPU RAM, KV cache dropped), and the next generation empties torch's allocator cache and wakes it up. The
planner counts the two as alternatives (``populora.platform.plan.memory_gb``). Sleep mode exists on CUDA, ROCm
and XPU only (vllm/platforms/interface.py ``is_sleep_mode_available``, 0.32.0); elsewhere (vLLM's CPU build) the
engine is built without it and never sleeps. A request sent to a sleeping engine is not refused: the engine core
pauses its scheduler (vllm/v1/engine/core.py ``sleep`` -> ``pause_scheduler``) and the request waits, so
``generate`` blocks until ``wake_up``; ``generate`` here always wakes the engine first.

Base rows beside adapters: vLLM maps a row without an adapter to LoRA index -1, and its CPU LoRA ops index the
stacked weights with it (vllm/lora/ops/torch_ops/lora_ops.py ``bgmv_shrink``), i.e. the last slot; the GPU
kernels skip -1 (open upstream fix for CPU: vllm-project/vllm PR 48421). A slot keeps its weights after its
adapter is removed (vllm/lora/model_manager.py ``_deactivate_adapter``), and a new adapter takes the lowest free
slot. So the engine gets ``max_loras`` = adapters + 1 (``factory.vllm_max_loras``), and a replaced or removed adapter's
old id is removed from the engine before its new one is loaded: the adapters then never reach the last slot,
which stays zero, and a base row is the base model on every platform.

Where the engine runs (``engine``): by default vLLM puts its engine core and its model worker in two processes of
their own, each importing vLLM and torch again (vLLM's CPU build turns its in-process executor into the
multi-process one unless ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, vllm/platforms/cpu.py). On a GPU that is what vLLM
is built and tested for (``process``). On vLLM's CPU build the engine runs inside the process that uses it instead
(``inline``: vLLM's own ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, engine core in-process, ``uni`` executor): the tiny
Qwen2 engine started in 13.7 s wall and ~20 s CPU, against 44 s and ~50 s in three processes (the model work is
under 2 s of either). ``auto`` (the default) is inline on vLLM's CPU build, its own processes elsewhere. Inline,
vLLM's worker sets up torch.distributed's default process group (world size 1, vllm/distributed/parallel_state.py)
and replaces ``torch.set_num_threads`` by a no-op in this process (vllm/v1/worker/cpu_worker.py): the
data-parallel workers' all-reduce has a group of its own (data_parallel.py), and nothing here sets torch's threads
after the engine starts.
"""

from __future__ import annotations

import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import torch

from populora.platform.jobs import reaper
from populora.platform.backends import generation
from populora.platform.backends.base import Backend, Generation, LoraSpec, TrainSample
from populora.platform.backends.optimizer import AdamConfig

log = logging.getLogger(__name__)

# The ranks vLLM's LoRA kernels are built for: vllm/config/lora.py (0.33.0) types max_lora_rank as
# Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] and pydantic refuses any other at engine start.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts that holds adapters of ``rank`` (smaller adapters are zero-padded).

    >>> [vllm_lora_rank(r) for r in (1, 4, 8, 12, 48, 300)]
    [1, 8, 8, 16, 64, 320]
    """
    fits = [r for r in VLLM_LORA_RANKS if r >= rank]
    if not fits:
        raise ValueError(f"model.lora_rank={rank} is above vLLM's largest LoRA rank ({VLLM_LORA_RANKS[-1]}); "
                         "lower it or set model.generation=torch")
    return fits[0]


VllmEngine = Literal["auto", "process", "inline"]
MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"


def runs_inline(engine: VllmEngine) -> bool:
    """Whether the engine runs in this process: ``auto`` is inline on vLLM's CPU build only."""
    if engine == "auto":
        from vllm.platforms import current_platform

        return current_platform.is_cpu()
    return engine == "inline"


@contextmanager
def vllm_multiprocessing(on: bool):
    """``VLLM_ENABLE_V1_MULTIPROCESSING`` for one engine's construction, then as it was. vLLM reads it from the
    environment only: vllm/envs.py (whose values an engine core caches once it starts: the cache is dropped before
    and after) and os.environ in vllm/platforms/cpu.py; so an engine never sees what another one asked for."""
    from vllm import envs

    before = os.environ.get(MULTIPROCESSING)
    os.environ[MULTIPROCESSING] = "1" if on else "0"
    envs.disable_envs_cache()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MULTIPROCESSING, None)
        else:
            os.environ[MULTIPROCESSING] = before
        envs.disable_envs_cache()


# The generator's log-probs are those of the distribution it sampled from (after temperature and top-p), as veRL
# asks for them (verl/workers/config/rollout.py ``logprobs_mode = "processed_logprobs"``, commit b178a3c): the
# behaviour policy of the rollout correction. vLLM's default, raw_logprobs, is the model's at temperature 1
# (vllm/v1/sample/sampler.py, 0.32.0). At temperature 1 and top_p 1 the two are the same.
LOGPROBS_MODE = "processed_logprobs"


def sampled_logprobs(completion) -> list[float] | None:
    """The log-prob of each sampled token of a vLLM ``CompletionOutput`` asked with ``logprobs=0`` (each step's
    dict holds the sampled token), or None where the engine gave none."""
    steps = getattr(completion, "logprobs", None)
    if not steps or len(steps) != len(completion.token_ids):
        return None
    return [float(step[t].logprob) for step, t in zip(steps, completion.token_ids)]


@contextmanager
def eager_logprob_ranks(inline: bool):
    """Asked for log-probs, vLLM also ranks each sampled token with ``batched_count_greater_than``, a function under
    ``torch.compile`` (vllm/v1/sample/ops/logprobs.py, 0.32.0): on vLLM's CPU build that is an inductor C++ build
    (~25 s of CPU) for a rank nothing here reads. An inline engine runs in this process, where torch's
    ``force_eager`` stance runs it as plain torch (the CPU model runs as it did; tests/vllm_real/test_engine.py
    checks the log-probs against the trainer's). An engine in its own processes (GPUs) compiles it once, cheaply."""
    if not inline:
        yield
        return
    with torch.compiler.set_stance("force_eager"):
        yield


class VllmUnavailable(RuntimeError):
    pass


def sleep_mode_available() -> bool:
    """Whether this platform's vLLM has sleep mode (CUDA, ROCm, XPU; not its CPU build): ``enable_sleep_mode``
    elsewhere is refused at engine construction (vllm/config/model.py, "Sleep mode is not supported")."""
    from vllm.platforms import current_platform

    return current_platform.is_sleep_mode_available()


# vLLM's CPU build reads ``gpu_memory_utilization`` as the fraction of host RAM to reserve (vllm/v1/worker/
# cpu_worker.py, 0.32.0): 0.45 of a 24 GB machine made a 10.9 GB engine for the 135M model. On CPU the KV cache
# gets this size instead, unless VLLM_CPU_KVCACHE_SPACE (GiB, vLLM's own setting) says otherwise.
CPU_KV_CACHE_BYTES = 1 << 30


def cpu_kv_cache() -> dict:
    """``LLM`` keyword arguments for the KV cache's size on vLLM's CPU build (none elsewhere)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return {}
    return {"kv_cache_memory_bytes": CPU_KV_CACHE_BYTES}


def load_vllm():
    try:
        import vllm  # noqa: F401
        from vllm.lora.request import LoRARequest
    except ImportError as err:
        raise VllmUnavailable(
            "model.generation=vllm needs vLLM: pip install 'populora-platform[vllm]' on a machine with a CUDA GPU "
            "(or set model.generation=torch)") from err
    return vllm, LoRARequest


class VllmBackend:
    """The ``Backend`` protocol: generation on vLLM, everything else on ``trainer_backend``."""

    def __init__(self, trainer_backend: Backend, model_path: str, sync_dir: str | Path, max_loras: int, rank: int,
                 gpu_memory_utilization: float = 0.45, max_model_len: int = 8192, dtype: str = "auto",
                 engine: VllmEngine = "auto"):
        vllm, self._LoRARequest = load_vllm()
        self.trainer = trainer_backend
        self.sync_dir = Path(sync_dir)
        self.max_model_len, self.max_loras = max_model_len, max_loras
        max_rank = vllm_lora_rank(rank)
        if max_rank != rank:
            log.info("vLLM takes LoRA ranks %s only: max_lora_rank %d for rank-%d adapters (zero-padded, same outputs)",
                     VLLM_LORA_RANKS, max_rank, rank)
        self.can_sleep = sleep_mode_available()
        self.inline = runs_inline(engine)
        # the engine core and its worker outlive a SIGKILLed parent (reaper.py): a watcher started before the engine
        # (a minute or more to start) ends them if this process dies, even before the engine is up; an inline
        # engine starts no process, it dies with this one
        self.reaper = None if self.inline else reaper.follow()
        with vllm_multiprocessing(not self.inline):
            self.engine = vllm.LLM(model=model_path, enable_lora=True, max_loras=max_loras, max_lora_rank=max_rank,
                                   gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                                   enable_sleep_mode=self.can_sleep, dtype=dtype, logprobs_mode=LOGPROBS_MODE,
                                   **cpu_kv_cache())
        self.requests: dict[str, object] = {}
        self.stale: set[str] = set(trainer_backend.adapters)
        self.retired: list[int] = []  # LoRA ids replaced or removed, to drop from the engine before loading new ones
        self._next_id = 1
        self.asleep = False

    @property
    def tokenizer(self):
        return self.trainer.tokenizer

    @property
    def lora(self) -> LoraSpec:
        return self.trainer.lora

    @property
    def adapters(self) -> list[str]:
        return self.trainer.adapters

    # adapters change in the trainer: mark them for re-sync
    # adapters change in the trainer (on the GPU torch shares with vLLM: asleep first), marked for re-sync
    def add_adapter(self, name: str, from_dir: str | Path | None = None, seed: int | None = None) -> None:
        self.sleep()
        self.trainer.add_adapter(name, from_dir, seed)
        self.stale.add(name)

    def set_adapter_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        self.sleep()
        self.trainer.set_adapter_state(name, state)
        self.stale.add(name)

    def remove_adapter(self, name: str) -> None:
        """Drop the adapter and its last synced dir (vLLM never loads an id again once it is replaced)."""
        self.sleep()
        self.trainer.remove_adapter(name)
        old = self.requests.pop(name, None)
        if old is not None:
            shutil.rmtree(old.lora_path, ignore_errors=True)
            self.retired.append(old.lora_int_id)
        self.stale.discard(name)

    def train_step(self, batches: dict[str, list[TrainSample]], *args, **kwargs) -> dict[str, dict]:
        self.sleep()
        self.stale.update(n for n, s in batches.items() if s)
        return self.trainer.train_step(batches, *args, **kwargs)

    # read-only or optimizer-only: the trainer's, unchanged (evolution reads parents here: asleep first)
    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        self.sleep()
        return self.trainer.adapter_state(name)

    def probe_kl(self, p, q, prompt_ids):
        self.sleep()
        return self.trainer.probe_kl(p, q, prompt_ids)

    def save_adapter(self, name: str, directory: str | Path) -> Path:
        return self.trainer.save_adapter(name, directory)

    def encode_chat(self, messages: list[dict], prefill: str = "") -> str:
        return self.trainer.encode_chat(messages, prefill)

    def sequence_logprobs(self, adapter, prompt_ids, completion_ids, max_len: int = 1024, temperature: float = 1.0):
        self.sleep()  # a forward with activations: torch needs the room
        return self.trainer.sequence_logprobs(adapter, prompt_ids, completion_ids, max_len, temperature)

    def init_optimizer(self, name: str, optim: AdamConfig) -> None:
        self.trainer.init_optimizer(name, optim)

    def optimizer_state(self, name: str) -> dict:
        return self.trainer.optimizer_state(name)

    def load_optimizer_state(self, name: str, state: dict) -> None:
        self.trainer.load_optimizer_state(name, state)

    def _sync(self) -> None:
        """Write changed adapters as PEFT dirs under new LoRA ids (vLLM caches adapters by id), after dropping
        the ids they replace from the engine (their slots are then the lowest free ones, see the module doc)."""
        for name in sorted(self.stale):
            old = self.requests.get(name)
            if old is not None:
                self.retired.append(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
        for lora_id in self.retired:
            self.engine.llm_engine.remove_lora(lora_id)
        self.retired.clear()
        for name in sorted(self.stale):
            path = self.sync_dir / f"{name}-{self._next_id}"
            self.trainer.save_adapter(name, path)
            self.requests[name] = self._LoRARequest(name, self._next_id, str(path))
            self._next_id += 1
        self.stale.clear()
        if len(self.requests) >= self.max_loras:
            raise ValueError(f"{len(self.requests)} adapters on a vLLM engine with max_loras={self.max_loras}: a row "
                             "without an adapter would be served with one (vLLM's CPU LoRA path, vllm PR 48421); "
                             "build it with max_loras >= adapters + 1 (model.slots)")

    def generate(self, prompts, adapters, max_new_tokens, temperature=1.0, top_p=1.0, seed=None, stop=(), batch_size=None,
                 seeds=None):
        """One completion per prompt on the vLLM engine (``batch_size`` is unused: vLLM batches continuously).

        Each row gets its own ``SamplingParams``: its own seed (``generation.row_seeds``; vLLM seeds one generator
        per request, so a shared seed would make a task's rollouts identical) and the stop tokens every backend
        uses (``generation.stop_token_ids``: EOS and the chat template's end of turn). Prompts go in as our own
        token ids, so prompt_ids are the torch path's. A prompt of ``max_model_len`` tokens or more, which vLLM
        refuses for the whole call, gets an empty completion (never trained on) and a warning instead. ``seeds``:
        the rows' own seeds, given by a caller that dealt a larger call's rows over workers (data_parallel.py),
        so each row keeps the seed of its place in that call."""
        from vllm import SamplingParams

        self.wake()
        self._sync()
        tok = self.tokenizer
        ids = tok(list(prompts), add_special_tokens=False).input_ids
        keep = [i for i, p in enumerate(ids) if 0 < len(p) < self.max_model_len]
        if len(keep) < len(prompts):
            log.warning("%d of %d prompts are %d tokens or longer (model.max_model_len): refused, empty completions",
                        len(prompts) - len(keep), len(prompts), self.max_model_len)
        seeds = list(seeds) if seeds is not None else generation.row_seeds(seed, len(prompts))
        stops = generation.stop_token_ids(tok)
        # the stop string stays in the completion, as with transformers' stop_strings: the azr format's check
        # needs its closing </answer>, and the update trains the tokens that closed the answer
        # logprobs=0: the sampled token's log-prob only (the update's generator-vs-trainer mismatch and rollout
        # correction, rollout_correction.py)
        params = [SamplingParams(max_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seeds[i],
                                 stop=list(stop) or None, stop_token_ids=stops, include_stop_str_in_output=True,
                                 logprobs=0)
                  for i in keep]
        lora = [None if adapters[i] is None else self.requests[adapters[i]] for i in keep]
        with eager_logprob_ranks(self.inline):
            outputs = self.engine.generate([{"prompt_token_ids": ids[i]} for i in keep], params, lora_request=lora,
                                           use_tqdm=False) if keep else []
        out = [Generation(p, "", list(i), []) for p, i in zip(prompts, ids)]
        for i, o in zip(keep, outputs):
            c = o.outputs[0]
            out[i] = Generation(prompts[i], c.text, list(ids[i]), list(c.token_ids), sampled_logprobs(c))
        return out

    def close(self) -> None:
        """Stop the engine's processes now (else vLLM stops them at interpreter exit, after pytest or a caller
        may have closed the streams its shutdown logs to; or never, in a Ray actor that is killed); inline, free
        its model and KV cache and its default process group (vllm/v1/engine/core.py ``shutdown``), so another
        engine can start in this process. Then the reaper goes too: it has nothing left to end, and it would poll
        this process's descendants for as long as this process lives (a test session, a UI, a Ray worker). If the
        shutdown raises, the reaper stays and ends the engine when this process exits. Idempotent."""
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            engine.llm_engine.engine_core.shutdown()
        watcher, self.reaper = getattr(self, "reaper", None), None
        if watcher is not None:
            reaper.stop(watcher)

    def sleep(self) -> None:
        """Free vLLM's GPU memory (level 1: weights to CPU RAM, KV cache dropped) while torch works on the GPU
        (only where vLLM has sleep mode: on CPU the engine stays up, nothing to free)."""
        if self.can_sleep and not self.asleep:
            self.engine.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        """Back to generation: hand torch's cached blocks back to the driver first, or vLLM cannot re-map its
        weights and KV cache into the memory torch's allocator still holds."""
        if self.asleep:
            torch.cuda.empty_cache()
            self.engine.wake_up()
            self.asleep = False
