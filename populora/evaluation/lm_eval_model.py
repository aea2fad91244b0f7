"""An lm-eval ``LM`` that generates with the platform's model backend and one adapter.

lm-eval owns the tasks (prompts, data, metrics, aggregation); this class only turns its ``generate_until``
requests into ``backend.generate`` calls with our chat template and the evaluation's shared decoding settings
(``GenConfig``), so every adapter is scored with the same template, temperature and token budget.
"""

from __future__ import annotations

from lm_eval.api.model import LM

from populora.evaluation.generation import GenConfig, chat_prompt

LOGLIK_ERROR = ("PopuLoRA's backend LM is generative only: loglikelihood tasks (multiple choice, perplexity) are "
                "not supported; run them with lm-eval's own hf model on the merged adapter instead")


class BackendLM(LM):
    def __init__(self, backend, adapter: str | None, gen: GenConfig, progress=None):
        super().__init__()
        self.backend, self.adapter, self.gen, self.progress = backend, adapter, gen, progress

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out: list[str] = []
        for i in range(0, len(requests), self.gen.batch_size):
            chunk = requests[i:i + self.gen.batch_size]
            prompts = [chat_prompt(self.backend, r.args[0]) for r in chunk]
            until = tuple(s for s in (chunk[0].args[1] or {}).get("until", []) if s)
            gens = self.backend.generate(prompts, [self.adapter] * len(chunk), self.gen.max_new_tokens,
                                         temperature=self.gen.temperature, top_p=self.gen.top_p,
                                         seed=self.gen.seed + i, stop=until, batch_size=self.gen.batch_size)
            out += [g.text for g in gens]
            if self.progress is not None:
                self.progress(len(chunk))
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(LOGLIK_ERROR)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(LOGLIK_ERROR)
