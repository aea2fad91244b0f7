"""Model backends: one frozen base, many named LoRA adapters; generation, log-probs, updates, PEFT dirs in and out.

``Backend`` (base.py) is the protocol every implementation satisfies: ``PeftBackend`` (peft.py, the reference),
``MultiLoraBackend`` (multilora.py, batched multi-LoRA, the default), ``RayBackend`` (ray.py, multi-LoRA on Ray
actors) and ``VllmBackend`` (vllm.py, generation on vLLM). Training and evaluation build theirs with
``make_backend(BackendConfig(...))`` (factory.py); every backend's optimizer is built from one ``AdamConfig`` by
``make_optimizer`` (optimizer.py). Loading the base model itself is ``populora.platform.model.models``.
"""

from populora.platform.backends.base import BASE, Backend, Generation, LoraSpec, TrainSample
from populora.platform.backends.factory import BackendConfig, RaySpec, make_backend
from populora.platform.backends.multilora import MultiLoraBackend
from populora.platform.backends.optimizer import AdamConfig, SlotAdam, make_optimizer
from populora.platform.backends.peft import PeftBackend

__all__ = ["AdamConfig", "BASE", "Backend", "BackendConfig", "Generation", "LoraSpec", "MultiLoraBackend", "PeftBackend", "RaySpec",
           "SlotAdam", "TrainSample", "make_backend", "make_optimizer"]
