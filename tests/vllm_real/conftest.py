"""The real vLLM engine (vLLM's CPU build, `make test-vllm`): only .venv-vllm runs these; the main venv never
collects this folder (pyproject ``norecursedirs``). ``engine``: the one engine of a module that asks for it, built
as the module's constants say (its dtype, the LoRAs' rank, the adapters)."""

import populora  # noqa: F401  (first: it sets OMP_WAIT_POLICY before torch loads; the trainer's decoding
#                  in this process took minutes instead of seconds on a loaded 2-core machine without it)

import copy  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from populora.platform.backends import LoraSpec  # noqa: E402
from populora.platform.backends.factory import vllm_max_loras  # noqa: E402
from populora.platform.backends.multilora import MultiLoraBackend  # noqa: E402
from populora.platform.backends.vllm import VllmBackend  # noqa: E402
from populora.platform.model.models import cached_source, load_base, resolve_source  # noqa: E402


def perturbed(state: dict, seed: int, scale: float = 0.3) -> dict:
    """The adapter with B drawn at random: a fresh adapter (B = 0) is the base model and would show nothing."""
    gen = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=gen) * scale if ".lora_B." in k else v) for k, v in state.items()}


@pytest.fixture(scope="module")
def engine(request, tmp_path_factory):
    """One vLLM engine for the module over the embedded SmolLM2-135M (fp32 trainer), as the module's constants say:
    ``DTYPE`` (the engine's), ``RANK`` and ``ALPHA`` (the LoRAs'), ``MEMBERS`` (the engine's max_loras is one
    more), ``ADAPTERS`` (name -> the seed its B is drawn from; adapter i's A from seed i), ``MAX_LEN``.
    Yields (backend, trainer, pristine): ``pristine`` a copy of the base before any adapter (a second trainer's)."""
    m = request.module
    source = resolve_source("embedded")
    base, tok = load_base(source, "float32", "cpu")  # also writes the de-quantised dir vLLM reads
    pristine = copy.deepcopy(base) if getattr(m, "PRISTINE", False) else None
    trainer = MultiLoraBackend(base, tok, LoraSpec(rank=m.RANK, alpha=m.ALPHA), m.MEMBERS)
    for i, (name, seed) in enumerate(m.ADAPTERS.items()):
        trainer.add_adapter(name, seed=i)
        trainer.set_adapter_state(name, perturbed(trainer.adapter_state(name), seed=seed))
    model_dir = cached_source(source, need_weights=True).path_or_id
    assert model_dir != source.path_or_id, "vLLM reads the GGUF cache's dir, not the GGUF file"
    start = time.monotonic()
    backend = VllmBackend(trainer, model_dir, tmp_path_factory.mktemp("sync"), vllm_max_loras(m.MEMBERS), m.RANK,
                          max_model_len=m.MAX_LEN, dtype=m.DTYPE)
    print(f"\nvLLM engine ({m.DTYPE}) started in {time.monotonic() - start:.1f}s")
    try:
        yield backend, trainer, pristine
    finally:
        backend.close()
