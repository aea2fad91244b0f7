"""Generation for evaluation: one set of decoding settings for every adapter, so the comparison is fair.

Every benchmark suite asks this module for completions; it wraps the platform's model backend
(``Backend.generate``: row i uses adapter ``adapters[i]``, None = the bare base model) with the same chat
template (``backend.encode_chat``), the same temperature / top-p / token budget and the same seeds for all.
"""

from __future__ import annotations

import os

from pydantic import ConfigDict, Field

from populora.platform.config import Section


class GenConfig(Section):
    """Decoding settings shared by every adapter of an evaluation (logged with the results): the ``generation``
    section of ``EvalConfig``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_new_tokens: int = Field(512, ge=1, description="Token budget per completion")
    temperature: float = Field(0.0, ge=0, description="0 = greedy (pass@1 greedy, the EvalPlus / lm-eval default)")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling top-p when temperature > 0")
    n_samples: int = Field(1, ge=1, description="Samples per code problem (pass@k over n; needs temperature > 0)")
    seed: int = Field(1234, description="Sampling seed, the same for every adapter so all see the same noise")
    batch_size: int = Field(8, ge=1, description="Prompts per generation batch")

    def to_dict(self) -> dict:
        return self.model_dump()


def ensure_offline() -> None:
    """Evaluation reads local files only: stop ``datasets`` / the HF hub (pulled in by lm-eval and EvalPlus)
    from reaching the network. Set before they are imported; patched in place if they already are."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import sys

    if "datasets" in sys.modules and os.environ["HF_DATASETS_OFFLINE"] == "1":
        sys.modules["datasets"].config.HF_DATASETS_OFFLINE = True


def complete(backend, adapter: str | None, prompts: list[str], gen: GenConfig, stop: tuple[str, ...] = (),
             progress=None) -> list[list[str]]:
    """``gen.n_samples`` completions for each (already chat-encoded) prompt: out[i][j] = sample j of prompt i.

    Greedy decoding gives n identical samples, so it generates once and repeats the text.
    """
    n = gen.n_samples if gen.temperature > 0 else 1
    rows = [p for p in prompts for _ in range(n)]
    texts: list[str] = []
    for i in range(0, len(rows), gen.batch_size):
        chunk = rows[i:i + gen.batch_size]
        # the seed depends on the chunk only, so a resumed or re-ordered evaluation samples the same noise
        outs = backend.generate(chunk, [adapter] * len(chunk), gen.max_new_tokens, temperature=gen.temperature,
                                top_p=gen.top_p, seed=gen.seed + i, stop=stop, batch_size=gen.batch_size)
        texts += [g.text for g in outs]
        if progress is not None:
            progress(len(chunk))  # in generated rows: len(prompts) * (n_samples if sampling else 1)
    per_prompt = [texts[k * n:(k + 1) * n] for k in range(len(prompts))]
    return [s * gen.n_samples if n == 1 else s for s in per_prompt]


def chat_prompt(backend, user: str, prefill: str = "") -> str:
    """The one chat template every adapter gets: a single user turn, optional assistant prefill."""
    return backend.encode_chat([{"role": "user", "content": user}], prefill)
