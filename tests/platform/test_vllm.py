"""The vLLM generation backend. This machine has no GPU: the contract test on a real engine skips with that reason;
what runs everywhere is the clear error when vLLM is chosen but missing."""

import importlib.util

import pytest
import torch

from populora.platform import config as config_io
from populora.training.config import TrainConfig
from populora.platform.backends import make_backend
from populora.training.loop import backend_config

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here; the missing-vLLM error cannot be shown")
def test_choosing_vllm_without_it_is_a_clear_error():
    from populora.platform.backends.vllm import VllmUnavailable

    cfg = config_io.load(TrainConfig, None, ["model.generation=vllm", "model.tiny_random=true"])
    with pytest.raises(VllmUnavailable, match=r"pip install 'populora\[vllm\]'"):
        make_backend(backend_config(cfg))


@pytest.mark.skipif(not (HAS_VLLM and torch.cuda.is_available()), reason="needs vLLM and a CUDA GPU (none on this machine)")
def test_vllm_generation_matches_the_backend_contract(tmp_path):
    cfg = config_io.load(TrainConfig, None, ["model.generation=vllm", "model.base=HuggingFaceTB/SmolLM2-135M-Instruct",
                                              "model.device=cuda", f"output_dir={tmp_path}"])
    backend = make_backend(backend_config(cfg))
    backend.add_adapter("T0", seed=0)
    prompt = backend.encode_chat([{"role": "user", "content": "Say hi"}])
    gens = backend.generate([prompt, prompt], ["T0", None], 8, temperature=0)
    assert len(gens) == 2 and all(g.completion_ids for g in gens)
    assert gens[0].text == gens[1].text  # a fresh adapter (B = 0) is the base model
