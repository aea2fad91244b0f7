"""Generation for evaluation: one set of decoding settings for every adapter, so the comparison is fair.

Every benchmark suite asks this module for completions; it wraps the platform's model backend
(``Backend.generate``: row i uses adapter ``adapters[i]``, None = the bare base model) with the same chat
template (``backend.encode_chat``), the same temperature / top-p / token budget and the same seeds for all.
"""

from __future__ import annotations

import os
import sys
import threading

from pydantic import ConfigDict, Field, model_validator

from populora.evaluation.harness.protocol import AZR, AZR_MATH_TEMPLATE
from populora.platform.model.chat_template import stop_token_ids
from populora.platform.config import Section


class GenConfig(Section):
    """Decoding settings shared by every adapter of an evaluation (logged with the results): the ``generation``
    section of ``EvalConfig``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_new_tokens: int | None = Field(None, ge=1, description="Token budget per completion for every benchmark "
                                       "(default: the protocol's per-benchmark budgets; see `budgets`)")
    temperature: float = Field(0.0, ge=0, description="0 = greedy (pass@1 greedy, the EvalPlus / lm-eval default)")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling top-p when temperature > 0")
    n_samples: int = Field(1, ge=1, description="Samples per problem on every benchmark, code and math (needs "
                           "temperature > 0): a problem's pass@1 is the mean of its samples' verdicts, the problem "
                           "stays the unit of every interval (Miller 2024); EvalPlus also gives pass@10 / pass@100")
    seed: int = Field(1234, description="Sampling seed, the same for every adapter so all see the same noise")
    batch_size: int = Field(8, ge=1, description="Prompts per generation batch")

    @model_validator(mode="after")
    def _sampling(self) -> "GenConfig":
        if self.n_samples > 1 and self.temperature == 0:
            raise ValueError(f"n_samples {self.n_samples} at temperature 0 gives {self.n_samples} identical greedy "
                             f"samples: set generation.temperature > 0 (--temperature 0.6, say) or n_samples 1")
        return self

    @property
    def sampled(self) -> int:
        """Samples generated per problem: ``n_samples`` when sampling, 1 for greedy."""
        return self.n_samples if self.temperature > 0 else 1

    def to_dict(self) -> dict:
        return self.model_dump()


def ensure_offline() -> None:
    """Evaluation reads local files only: stop ``datasets`` / the HF hub (pulled in by lm-eval and EvalPlus)
    from reaching the network. Set before they are imported; patched in place if they already are."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "datasets" in sys.modules and os.environ["HF_DATASETS_OFFLINE"] == "1":
        sys.modules["datasets"].config.HF_DATASETS_OFFLINE = True


_END_IDS: dict[int, tuple[object, set[int]]] = {}
_END_IDS_LOCK = threading.Lock()


def end_ids(backend) -> set[int]:
    """Token ids that end a completion: the backends' own stop tokens (EOS and the chat template's end-of-turn
    token, ``chat_template.stop_token_ids``), so a turn closed at exactly the budget is not "truncated"."""
    tok = getattr(backend, "tokenizer", None)
    if tok is None:
        return set()
    with _END_IDS_LOCK:  # once per tokenizer; rendering its template is not safe from several threads at once
        if id(tok) not in _END_IDS:
            _END_IDS[id(tok)] = (tok, set(stop_token_ids(tok)))  # the tokenizer kept: its id stays its own
        return _END_IDS[id(tok)][1]


def is_truncated(gen, max_new_tokens: int, ends: set[int]) -> bool:
    """The completion used its whole budget without ending (its last token is no end token).

    >>> from types import SimpleNamespace as G
    >>> is_truncated(G(completion_ids=[5, 6, 7]), 3, {2}), is_truncated(G(completion_ids=[5, 6, 2]), 3, {2})
    (True, False)
    """
    ids = list(gen.completion_ids or [])
    return len(ids) >= max_new_tokens and ids[-1] not in ends


def truncated_rate(samples: list[dict]) -> float:
    """Share of samples (``{"truncated": bool, ...}``) that ran out of their token budget."""
    return sum(bool(s.get("truncated")) for s in samples) / len(samples) if samples else 0.0


def complete_detail(backend, adapter: str | None, prompts: list[str], gen: GenConfig, stop: tuple[str, ...] = (),
                    progress=None) -> tuple[list[list[str]], list[list[bool]]]:
    """``gen.n_samples`` completions for each (already encoded) prompt, and whether each ran out of budget:
    texts[i][j] = sample j of prompt i. ``gen.max_new_tokens`` must be resolved (the runner sets it per benchmark).

    Greedy decoding gives n identical samples, so it generates once and repeats the text.
    """
    assert gen.max_new_tokens is not None, "resolve the protocol's budget first (Runner.gen_for)"
    n = gen.n_samples if gen.temperature > 0 else 1
    rows = [p for p in prompts for _ in range(n)]
    texts: list[str] = []
    cut: list[bool] = []
    ends = end_ids(backend)
    for i in range(0, len(rows), gen.batch_size):
        chunk = rows[i:i + gen.batch_size]
        # the seed depends on the chunk only, so a resumed or re-ordered evaluation samples the same noise
        outs = backend.generate(chunk, [adapter] * len(chunk), gen.max_new_tokens, temperature=gen.temperature,
                                top_p=gen.top_p, seed=gen.seed + i, stop=stop, batch_size=gen.batch_size)
        texts += [g.text for g in outs]
        cut += [is_truncated(g, gen.max_new_tokens, ends) for g in outs]
        if progress is not None:
            progress(len(chunk))  # in generated rows: len(prompts) * (n_samples if sampling else 1)
    reps = gen.n_samples if n == 1 else 1
    return ([texts[k * n:(k + 1) * n] * reps for k in range(len(prompts))],
            [cut[k * n:(k + 1) * n] * reps for k in range(len(prompts))])


def complete(backend, adapter: str | None, prompts: list[str], gen: GenConfig, stop: tuple[str, ...] = (),
             progress=None) -> list[list[str]]:
    """The texts of :func:`complete_detail`."""
    return complete_detail(backend, adapter, prompts, gen, stop, progress)[0]


def chat_prompt(backend, user: str, prefill: str = "") -> str:
    """The one chat template every adapter gets: a single user turn, optional assistant prefill."""
    return backend.encode_chat([{"role": "user", "content": user}], prefill)


def render(backend, template: str, user: str, prefill: str = "") -> str:
    """``user`` in the benchmark's template: ``chat`` (the model's chat template) or ``azr`` (AZR's plain
    R1-style text, no chat markup: protocol.AZR_MATH_TEMPLATE)."""
    if template == AZR:
        return AZR_MATH_TEMPLATE.format(input=user) + prefill
    return chat_prompt(backend, user, prefill)
