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
- ``sleep(level=1)`` / ``wake_up()`` (vllm/entrypoints/llm.py); generating while asleep is an error here (upstream
  the KV cache is gone and the weights are in CPU RAM).

Every call is appended to ``EVENTS`` (shared with the test, which adds the trainer's calls), and every
SamplingParams the engine receives to ``LLM.instances[-1].params``.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import torch

VOCAB = 97
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
EVENTS: list[str] = []


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    include_stop_str_in_output: bool = False


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


class LLM:
    instances: list["LLM"] = []

    def __init__(self, model, enable_lora=False, max_loras=1, max_lora_rank=16, gpu_memory_utilization=0.9,
                 max_model_len=None, enable_sleep_mode=False):
        if max_lora_rank not in MAX_LORA_RANKS:
            raise ValueError(f"max_lora_rank: Input should be {MAX_LORA_RANKS} [input_value={max_lora_rank}]")
        self.model, self.max_lora_rank, self.max_model_len = model, max_lora_rank, max_model_len or 8192
        self.sleeping, self.params, self.loras = False, [], []
        LLM.instances.append(self)

    def generate(self, prompts, sampling_params, lora_request=None, use_tqdm=True):
        if self.sleeping:
            raise RuntimeError("generate while asleep: the KV cache was dropped")
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
        return RequestOutput(list(prompt_ids), [CompletionOutput(" ".join(map(str, out)), out)])

    def sleep(self, level: int = 1):
        EVENTS.append(f"sleep(level={level})")
        self.sleeping = True

    def wake_up(self, tags=None):
        EVENTS.append("wake_up")
        self.sleeping = False


def install(monkeypatch) -> None:
    """Put the stub where ``import vllm`` finds it, for one test."""
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    vllm.lora, lora.request = lora, request
    for name, mod in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, mod)
    EVENTS.clear()
    LLM.instances.clear()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: EVENTS.append("empty_cache"))
