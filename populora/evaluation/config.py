"""The evaluation config (``populora eval``): one typed schema, every field documented, unknown keys rejected.

``populora eval``'s flags map onto its fields (``--limit`` -> ``limit``, ``--temperature`` ->
``generation.temperature``, ...); ``--config eval.yaml`` and ``--set key=value`` set any of them. A training run
is scored on the base model its own ``TrainConfig`` names (``run_model``), never on ``model`` here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml

from pydantic import Field, model_validator

from populora.evaluation.harness import benchmarks
from populora.evaluation.harness import protocol as P
from populora.evaluation.harness.generation import GenConfig
from populora.platform import config as config_io
from populora.platform.store import runlayout as rl
from populora.platform.config import ModelSource, Section

SOURCES = ("run", "sweep", "adapter", "base_only", "export_tasks")  # what to evaluate: exactly one


class EvalConfig(Section):
    run: str | None = Field(None, description="MLflow run id of a training run: its members, its baseline and the base model its own config names")
    sweep: str | None = Field(None, description="A sweep id: every finished run of it (members; its baselines as their own runs), one shared configuration")
    adapter: str | None = Field(None, description="One PEFT adapter dir, scored on `model`")
    base_only: bool = Field(False, description="Score only the bare base model `model`")
    export_tasks: str | None = Field(None, description="Write the lm-eval math task YAMLs for `data_dir` into this dir and exit")
    step: int | None = Field(None, ge=1, description="With `run`: score the adapters of its checkpoint at this "
                             "training step (the members alive then) instead of the final ones; results in <run dir>/"
                             "eval/step_NNNNNN")
    members: str = Field("all", description="all (every member with a saved adapter), alive, or ids like T0,S1")
    baseline: str | None = Field(None, description="Run id of the single-agent baseline (default: the run's populora.baseline_run tag)")
    include_baseline: bool = Field(True, description="With `run`: also score its single-agent baseline (`baseline`, "
                                   "else the run's populora.baseline_run tag), when it has one")
    include_base: bool = Field(True, description="Also score the bare base model (its row in the table)")
    sweep_base: bool = Field(False, description="With `sweep`: also score the bare base model on each run (off by "
                             "default: the same model on every run; `include_base` does not apply to a sweep)")
    benchmarks: str = Field("all", description="Names (humaneval_plus, ..., olympiadbench) or the groups code, math, all")
    limit: int | None = Field(None, ge=1, description="First N items of each benchmark (smoke checks; not comparable to full scores)")
    data_dir: str | None = Field(None, description="Benchmark files + SHA256SUMS (default: $POPULORA_DATA_DIR, else ../shared/data/benchmarks)")
    out: str | None = Field(None, description="Eval output dir, resumable (default: <run dir>/eval, or ./populora-eval/<name>)")
    device: str = Field("auto", description="'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:1', ...")
    backend: Literal["multilora", "peft"] | None = Field(
        None, description="model backend: batched multi-LoRA or PEFT, same greedy outputs (default: the run's "
        "model.backend; multilora for adapter / base_only)")
    batched: bool = Field(True, description="Every target of a benchmark at once in mixed-adapter batches (same "
                          "greedy scores, much faster); false: one (target, benchmark) pair at a time. Sampling "
                          "(temperature > 0) always runs one at a time")
    protocol: Literal["azr", "quick"] | None = Field(
        None, description="azr: AZR's evaluation (greedy; math 16,000 new tokens in AZR's plain template, LCB 8,096, "
        "EvalPlus 768 with 10 s / 8x time limits): comparable with published numbers; quick: 512 tokens, chat "
        "template, EvalPlus's 1 s / 4x, for CPU smoke checks. Default: quick for the embedded or a tiny random "
        "model, azr for any other base")
    budgets: dict[str, int] = Field(default_factory=dict, description="Max new tokens per benchmark, over the "
                                    "protocol's (e.g. {gsm8k: 1024}); generation.max_new_tokens sets all at once")
    evalplus_min_time_limit: float | None = Field(None, gt=0, description="EvalPlus: seconds per test at least "
                                                  "(default: the protocol's)")
    evalplus_time_factor: float | None = Field(None, gt=0, description="EvalPlus: time limit as a multiple of the "
                                               "canonical solution's time (default: the protocol's)")
    regrade: bool = Field(False, description="Re-score the saved samples of an earlier evaluation with today's "
                          "graders (no generation, no model) and rewrite results.json; needs the same out dir")
    model: ModelSource = Field(default_factory=ModelSource, description="The base model of `adapter` / `base_only` (a run's comes from its own config)")
    generation: GenConfig = Field(default_factory=GenConfig, description="Decoding, the same for every adapter")

    @model_validator(mode="after")
    def _one_source(self) -> "EvalConfig":
        chosen = [name for name in SOURCES if getattr(self, name)]
        if not chosen:
            raise ValueError("say what to evaluate: run (--run RUN_ID), sweep (--sweep ID), adapter (--adapter PATH), "
                             "base_only (--base-only) or export_tasks (--export-tasks DIR)")
        if len(chosen) > 1:
            raise ValueError(f"{' and '.join(chosen)} exclude each other: evaluate one of them")
        if (self.run or self.sweep) and "model" in self.model_fields_set:
            raise ValueError("model.* is for adapter / base_only: a run is scored on the base model its own config "
                             "names; drop model.* (--model, --gguf-file, --tiny-random)")
        if not self.export_tasks:
            try:
                benchmarks.select(self.benchmarks)
            except benchmarks.DataError as err:
                raise ValueError(f"benchmarks: {err}") from None
        unknown = [b for b in self.budgets if b not in benchmarks.BENCHMARKS]
        if unknown:
            raise ValueError(f"budgets: unknown benchmark(s) {', '.join(unknown)}; valid: {', '.join(benchmarks.BENCHMARKS)}")
        if any(v < 1 for v in self.budgets.values()):
            raise ValueError("budgets: every budget must be a positive number of tokens")
        if self.step is not None and not self.run:
            raise ValueError("step (--step N) scores a checkpoint of a training run: add run (--run RUN_ID)")
        if self.sweep_base and not self.sweep:
            raise ValueError("sweep_base (--base) is for sweep; for a run, adapter or base_only set include_base "
                             "(default true; --no-base turns it off)")
        return self

    def resolved_protocol(self, model: ModelSource):
        """The protocol with this config's overrides, for the base model ``model`` (a run's own)."""
        return P.resolve(self.protocol, model, self.budgets, self.generation.max_new_tokens,
                         self.evalplus_min_time_limit, self.evalplus_time_factor, self.generation.sampled,
                         self.generation.temperature)


class ReportConfig(Section):
    """``populora report``: the table of one evaluated run (``run`` or ``results``), or the statistics of a sweep."""

    run: str | None = Field(None, description="MLflow run id that populora eval --run evaluated")
    results: str | None = Field(None, description="A results.json written by populora eval (no MLflow needed)")
    sweep: str | None = Field(None, description="A sweep id: per-configuration intervals over seeds and paired tests vs the baseline")
    step: int | None = Field(None, ge=1, description="With `run`: the evaluation of its checkpoint at this step "
                             "(populora eval --run RUN --step N), not of its final adapters")
    out: str | None = Field(None, description="Where to write the report files (default: next to the results; "
                            "for a sweep <sweeps dir>/<id>/report)")
    as_json: bool = Field(False, description="Last line of stdout: one JSON object (configs with intervals, comparisons)")
    between: list[tuple[str, str]] = Field(default_factory=list, description="With `sweep`: also compare these pairs "
                                           "of configurations (their labels, as the report prints them)")

    @model_validator(mode="after")
    def _one_source(self) -> "ReportConfig":
        chosen = [name for name in ("run", "results", "sweep") if getattr(self, name)]
        if len(chosen) != 1:
            raise ValueError("report one of: run (--run RUN_ID), results (--results FILE) or sweep (--sweep ID)"
                             + (f"; got {' and '.join(chosen)}" if chosen else ""))
        if self.between and not self.sweep:
            raise ValueError("between (--between A B) compares configurations of a sweep: add --sweep ID")
        if self.step is not None and not self.run:
            raise ValueError("step (--step N) reports a checkpoint's evaluation of a training run: add run (--run RUN_ID)")
        return self


def run_model(run_id: str, run_dir: str | Path, store: str | None = None) -> ModelSource:
    """The base a training run was trained on: the ``model`` section of the run's own config, the ``config.yaml``
    that ``populora train`` writes into the run dir, else (given the run's MLflow ``store`` URI) the copy it logs
    as an artifact of the run; ``ConfigError`` if neither is there. Only the section's ``ModelSource`` fields are
    read (training's ``model`` section extends ``ModelSource``), so evaluation needs no part of training's schema."""
    path = Path(run_dir) / rl.CONFIG_FILE
    if path.is_file():
        text, source = path.read_text(), f"config of run {run_id} ({path})"
    elif store:
        try:
            text, source = rl.read_text(store, run_id, rl.CONFIG_FILE), f"config artifact of run {run_id}"
        except Exception as err:  # MLflow raises several types for a missing artifact
            raise config_io.ConfigError(
                f"run {run_id} has no config at {str(path)!r} nor a {rl.CONFIG_FILE} artifact ({str(err)[:100]}); "
                f"score its adapters with --adapter DIR --model BASE instead") from None
    else:
        raise config_io.ConfigError(f"run {run_id} has no config at {str(path)!r} (populora train writes <run dir>/"
                                    f"{rl.CONFIG_FILE}; is the run dir on another machine?); score its adapters with "
                                    f"--adapter DIR --model BASE instead")
    model = (yaml.safe_load(text) or {}).get("model") or {}
    return config_io.build(ModelSource, {k: v for k, v in model.items() if k in ModelSource.model_fields},
                           source=f"model section of the {source}")
