"""vLLM for generation, torch for training: the paper-scale path on GPUs.

``VllmBackend`` holds a training backend (batched multi-LoRA by default). Generation goes to one vLLM engine
with ``enable_lora`` and one ``LoRARequest`` per member (``max_loras`` = population size); everything else
(updates, evolution, checkpoints) is the training backend's. Before a generation that follows an update or an
evolution, the changed adapters are written as PEFT dirs and given fresh LoRA ids, so vLLM loads the new weights
instead of its cached copy. vLLM is an optional extra: ``pip install 'populora[vllm]'``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from populora.platform.backends.base import Backend, Generation, LoraSpec, TrainSample


class VllmUnavailable(RuntimeError):
    pass


def load_vllm():
    try:
        import vllm  # noqa: F401
        from vllm.lora.request import LoRARequest
    except ImportError as err:
        raise VllmUnavailable(
            "model.generation=vllm needs vLLM: pip install 'populora[vllm]' on a machine with a CUDA GPU "
            "(or set model.generation=torch)") from err
    return vllm, LoRARequest


class VllmBackend:
    """The ``Backend`` protocol: generation on vLLM, everything else on ``trainer_backend``."""

    def __init__(self, trainer_backend: Backend, model_path: str, sync_dir: str | Path, max_loras: int, rank: int,
                 gpu_memory_utilization: float = 0.45, max_model_len: int = 8192):
        vllm, self._LoRARequest = load_vllm()
        self.trainer = trainer_backend
        self.sync_dir = Path(sync_dir)
        self.engine = vllm.LLM(model=model_path, enable_lora=True, max_loras=max_loras, max_lora_rank=rank,
                               gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                               enable_sleep_mode=True)
        self.requests: dict[str, object] = {}
        self.stale: set[str] = set(trainer_backend.adapters)
        self._next_id = 1

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
    def add_adapter(self, name: str, from_dir: str | Path | None = None, seed: int | None = None) -> None:
        self.trainer.add_adapter(name, from_dir, seed)
        self.stale.add(name)

    def set_adapter_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        self.trainer.set_adapter_state(name, state)
        self.stale.add(name)

    def remove_adapter(self, name: str) -> None:
        self.trainer.remove_adapter(name)
        self.requests.pop(name, None)
        self.stale.discard(name)

    def train_step(self, batches: dict[str, list[TrainSample]], *args, **kwargs) -> dict[str, dict]:
        self.stale.update(n for n, s in batches.items() if s)
        return self.trainer.train_step(batches, *args, **kwargs)

    # read-only or optimizer-only: the trainer's, unchanged
    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        return self.trainer.adapter_state(name)

    def save_adapter(self, name: str, directory: str | Path) -> Path:
        return self.trainer.save_adapter(name, directory)

    def encode_chat(self, messages: list[dict], prefill: str = "") -> str:
        return self.trainer.encode_chat(messages, prefill)

    def sequence_logprobs(self, adapter, prompt_ids, completion_ids, max_len: int = 1024):
        return self.trainer.sequence_logprobs(adapter, prompt_ids, completion_ids, max_len)

    def init_optimizer(self, name: str, lr: float, weight_decay: float = 0.0) -> None:
        self.trainer.init_optimizer(name, lr, weight_decay)

    def optimizer_state(self, name: str) -> dict:
        return self.trainer.optimizer_state(name)

    def load_optimizer_state(self, name: str, state: dict) -> None:
        self.trainer.load_optimizer_state(name, state)

    def _sync(self) -> None:
        """Write changed adapters as PEFT dirs under new LoRA ids (vLLM caches adapters by id)."""
        for name in sorted(self.stale):
            path = self.sync_dir / f"{name}-{self._next_id}"
            self.trainer.save_adapter(name, path)
            old = self.requests.get(name)
            self.requests[name] = self._LoRARequest(name, self._next_id, str(path))
            self._next_id += 1
            if old is not None:
                shutil.rmtree(old.lora_path, ignore_errors=True)
        self.stale.clear()

    def generate(self, prompts, adapters, max_new_tokens, temperature=1.0, top_p=1.0, seed=None, stop=(), batch_size=None):
        from vllm import SamplingParams

        self._sync()
        # the stop string stays in the completion, as with transformers' stop_strings: the azr format's check
        # needs its closing </answer>, and the update trains the tokens that closed the answer
        params = SamplingParams(max_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
                                stop=list(stop) or None, include_stop_str_in_output=True)
        lora = [None if a is None else self.requests[a] for a in adapters]
        outputs = self.engine.generate(prompts, params, lora_request=lora, use_tqdm=False)
        return [Generation(p, o.outputs[0].text, list(o.prompt_token_ids), list(o.outputs[0].token_ids))
                for p, o in zip(prompts, outputs)]

    def sleep(self) -> None:
        """Free vLLM's GPU memory (weights + KV cache) while torch trains on the same GPU."""
        self.engine.sleep(level=1)

    def wake(self) -> None:
        self.engine.wake_up()
