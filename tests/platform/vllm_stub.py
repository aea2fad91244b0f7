"""A stand-in for the vLLM engine (no GPU, no vLLM here), behaving as vLLM 0.33.0 does where our backend relies on
it, read from upstream source:

- one ``torch.Generator`` per request, seeded with that request's ``SamplingParams.seed``
  (vllm/v1/worker/gpu_model_runner.py, ``_update_states``: ``generator.manual_seed(sampling_params.seed)``);
  an unseeded request draws from the global stream. Same prompt + adapter + seed = same completion.
- ``LLM.generate(prompts, sampling_params, lora_request=[...])`` takes one SamplingParams for all prompts or a
  sequence, one per prompt (vllm/entrypoints/llm.py), and token-id prompts ``{"prompt_token_ids": [...]}``.
- a decoder prompt of ``max_model_len`` tokens or more raises for the whole call
  (vllm/v1/engine/input_processor.py, ``_validate_prompt_len``).
- ``max_lora_rank`` outside ``Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]`` fails at engine start
  (vllm/config/lora.py, ``MaxLoRARanks``).
- generation stops at a token of ``stop_token_ids`` and keeps it in ``token_ids``.
- ``sleep(level=1)`` / ``wake_up()`` (vllm/entrypoints/llm.py). A request to a sleeping engine is queued, not
  refused: ``EngineCore.sleep`` pauses the scheduler (vllm/v1/engine/core.py ``pause_scheduler``, 0.32.0), and
  ``generate`` waits until ``wake_up`` resumes it. Here too ``generate`` blocks until ``wake_up`` (from another
  thread); it records "generate-while-asleep" first, so a test can assert the backend never does it, and gives up
  after ``ASLEEP_GIVE_UP_S`` with an error instead of hanging the suite when a backend does.
- ``enable_sleep_mode`` only where the platform has it (vllm/config/model.py: "Sleep mode is not supported on
  current platform"); ``vllm.platforms.current_platform.is_sleep_mode_available()`` says (``SLEEP_MODE`` here).
- ``llm_engine.remove_lora(id)`` / ``list_loras()`` (vllm/v1/engine/llm_engine.py), and
  ``llm_engine.engine_core.shutdown()`` (the engine-core client, vllm/v1/engine/core_client.py): recorded as
  "shutdown" in ``EVENTS``.
- where the engine runs comes from ``VLLM_ENABLE_V1_MULTIPROCESSING`` in the environment at construction
  (vllm/envs.py, vllm/platforms/cpu.py); the stub keeps what it saw (``multiprocessing``), and
  ``vllm.envs.disable_envs_cache`` exists. ``current_platform.is_cpu()`` says ``PLATFORM["cpu"]``.

Every call is appended to ``EVENTS`` (shared with the test, which adds the trainer's calls), and every
SamplingParams the engine receives to ``LLM.instances[-1].params``.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from dataclasses import dataclass, field

import torch

VOCAB = 97
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
EVENTS: list[str] = []
ASLEEP_GIVE_UP_S = 120  # only a broken backend waits this long (a real engine would wait forever)
SLEEP_MODE = {"available": True}  # the platform's sleep mode (CUDA: yes; vLLM's CPU build: no)
PLATFORM = {"cpu": False}  # whether the platform is vLLM's CPU build


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    include_stop_str_in_output: bool = False
    logprobs: int | None = None


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None = None  # with SamplingParams.logprobs: the sampled token's, per step


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


class LLM:
    instances: list["LLM"] = []

    def __init__(self, model, enable_lora=False, max_loras=1, max_lora_rank=16, gpu_memory_utilization=0.9,
                 max_model_len=None, enable_sleep_mode=False, dtype="auto", kv_cache_memory_bytes=None,
                 logprobs_mode="raw_logprobs"):
        if max_lora_rank not in MAX_LORA_RANKS:
            raise ValueError(f"max_lora_rank: Input should be {MAX_LORA_RANKS} [input_value={max_lora_rank}]")
        if enable_sleep_mode and not SLEEP_MODE["available"]:
            raise ValueError("Sleep mode is not supported on current platform.")
        self.model, self.max_lora_rank, self.max_model_len = model, max_lora_rank, max_model_len or 8192
        self.max_loras, self.enable_sleep_mode, self.dtype = max_loras, enable_sleep_mode, dtype
        self.logprobs_mode = logprobs_mode
        self.params, self.loras, self.removed = [], [], []
        self.awake = threading.Event()
        self.awake.set()
        self.llm_engine = self
        self.engine_core = types.SimpleNamespace(shutdown=lambda timeout=None: EVENTS.append("shutdown"))
        self.multiprocessing = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        LLM.instances.append(self)

    @property
    def sleeping(self) -> bool:
        return not self.awake.is_set()

    def remove_lora(self, lora_id: int) -> bool:
        self.removed.append(lora_id)
        return True

    def generate(self, prompts, sampling_params, lora_request=None, use_tqdm=True):
        if self.sleeping:  # upstream: queued behind the paused scheduler until wake_up
            EVENTS.append("generate-while-asleep")
            if not self.awake.wait(ASLEEP_GIVE_UP_S):
                raise RuntimeError(f"generate blocked {ASLEEP_GIVE_UP_S}s on a sleeping engine (upstream: forever)")
        params = sampling_params if isinstance(sampling_params, (list, tuple)) else [sampling_params] * len(prompts)
        loras = lora_request if isinstance(lora_request, (list, tuple)) else [lora_request] * len(prompts)
        for p in prompts:  # validated before any request runs: one bad prompt fails the call
            if len(p["prompt_token_ids"]) >= self.max_model_len:
                raise ValueError(f"The decoder prompt (length {len(p['prompt_token_ids'])}) is longer than the "
                                 f"maximum model length of {self.max_model_len}.")
        EVENTS.append("generate")
        self.params += list(params)
        self.loras += list(loras)
        return [self._one(p["prompt_token_ids"], sp, lr) for p, sp, lr in zip(prompts, params, loras)]

    def _one(self, prompt_ids, sp, lora):
        gen = torch.Generator().manual_seed(sp.seed) if sp.seed is not None else None
        # what the model would say depends on the prompt and the adapter; the draw on the request's generator
        key = hash((tuple(prompt_ids), None if lora is None else lora.lora_path)) % 2**31
        logits = torch.randn(VOCAB, generator=torch.Generator().manual_seed(key))
        probs = torch.softmax(logits, 0) if sp.temperature > 0 else None
        out = []
        for _ in range(sp.max_tokens):
            t = int(torch.multinomial(probs, 1, generator=gen)) if probs is not None else int(logits.argmax())
            out.append(t)
            if t in sp.stop_token_ids:
                break
        logprobs = None
        if sp.logprobs is not None:
            table = torch.log_softmax(logits, 0)
            logprobs = [{t: Logprob(float(table[t]))} for t in out]
        return RequestOutput(list(prompt_ids), [CompletionOutput(" ".join(map(str, out)), out, logprobs)])

    def sleep(self, level: int = 1):
        EVENTS.append(f"sleep(level={level})")
        self.awake.clear()

    def wake_up(self, tags=None):
        EVENTS.append("wake_up")
        self.awake.set()


def install(monkeypatch) -> None:
    """Put the stub where ``import vllm`` finds it, for one test."""
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    vllm.lora, lora.request = lora, request
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_sleep_mode_available=lambda: SLEEP_MODE["available"],
                                                       is_cpu=lambda: PLATFORM["cpu"])
    vllm.platforms = platforms
    envs = types.ModuleType("vllm.envs")
    envs.disable_envs_cache = lambda: None
    vllm.envs = envs
    for name, mod in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request),
                      ("vllm.platforms", platforms), ("vllm.envs", envs)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setitem(SLEEP_MODE, "available", True)
    monkeypatch.setitem(PLATFORM, "cpu", False)
    EVENTS.clear()
    LLM.instances.clear()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: EVENTS.append("empty_cache"))
