"""Evaluation protocols: the settings that decide whether a score is comparable with published ones.

``azr`` is AZR's evaluation (its scripts, read at LeapLabTHU/Absolute-Zero-Reasoner @a82124e):
- math (``evaluation/math_eval/run.sh``): greedy, ``--max_tokens 16000``, ``--template azr``: the plain R1-style
  text of ``PROMPT_TEMPLATES["azr"]`` (``eval/utils.py``) around the bare question, no chat template; the answer is
  read by ``extract_azr_answer`` (``eval/parser.py``: the last <answer> block, its \\boxed{} if any);
- LiveCodeBench (``run_lcb_gen.sh``): 8,096 new tokens;
- EvalPlus (``run_evalplus.sh``): greedy, ``--min-time-limit 10 --gt-time-limit-factor 8``; EvalPlus's own
  default budget of 768 new tokens (``evalplus/provider/base.py``).
It is the default for any base model but the embedded one. ``quick`` is for CPU smoke checks of tiny models: 512
new tokens everywhere, the model's chat template, EvalPlus's default time limits (1 s, 4x).

Every field can be overridden in the eval config (``budgets``, ``generation.max_new_tokens``, the EvalPlus limits,
``generation.n_samples`` with ``generation.temperature``); what was used is recorded in results.json and in each
pair's resume key.

Decoding: both presets are greedy (one sample per problem). **Sampled evaluation** (``--n-samples N --temperature
T``, any preset): N samples per problem at temperature T on every benchmark, code and math; a problem's score is
the mean of its N verdicts (pass@1 averaged within the problem), so a per-problem score is a fraction in [0, 1]
and the problem stays the cluster of every bootstrap and interval (Miller 2024, "Adding Error Bars to Evals",
resampling within questions: Var = (var_between + var_within / N) / problems).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from populora.evaluation.harness import benchmarks

AZR_MATH_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>. "
    "User: {input}\nAssistant:")
CHAT, AZR = "chat", "azr"


def _budgets(code: int, lcb: int, math: int) -> dict[str, int]:
    out = {n: (lcb if n == "livecodebench" else code) for n in benchmarks.GROUPS["code"]}
    out.update({n: math for n in benchmarks.GROUPS["math"]})
    return out


@dataclass(frozen=True)
class Protocol:
    name: str
    budgets: dict[str, int]                  # max new tokens per benchmark
    math_template: str                       # chat | azr: how math questions are put to the model
    evalplus_min_time_limit: float           # s per test, at least
    evalplus_time_factor: float              # x the canonical solution's time
    overridden: list[str] = field(default_factory=list)  # which fields the config changed (shown in the report)
    samples: int = 1                         # samples per problem (1: greedy)
    temperature: float = 0.0                 # decoding temperature (0: greedy)

    def budget(self, benchmark: str) -> int:
        return self.budgets[benchmark]

    def template(self, benchmark: str) -> str:
        return self.math_template if benchmarks.BENCHMARKS[benchmark].group == "math" else CHAT

    def decoding(self) -> str:
        """The decoding in words.

        >>> PROTOCOLS["azr"].decoding(), replace(PROTOCOLS["azr"], samples=8, temperature=0.6).decoding()
        ('greedy', '8 samples per problem at temperature 0.6, pass@1 averaged within the problem')
        """
        if self.temperature == 0:
            return "greedy"
        return (f"{self.samples} sample{'s' if self.samples > 1 else ''} per problem at temperature "
                f"{self.temperature:g}, pass@1 averaged within the problem")

    def to_dict(self) -> dict:
        return {"name": self.name, "budgets": dict(self.budgets), "math_template": self.math_template,
                "evalplus_min_time_limit": self.evalplus_min_time_limit,
                "evalplus_time_factor": self.evalplus_time_factor, "overridden": list(self.overridden),
                "samples": self.samples, "temperature": self.temperature, "decoding": self.decoding()}


PROTOCOLS = {
    AZR: Protocol(AZR, _budgets(code=768, lcb=8096, math=16000), AZR, 10.0, 8.0),
    "quick": Protocol("quick", _budgets(code=512, lcb=512, math=512), CHAT, 1.0, 4.0),
}


def default_name(model) -> str:
    """``quick`` for the embedded model and tiny random models (CPU), ``azr`` for any other base."""
    return "quick" if model.tiny_random or model.base == "embedded" else AZR


def resolve(name: str | None, model, budgets: dict[str, int] | None = None, max_new_tokens: int | None = None,
            min_time_limit: float | None = None, time_factor: float | None = None, samples: int = 1,
            temperature: float = 0.0) -> Protocol:
    """The protocol ``name`` (default: :func:`default_name`) with the config's overrides applied; ``samples`` at
    ``temperature`` > 0: sampled evaluation (``samples`` 1 at temperature 0: the presets' greedy decoding).

    >>> class M: base, tiny_random = "Qwen/Qwen2.5-7B", False
    >>> p = resolve(None, M(), budgets={"gsm8k": 1024})
    >>> p.name, p.budget("gsm8k"), p.budget("aime24"), p.template("aime24"), p.overridden
    ('azr', 1024, 16000, 'azr', ['budgets.gsm8k'])
    """
    base = PROTOCOLS[name or default_name(model)]
    new = dict(base.budgets)
    overridden = []
    if max_new_tokens is not None:
        new = {n: max_new_tokens for n in new}
        overridden.append("generation.max_new_tokens")
    for bench, value in (budgets or {}).items():
        if bench not in new:
            raise ValueError(f"budgets.{bench}: unknown benchmark; valid: {', '.join(benchmarks.BENCHMARKS)}")
        new[bench] = value
        overridden.append(f"budgets.{bench}")
    out = replace(base, budgets=new)
    if min_time_limit is not None:
        out, _ = replace(out, evalplus_min_time_limit=min_time_limit), overridden.append("evalplus_min_time_limit")
    if time_factor is not None:
        out, _ = replace(out, evalplus_time_factor=time_factor), overridden.append("evalplus_time_factor")
    return resolve_decoding(replace(out, overridden=overridden), samples, temperature)


def resolve_decoding(proto: Protocol, samples: int, temperature: float) -> Protocol:
    """``proto`` decoding ``samples`` per problem at ``temperature`` (1 at 0: greedy), named among its overrides.

    >>> p = resolve_decoding(PROTOCOLS["quick"], 8, 0.6)
    >>> p.samples, p.temperature, p.overridden
    (8, 0.6, ['generation.temperature', 'generation.n_samples'])
    """
    if temperature < 0 or samples < 1 or (samples > 1 and temperature == 0):
        raise ValueError(f"samples {samples} at temperature {temperature}: sampling needs temperature > 0 and "
                         f"samples >= 1 (greedy: samples 1 at temperature 0)")
    keys = ("generation.temperature", "generation.n_samples")
    overridden = [k for k in proto.overridden if k not in keys]
    if temperature > 0:
        overridden += list(keys if samples > 1 else keys[:1])
    return replace(proto, samples=samples, temperature=temperature, overridden=overridden)
