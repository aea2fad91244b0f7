"""A tiny Qwen2 model made here, with no download: ``model.base: tiny-qwen2``.

The paper's base is Qwen2.5-7B; the embedded SmolLM2 (a Llama) differs from it where our code can go wrong:

* its end of text (``<|endoftext|>``, the base model's EOS and pad) is not its end of turn (``<|im_end|>``, which
  its chat template writes after each turn): stop tokens must hold both (chat_template.stop_token_ids);
* its q/k/v projections carry biases (``attention_bias``), its embeddings are untied, its attention is GQA.

This builds a model of that family at a few MB: a ``Qwen2Config`` at tiny sizes with random weights (seed 0, the
same in every process), and a tokenizer with Qwen2.5's special tokens, chat template, normaliser and
pre-tokeniser (qwen2_tokenizer.json, copied from Qwen/Qwen2.5-7B's tokenizer files), whose byte-level BPE is the
first ``MERGES`` merges of the embedded SmolLM2's own (a valid smaller BPE: every token a merge makes is in the
vocabulary). The model dir is written once under the cache dir (``POPULORA_CACHE_DIR``) and read by torch,
vLLM and every Ray worker like any HF model dir.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

NAME = "tiny-qwen2"
FORMAT = 1          # bump when what is written changes: a dir of an older format is not reused
MERGES = 4000       # BPE merges kept from SmolLM2's (vocabulary: 256 bytes + these + Qwen's 22 added tokens)
SIZES = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)  # GQA (2 query heads per KV head), head_dim 32
SPEC = Path(__file__).with_name("qwen2_tokenizer.json")


def spec() -> dict:
    """Qwen2.5's tokenizer facts: chat template, special and added tokens, EOS/pad, pre-tokeniser regex."""
    return json.loads(SPEC.read_text())


def dir_name() -> str:
    """The model dir's name under the cache: keyed by what it is built from, so a changed recipe is rebuilt."""
    key = hashlib.sha1(f"{FORMAT}:{MERGES}:{sorted(SIZES.items())}:{SPEC.read_bytes().hex()}".encode()).hexdigest()[:12]
    return f"{NAME}-{key}"


def complete(d: Path) -> bool:
    return (d / "model.safetensors").is_file() and (d / "tokenizer.json").is_file()


def bpe_merges(tokenizer) -> list[tuple[str, str]]:
    """A byte-level BPE tokenizer's merges, in priority order (the embedded SmolLM2's, here)."""
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def small_bpe(merges: list[tuple[str, str]], n: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The first ``n`` merges and the tokens they can make: the 256 byte-level symbols first (ids 0..255 in byte
    order), then each merge's result in merge order. A merge whose parts are not both kept is skipped.

    >>> v, m = small_bpe([("a", "b"), ("ab", "c"), ("x", "zz")], 3)
    >>> len(v), v["ab"], v["abc"], m
    (258, 256, 257, [('a', 'b'), ('ab', 'c')])
    """
    from tokenizers import pre_tokenizers

    out = {s: i for i, s in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet(), key=_byte_of))}
    kept = []
    for a, b in merges[:n]:
        if a in out and b in out and a + b not in out:
            out[a + b] = len(out)
            kept.append((a, b))
    return out, kept


def _byte_of(symbol: str) -> int:
    """The byte a byte-level symbol stands for (GPT-2's ``bytes_to_unicode``: printable bytes are themselves, the
    n-th other byte is ``chr(256 + n)``).

    >>> _byte_of("a"), _byte_of("\u0120"), _byte_of("\u0100")
    (97, 32, 0)
    """
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), ord("\xff") + 1)]
    if ord(symbol) in shown:
        return ord(symbol)
    return [b for b in range(256) if b not in shown][ord(symbol) - 256]


def make_tokenizer(vocab: dict[str, int], merges: list[tuple[str, str]]):
    """A transformers fast tokenizer with Qwen2.5's pipeline (NFC, its split regex, byte-level BPE), special
    tokens after the BPE's ids as in Qwen2.5, EOS and pad ``<|endoftext|>``, no BOS, and its chat template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    facts = spec()
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=False, fuse_unk=False))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(facts["pretokenize_regex"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in facts["special_tokens"]])
    tk.add_tokens([AddedToken(t, special=False, normalized=False) for t in facts["added_tokens"]])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token=facts["eos_token"], pad_token=facts["pad_token"], bos_token=None,
        unk_token=None, additional_special_tokens=facts["special_tokens"][1:], chat_template=facts["chat_template"],
        model_max_length=131072, clean_up_tokenization_spaces=False, padding_side="left")


def make_config(tok):
    """Qwen2.5-7B's config.json at tiny sizes: biases on q/k/v (Qwen2's attention has them), untied
    embeddings, GQA, rope_theta 1e6, no sliding window; BOS/EOS ids as Qwen2.5 base gives them (both
    ``<|endoftext|>``)."""
    from transformers import Qwen2Config

    eos = tok.convert_tokens_to_ids(spec()["eos_token"])
    return Qwen2Config(vocab_size=len(tok), **SIZES, max_position_embeddings=32768, rope_theta=1_000_000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False, sliding_window=None,
                       bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, torch_dtype="float32",
                       architectures=["Qwen2ForCausalLM"])


def build(dest: Path, bpe_source) -> Path:
    """Write the model dir: config.json, random weights (seed 0), the tokenizer files; the BPE's merges are the
    first ``MERGES`` of ``bpe_source`` (a byte-level BPE tokenizer: the embedded SmolLM2's)."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    tok = make_tokenizer(*small_bpe(bpe_merges(bpe_source), MERGES))
    config = make_config(tok)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    dest.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(dest)
    config.save_pretrained(dest)
    model.generation_config.save_pretrained(dest)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(dest / "model.safetensors"))  # untied
    return dest
