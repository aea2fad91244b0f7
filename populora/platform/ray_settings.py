"""What a Ray layout of model workers may be: the placements, the default one, and the settings Ray's model
workers cannot honour. Torch-free, so the training config validates ``ray.*`` without loading the backends
(``backends/ray.py``, which runs the workers, imports these names from here; so does ``backends/factory.py``)."""

from __future__ import annotations


class RayError(RuntimeError):
    pass


class RaySettingError(RayError, ValueError):
    """A setting Ray's model workers cannot honour (a ValueError, so config validation reports it per field)."""


PLACEMENTS = ("data_parallel", "by_member")


def default_placement(device: str, gpus_per_worker: float) -> str:
    """data_parallel on GPUs (every GPU works on every row of every step), by_member on CPU (today's layout).

    >>> default_placement("cuda", 1), default_placement("auto", 0)
    ('data_parallel', 'by_member')
    """
    return "data_parallel" if device.startswith("cuda") or gpus_per_worker > 0 else "by_member"


def check_ray(generation: str, kind: str, device: str, gpus_per_worker: float, placement: str = "by_member") -> None:
    """Refuse, naming the field, what model workers would silently ignore or get wrong (the factory and the
    training config's validation both ask here). Workers run batched multi-LoRA, each on the GPU(s)
    Ray reserves for it: Ray 2.60 leaves CUDA_VISIBLE_DEVICES alone for an actor that reserves no GPU
    (ray/_private/accelerators/accelerator.py:4-13, _private/utils.py:285, ray issue 54868), so with
    ``gpus_per_worker=0`` every worker would see every GPU and load its 15 GB base onto cuda:0. by_member
    workers generate with torch; data_parallel ones with torch or each with its own vLLM engine."""
    if placement not in PLACEMENTS:
        raise RaySettingError(f"ray.placement={placement} is not one of {', '.join(PLACEMENTS)}")
    if generation != "torch" and placement != "data_parallel":
        raise RaySettingError(f"model.generation={generation} is not supported with ray.placement={placement}: its "
                              "workers generate with torch (multi-LoRA); set ray.placement=data_parallel (one vLLM "
                              "engine per worker), or set model.generation=torch")
    if kind != "multilora":
        raise RaySettingError(f"model.backend={kind} is not supported with ray.address: model workers run batched "
                       "multi-LoRA; set model.backend=multilora, or drop ray.address")
    if device.startswith("cuda") and gpus_per_worker <= 0:
        raise RaySettingError(f"model.device={device} with ray.gpus_per_worker=0: every model worker would load onto the "
                       "same GPU (Ray hides no GPU from an actor that reserves none); set ray.gpus_per_worker=1")
    if device.startswith("cuda:") and device != "cuda:0":
        raise RaySettingError(f"model.device={device} with ray.address: each worker sees only the GPU Ray gave it (as "
                       "cuda:0); set model.device=cuda")
