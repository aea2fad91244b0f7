"""An lm-eval ``LM`` that generates with the platform's model backend and one adapter.

lm-eval owns the tasks (prompts, data, metrics, aggregation); this class only turns its ``generate_until``
requests into ``backend.generate`` calls with the benchmark's template (``generation.render``: the chat template,
or AZR's plain one) and the evaluation's shared decoding settings (``GenConfig``), so every adapter is scored with
the same template, temperature and token budget. The budget is the request's ``max_gen_toks`` (what the task
YAML or ``simple_evaluate(gen_kwargs=...)`` says), as lm-eval's own models read it, else ``gen.max_new_tokens``.
Which completions ran out of budget is kept in ``truncated`` (doc id -> one bool per sample, in generation
order: sampled evaluation asks lm-eval for ``repeats`` copies of each document, which come back in a row).
"""

from __future__ import annotations

from lm_eval.api.model import LM

from populora.evaluation.harness.generation import GenConfig, end_ids, is_truncated, render

LOGLIK_ERROR = ("PopuLoRA's backend LM is generative only: loglikelihood tasks (multiple choice, perplexity) are "
                "not supported; run them with lm-eval's own hf model on the merged adapter instead")


class BackendLM(LM):
    def __init__(self, backend, adapter: str | None, gen: GenConfig, progress=None, template: str = "chat"):
        super().__init__()
        self.backend, self.adapter, self.gen, self.progress, self.template = backend, adapter, gen, progress, template
        self.truncated: dict[int, list[bool]] = {}

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out: list[str] = []
        ends = end_ids(self.backend)
        for i in range(0, len(requests), self.gen.batch_size):
            chunk = requests[i:i + self.gen.batch_size]
            kwargs = chunk[0].args[1] or {}
            budget = int(kwargs.get("max_gen_toks") or self.gen.max_new_tokens)
            prompts = [render(self.backend, self.template, r.args[0]) for r in chunk]
            until = tuple(s for s in kwargs.get("until", []) if s)
            gens = self.backend.generate(prompts, [self.adapter] * len(chunk), budget,
                                         temperature=self.gen.temperature, top_p=self.gen.top_p,
                                         seed=self.gen.seed + i, stop=until, batch_size=self.gen.batch_size)
            out += [g.text for g in gens]
            for r, g in zip(chunk, gens):
                self.truncated.setdefault(r.doc_id, []).append(is_truncated(g, budget, ends))
            if self.progress is not None:
                self.progress(len(chunk))
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(LOGLIK_ERROR)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(LOGLIK_ERROR)
