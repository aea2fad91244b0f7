"""The training config: one typed schema, every field documented. Presets live in ``configs/*.yaml``."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, field_validator, model_validator

from populora.evaluation.harness import benchmarks
from populora.platform import config as config_io
from populora.platform.adam_config import AdamConfig
from populora.platform.config import ModelSource, Section
from populora.platform.ray_settings import check_ray, default_placement
from populora.training.evolve import operator_catalogue as catalogue

TaskKind = Literal["code_o", "code_i", "code_f", "planted"]  # planted: the learnable planted task (tasks/planted.py)


class ModelConfig(ModelSource):
    """The frozen base (``ModelSource``: base, gguf_file, tiny_random, dtype, shared with evaluation) and the adapters."""

    device: str = Field("auto", description="'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:1', ...")
    lora_rank: int = Field(8, ge=1, le=512, description="LoRA rank r of every adapter")
    lora_alpha: float = Field(16.0, gt=0, description="LoRA alpha (scale = alpha / r)")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout")
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], description="Linear modules that get LoRA")
    generation: Literal["torch", "vllm"] = Field("torch", description="torch: generate with the training backend; vllm: a vLLM engine with one LoRARequest per member (GPU, pip install 'populora-platform[vllm]')")
    vllm_gpu_memory: float = Field(0.45, gt=0, le=1, description="Fraction of GPU memory vLLM may take while it generates (its base copy + KV cache); it sleeps (weights to CPU RAM) while torch trains")
    vllm_engine: Literal["auto", "process", "inline"] = Field("auto", description="Where vLLM's engine runs: process (its engine core and worker in processes of their own, as vLLM runs on GPUs), inline (in the trainer or data-parallel worker that uses it: no second and third import of vLLM and torch, ~3x faster start on CPU), auto: inline on vLLM's CPU build, process elsewhere")
    activation_checkpointing: bool = Field(False, description="Recompute each decoder layer's activations in the backward pass: activation memory of one layer instead of all (what lets the 7B paper presets fit one 80 GB GPU), for ~1/3 more training compute")
    backend: Literal["multilora", "peft"] = Field("multilora", description="multilora: our batched multi-LoRA (one forward/backward for the whole population); peft: PEFT, one adapter per training forward (the reference)")


class PopulationConfig(Section):
    teachers: int = Field(2, ge=1, le=256, description="Number of teacher adapters")
    students: int = Field(2, ge=1, le=256, description="Number of student adapters")
    single_agent: bool = Field(False, description="Train the single-agent baseline: one adapter proposing and solving its own tasks")
    grow: Literal["mutation", "init"] = Field("mutation", description="A fork that raises teachers/students adds members by: mutation (children of the role's strongest, by evolution's mutation mix) or init (fresh adapters, as at step 0); a lowered size removes the weakest")


class MatchmakingConfig(Section):
    teachers_per_student: int = Field(1, ge=1, le=256, description="Teachers each student is matched with per step")
    pfsp: Literal["even", "hard", "uniform"] = Field("even", description="PFSP weighting of P(student beats teacher): even favours 50/50 matches, hard favours stronger teachers")
    pfsp_power: float = Field(2.0, gt=0, description="Exponent p of the 'hard' weighting (1-P)^p")
    rate_unsolved: bool = Field(True, description="Rate tasks no student solved as teacher wins (two-sided, zero-sum); false: the older one-sided rule that leaves them unrated")
    rate_invalid: bool = Field(True, description="An invalid task is a forfeit: its teacher loses one game to a fixed par rating (a new member's) per matched student; only the teacher's rating moves")


class TasksConfig(Section):
    kinds: list[TaskKind] = Field(default_factory=lambda: ["code_o", "code_i", "code_f"], description="Task kinds teachers propose")
    format: Literal["azr", "direct"] = Field("azr", description="azr: AZR's layout, reason in <think>...</think> then the result in <answer>...</answer> (the paper's method); "
                                            "direct: answer-only prompts prefilled up to a code fence, no reasoning trained (a reduction for tiny CPU models). "
                                            "Default: azr, except direct when model.base is 'embedded' and the field is not set")
    template: Literal["azr", "chat"] = Field("azr", description="azr: AZR's template for base models, R1-style plain text (\"... User: <task>\\nAssistant: <think>\"), "
                                            "no chat markup, no system prompt (the paper's setting); chat: the model's own chat template with the layout "
                                            "in a system turn (instruct models; needed by the direct format). Default: azr, except chat when "
                                            "tasks.format is direct and the field is not set")
    stop_at_answer: bool = Field(True, description="azr format: end a completion at </answer> (ours: the tokens after it earn nothing); "
                                 "false: sample to EOS as AZR does, the answer read from the last block either way")
    seed_buffer: int = Field(8, ge=1, le=4096, description="Valid tasks each kind's buffer holds before step 1, proposed by the base model at step 0 (AZR: 256)")
    seed_shared: bool = Field(False, description="AZR: code_i and code_o are seeded from one pool of programs (each valid seed task "
                              "enters both buffers); false (ours): each kind is seeded from its own proposals")
    seed_rounds: int = Field(2, ge=0, le=64, description="Bound on step-0 seeding: rounds of base-model proposals (each asks for every kind's missing count); "
                                                  "a kind with no valid proposal after them falls back to hand-written programs (warning + run tag)")
    tasks_per_teacher: int = Field(3, ge=1, le=256, description="Tasks each teacher proposes per step (kinds taken in turn)")
    references: int = Field(3, ge=0, le=16, description="Reference tasks from the kind's buffer shown in a propose prompt (AZR: 6)")
    buffer_size: int = Field(4096, ge=8, le=1_000_000, description="Max tasks per kind buffer (AZR max_programs: 16384)")
    buffer_full: Literal["drop_oldest", "drop_new"] = Field("drop_oldest", description="A full buffer drops its oldest task (ours: references "
                                                            "stay recent) or the new one (AZR keeps the first max_programs)")
    code_f_pool: Literal["all", "programs"] = Field("all", description="Programs a code_f teacher is shown: from every buffer, code_f's "
                                                    "included (ours), or from code_i + code_o only (AZR)")
    code_f_inputs: int = Field(10, ge=2, le=64, description="Inputs a teacher writes for a code_f task, all of which must run; the first half are shown, the rest held out (AZR: 10, 5 shown)")
    rollouts: int = Field(2, ge=1, le=64, description="Answers each matched student samples per task, when answers_per_task is not set")
    answers_per_task: int | None = Field(None, ge=1, le=256, description="Exactly this many answers per valid task (AZR n_samples: 8), "
                                         "spread over the students, each answering the same number, whose tasks drawn by PFSP "
                                         "(matchmaking.assign_answers); None: rollouts per matched student (4 to 16 per task at paper scale)")
    max_new_tokens_propose: int = Field(160, ge=16, le=16384, description="Token budget of a proposal")
    max_new_tokens_solve: int = Field(96, ge=8, le=16384, description="Token budget of an answer")
    temperature: float = Field(0.8, gt=0, description="Sampling temperature (AZR: 1.0)")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling top-p (AZR: 1, azr_ppo_trainer.yaml rollout.top_p). Below 1 the "
                         "sampler draws from a truncated distribution the update's log-probs do not see (off-policy: "
                         "learn/mismatch_* shows it on vLLM)")
    answer_check: Literal["azr", "strict"] = Field("azr", description="azr: as AZR's executor, an answer is any Python expression, evaluated in the sandbox, right iff "
                                                  "Python-equal to the gold value (2 == 2.0; a crash or timeout is wrong); strict: literal answers only, "
                                                  "equal canonical text with strict types (2 != 2.0)")
    single_function: bool = Field(False, description="AZR's rule (reject_multiple_functions): a program with more than one def (nested ones and methods "
                                  "included) is invalid; false (ours): helpers and classes allowed, only f must exist")
    rename_to_f: bool = Field(False, description="AZR's parsing (f_replace_location=not_first): a proposal's first function is the entry "
                              "function, renamed to f; false (ours): the program must define f itself")
    extra_bans: bool = Field(True, description="Ours: also ban OS/interpreter modules, builtins such as open/eval/__import__ and introspection "
                             "attributes, in any use; false: AZR's ban only (imports of its banned-module list)")
    banned_error_keywords: list[Literal["raise", "assert", "try", "except"]] = Field(
        default_factory=list, description="Statements a program may not use (AZR's banned_keywords_for_errors_and_exceptions; "
                                          "AZR's 7b.sh names raise but its code applies the list to code_e only, which its runs do not train)")
    code_f_message_required: bool = Field(False, description="AZR's rule: a code_f proposal without a ```message block is a format error; "
                                          "false (ours): the message is optional")
    code_f_distinct_inputs: bool = Field(True, description="Ours: a code_f proposal's first code_f_inputs distinct inputs are taken; "
                                         "false (AZR): its last code_f_inputs input blocks, duplicates allowed")
    code_f_distinct_outputs: bool = Field(True, description="Ours: a code_f task whose inputs all give the same output is invalid (nothing to "
                                          "induce); false: AZR has no such rule")
    estimate_format_check: bool = Field(True, description="Ours: an answer with a broken <think>/<answer> layout counts as unsolved in its "
                                        "task's solve rate; false (AZR, reward_managers.py:689-734): the solve-rate estimate reads the "
                                        "answer after the last <answer> without the format check (the student's reward stays a format error)")
    timeout_s: float = Field(5.0, gt=0, le=300, description="Sandbox wall-clock limit per execution")
    memory_mb: int = Field(512, ge=64, le=65536, description="Sandbox address-space limit per execution")


class SolverConfig(Section):
    """What the students train on. AZR: the answers that estimate a task's solve rate only set the proposer's
    reward; the solver trains on a separate batch per kind drawn from the buffers, one rollout each."""

    data: Literal["rollouts", "buffer"] = Field("rollouts", description="rollouts: students train on the answers that set the solve rates "
                                                "(this step's tasks only); buffer (AZR): those answers set rewards and ratings but are not "
                                                "trained on; each student trains on batch_per_kind tasks per kind drawn from the buffers "
                                                "(max_new: this step's additions first, then uniform), one answer each")
    batch_per_kind: int = Field(64, ge=1, le=4096, description="solver.data buffer: tasks per kind in each student's training batch (AZR: 64)")


class SandboxConfig(Section):
    allow_unconfined: bool = Field(False, description="Run model-written code even where the sandbox cannot confine it (no root, no user namespaces, or no seccomp); recorded as the run tag populora.sandbox.allow_unconfined")


class RewardConfig(Section):
    """Rewards as AZR's code pays them (absolute_zero_reasoner/rewards/reward_managers.py, ``split == 'train'``);
    where AZR's paper and code differ the field says both and which one is the default."""

    student_correct: float = Field(1.0, description="Student reward for a correct answer (AZR code and paper: 1)")
    student_wrong: float = Field(-0.5, description="Student reward for a well-formed wrong answer (AZR code and the paper's format-aware penalty: -0.5)")
    student_format_error: float = Field(-1.0, description="Student reward when no answer can be parsed (AZR code and paper: -1)")
    teacher_invalid: float = Field(-1.0, description="Teacher reward for an invalid task (AZR code and paper: -1, a format failure)")
    teacher_trivial_or_impossible: float = Field(0.0, description="Teacher reward when the solve rate is 0 or 1 (the paper's eq.: 0, "
                                                 "the default; AZR code: -0.5, see AZR issue #37); 1 - solve rate otherwise")


class OptimConfig(AdamConfig):
    """The update as AZR's veRL actor runs it: TRR++ advantages, then per adapter clipped policy-gradient steps on
    mini-batches (policy_loss.py), every log-prob at the sampling temperature (``tasks.temperature``). AZR's values:
    paper branch / master config.
    AdamW's own settings (``lr``, ``weight_decay``) are ``AdamConfig``'s (platform/adam_config.py), the one
    place an optimizer setting is declared; every backend builds its optimizer from this section."""

    grad_clip: float = Field(1.0, gt=0, description="Max grad norm per adapter and optimizer step (AZR: 1.0)")
    mini_batch_size: int | None = Field(None, ge=1, description="Rollouts per optimizer step, in AZR's order (one task kind at a time, "
                                        "its proposer then its solver rows; AZR ppo_mini_batch_size: 128); None = use mini_batches")
    mini_batches: int = Field(3, ge=1, description="Without mini_batch_size: optimizer steps per training step, each on a contiguous "
                              "slice of the adapter's rollouts whatever their number; 1 = one on-policy step")
    loss_agg: Literal["token-mean", "micro-token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = Field(
        "token-mean", description="How a mini-batch's per-token terms become its loss: token-mean over the mini-batch, "
        "micro-token-mean (AZR: the mean of its micro-batches' token means), or veRL's seq-mean-token-sum / seq-mean-token-mean")
    loss_micro_batch: int = Field(16, ge=1, le=4096, description="Rows per micro-batch of micro-token-mean (AZR ppo_micro_batch_size_per_gpu: 16); "
                                  "the loss's grouping only, not memory (that is micro_batch)")
    clip_ratio: float = Field(0.2, gt=0, lt=1, description="PPO ratio clip: the ratio is kept above 1 - clip_ratio (and below "
                              "1 + clip_ratio unless clip_ratio_high is set); AZR: 0.2")
    clip_ratio_high: float | None = Field(None, gt=0, description="Upper clip 1 + this; None = clip_ratio, as AZR's paper branch "
                                          "(AZR master's config: 0.28, DAPO's clip-higher)")
    entropy_coef: float = Field(0.001, ge=0, description="Entropy bonus weight (AZR paper branch: 0.001; AZR master: 0.0)")
    clip_ratio_c: float | None = Field(None, gt=1, description="Dual clip: a negative advantage's per-token loss capped at -A * clip_ratio_c "
                                       "(current veRL: 3); None = off, as AZR's copy")
    kl_coef: float = Field(0.0, ge=0, description="KL(adapter || base) loss coefficient (AZR: 0, use_kl_loss false); KL is logged either way")
    kl_estimator: Literal["low_var_kl", "k3", "kl", "k1", "mse", "k2", "abs"] = Field(
        "low_var_kl", description="Per-token KL estimator of the KL term and its log (AZR kl_loss_type: low_var_kl = k3; "
        "k1 = kl has zero expected gradient on on-policy samples, k2 = mse follows the exact KL's)")
    advantage_scope: Literal["population", "member"] = Field("population", description="Whiten advantages per (role, kind) over the whole population or per member")
    micro_batch: int = Field(4, ge=1, le=1024, description="Sequences per forward/backward (gradients accumulate within a mini-batch)")
    log_kl: bool = Field(True, description="Compute KL(adapter || base) on the rollouts for logging (one extra base forward per micro-batch)")
    kl_every: int = Field(1, ge=1, le=10_000, description="Log the KL every N steps only (its base forward is ~1/3 of a step's training compute); "
                          "kl_coef > 0 computes it every step regardless")
    max_seq_len: int = Field(1024, ge=64, le=131072, description="Longest prompt+response used in the update (longer are truncated from the left); "
                             "with model.generation=vllm also vLLM's max_model_len (a longer prompt gets an empty completion)")
    # rollout correction (platform/backends/rollout_correction.py); AZR's vendored veRL has none (its
    # compute_policy_loss, verl/verl/trainer/ppo/core_algos.py:272 at 41ed983, takes no rollout log-probs)
    rollout_correction: Literal["none", "tis", "mis"] = Field("none", description="Reweight each token's policy-gradient "
                                    "term by pi_trainer / pi_generator where the generator is not the trainer (vLLM): tis "
                                    "truncates the weight at the cap (veRL, slime), mis drops tokens outside [1/cap, cap] "
                                    "(slime); none (AZR) leaves it be. Needs generator log-probs (model.generation=vllm)")
    rollout_correction_cap: float = Field(2.0, ge=1, description="tis: largest weight kept; mis: tokens whose ratio is "
                                          "outside [1/cap, cap] are dropped (veRL's rollout_is_threshold and slime's "
                                          "tis_upper_bound default: 2.0)")


def _mix_check(kind: str, mix: dict[str, float]) -> dict[str, float]:
    """Operator names of ``kind`` with weights >= 0; a wrong name is refused naming the valid ones."""
    valid, other = (catalogue.MUTATIONS, catalogue.CROSSOVERS) if kind == "mutation" else (catalogue.CROSSOVERS, catalogue.MUTATIONS)
    for name, weight in mix.items():
        if name in other:
            raise ValueError(f"{name!r} is a {other[name].kind}, not a {kind}; move it to evolution.operators."
                             f"{other[name].kind}s (valid {kind}s: {', '.join(valid)})")
        if name not in valid:
            raise ValueError(f"unknown {kind} operator {name!r}; valid: {', '.join(valid)}")
        if not weight >= 0:
            raise ValueError(f"{kind} operator {name!r} has weight {weight}; weights are >= 0 (0 = never used)")
    if mix and sum(mix.values()) <= 0:
        raise ValueError(f"every {kind} weight is 0; give at least one operator a positive weight")
    return mix


class OperatorMix(Section):
    """Which operators make children, and how often: name -> weight, normalised within each kind. A child is a
    crossover with probability ``evolution.crossover_prob`` (else a mutation), then its operator is drawn from
    that kind's weights. The family and the defaults: docs/evolution.md."""

    mutations: dict[str, float] = Field(default_factory=lambda: {n: 1.0 for n in catalogue.MUTATIONS},
                                        description=f"Mutation name -> weight (default: all equal): {', '.join(catalogue.MUTATIONS)}")
    crossovers: dict[str, float] = Field(default_factory=lambda: {n: 1.0 for n in catalogue.CROSSOVERS},
                                         description=f"Crossover name -> weight (default: all equal): {', '.join(catalogue.CROSSOVERS)}")

    @field_validator("mutations")
    @classmethod
    def _mutations(cls, v: dict[str, float]) -> dict[str, float]:
        return _mix_check("mutation", v)

    @field_validator("crossovers")
    @classmethod
    def _crossovers(cls, v: dict[str, float]) -> dict[str, float]:
        return _mix_check("crossover", v)


class EvolutionConfig(Section):
    every: int = Field(2, ge=0, description="Evolve every N steps (0 = never)")
    replace_fraction: float = Field(0.25, ge=0, le=1, description="Fraction of each role replaced per evolution (at least 1 when > 0)")
    conservative_k: float = Field(0.0, ge=0, description="Rank members by mu - k * sigma; 0 = by mu. k = 3 (TrueSkill's "
                                  "leaderboard score) ranks every child, whose sigma is widened, weakest at its first "
                                  "evolution: docs/evolution.md")
    crossover_prob: float = Field(0.5, ge=0, le=1, description="Probability a child is a crossover (else a mutation)")
    operators: OperatorMix = Field(default_factory=OperatorMix, description="The operator mix: evolution.operators.mutations / .crossovers, name -> weight")
    strength: dict[str, float] = Field(default_factory=dict, description="Operator name -> strength, replacing its default "
                                       "(gaussian 0.05, svd_noise 0.06, layer_gaussian 0.1, mask 0.0625, neftune 0.09, dare 0.1, extrapolate 0.5; docs/evolution.md)")
    selection: Literal["truncation", "tournament", "fuss"] = Field("truncation", description="How a parent is drawn from the members "
                                                                   "that survive the evolution: truncation (uniform among them), tournament "
                                                                   "(the fittest of tournament_size drawn), fuss (fitness-uniform: a fitness "
                                                                   "drawn uniformly between the lowest and highest, the nearest member)")
    tournament_size: int = Field(2, ge=2, le=64, description="selection: tournament: members drawn per tournament")
    xes_parents: int = Field(4, ge=2, le=64, description="Most parents of an xes (fitness-weighted) crossover: the fittest survivors")
    crossover: Literal["svd", "swap"] | None = Field(None, description="Deprecated (older configs): svd = only svd_fit, swap = only component_swap")
    mutation_scale: float | None = Field(None, ge=0, description="Deprecated (older configs): the gaussian mutation's strength")
    sigma_widen: float = Field(1.5, ge=1, description="Child sigma = parents' sigma * this")

    @field_validator("strength")
    @classmethod
    def _strength(cls, v: dict[str, float]) -> dict[str, float]:
        for name, value in v.items():
            if name not in catalogue.FAMILY:
                raise ValueError(f"unknown operator {name!r}; valid: {', '.join(catalogue.FAMILY)}")
            if not value >= 0:
                raise ValueError(f"{name!r} has strength {value}; strengths are >= 0")
        return v

    @model_validator(mode="after")
    def _usable(self) -> "EvolutionConfig":
        if self.crossover_prob < 1 and not self.mix("mutation"):
            raise ValueError("evolution.operators.mutations is empty, but crossover_prob < 1 asks for mutations; "
                             f"name at least one of {', '.join(catalogue.MUTATIONS)}, or set crossover_prob: 1")
        if self.crossover_prob > 0 and not self.mix("crossover"):
            raise ValueError("evolution.operators.crossovers is empty, but crossover_prob > 0 asks for crossovers; "
                             f"name at least one of {', '.join(catalogue.CROSSOVERS)}, or set crossover_prob: 0")
        return self

    def mix(self, kind: str) -> dict[str, float]:
        """The weights of one kind's operators (the deprecated ``crossover`` field, when set, wins)."""
        if kind == "crossover" and self.crossover is not None:
            return {"svd_fit" if self.crossover == "svd" else "component_swap": 1.0}
        return self.operators.mutations if kind == "mutation" else self.operators.crossovers

    def strength_of(self, name: str) -> float:
        if name == "gaussian" and self.mutation_scale is not None and name not in self.strength:
            return self.mutation_scale
        return self.strength.get(name, catalogue.FAMILY[name].strength)


class CheckpointConfig(Section):
    every: int = Field(1, ge=1, description="Checkpoint every N steps; metrics reach MLflow at each checkpoint so a resume never duplicates them")
    log_adapters_every: int = Field(0, ge=0, description="Also upload adapters to MLflow every N steps (0 = only at the end)")
    keep: int = Field(2, ge=1, le=1_000_000, description="Checkpoints kept on disk (the newest); a run can be forked (populora train --fork) from any kept one")


class BudgetConfig(Section):
    """A compute budget as the stopping rule (training/compute/budget.py): train until the run's per-adapter ledger
    (``compute/per_adapter/generated_tokens`` + ``trained_tokens``) reaches a target, ``steps`` then being only a
    cap. At most one target: a number, the ledger of a run, or the ledger of this run's population (the
    compute-matched baseline's default: followed while the population trains, final when it ends)."""

    tokens: float | None = Field(None, gt=0, description="Target per-adapter tokens (generated + trained, the ledger's); None: no budget")
    run: str | None = Field(None, description="MLflow run id whose per-adapter ledger is the target (followed while it trains, its final value once it ends)")
    population: bool = Field(False, description="The target is this run's population's per-adapter ledger: the run sharing its `pair`, "
                             "else its sweep seed's population run(s) (the largest); what the matched baseline uses")
    tolerance: float = Field(0.05, gt=0, le=0.5, description="The realised spend must end within this fraction of the target; "
                             "a step is taken only if its largest likely spend ends inside target + tolerance/2")
    poll_s: float = Field(10.0, gt=0, le=3600, description="Seconds between reads of a followed run's ledger while waiting for it")

    @model_validator(mode="after")
    def _one_target(self) -> "BudgetConfig":
        given = [k for k in ("tokens", "run", "population") if getattr(self, k)]
        if len(given) > 1:
            raise ValueError(f"budget has {len(given)} targets ({', '.join(given)}); set one of budget.tokens, budget.run, budget.population")
        return self

    @property
    def on(self) -> bool:
        return bool(self.tokens or self.run or self.population)


class PeriodicEvalConfig(Section):
    """In-training evaluation: every ``every`` steps the trainer scores each alive member (a baseline run: its one
    adapter) on a fixed, seeded subset of benchmarks, in its own process with its own loaded backend, and logs
    ``eval/<benchmark>/<metric>`` on the member runs and the population's mean / weakest / best on the parent. A
    monitor: the subset is small and the weakest / best are picked on the same problems they are scored on; the
    full evaluation is ``populora eval``. Its compute is logged apart (``compute/eval/*``, ``time/eval_s``) and
    never counts in the compute-matching of a population and its baseline."""

    every: int = Field(0, description="Evaluate every K steps (0 = off); also at the last step when K does not divide steps")
    benchmarks: str = Field("gsm8k", description="Benchmark names (humaneval_plus, mbpp_plus, livecodebench, aime24, ..., "
                            "gsm8k, olympiadbench) or the groups code, math, all; comma-separated")
    limit: int = Field(20, description="Items per benchmark in the subset, drawn once per run from `seed` (not comparable to full scores)")
    seed: int = Field(0, description="Seed of the subset draw, not the run's seed: a population and its baseline with the "
                      "same seed here score the same problems")
    protocol: Literal["auto", "azr", "quick"] = Field("auto", description="Token budgets and templates as `populora eval`'s "
                                                     "protocol; auto: quick for the embedded or a tiny random model, azr otherwise")
    max_new_tokens: int | None = Field(None, ge=1, le=131072, description="Token budget per completion for every benchmark "
                                       "(default: the protocol's, e.g. 16,000 for azr's math)")
    batch_size: int = Field(8, ge=1, le=4096, description="Prompts per generation batch (per member; members share batches)")

    @field_validator("every")
    @classmethod
    def _every(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must be 0 (off) or a number of steps >= 1; e.g. eval.every=10")
        return v

    @field_validator("limit")
    @classmethod
    def _limit(cls, v: int) -> int:
        if v < 1:
            raise ValueError("is the number of items per benchmark, at least 1; e.g. eval.limit=20")
        return v

    @field_validator("benchmarks", mode="before")
    @classmethod
    def _benchmarks(cls, v):
        if isinstance(v, (list, tuple)):  # a YAML list reads as the comma-separated names
            v = ",".join(str(x) for x in v)
        if not isinstance(v, str):
            raise ValueError("must be names like gsm8k,mbpp_plus or a group (code, math, all)")
        try:
            return ",".join(benchmarks.select(v))
        except benchmarks.DataError as err:  # unknown or empty: the message lists the valid names
            raise ValueError(str(err)) from None

    @property
    def names(self) -> list[str]:
        return self.benchmarks.split(",")


class RayConfig(Section):
    address: str | None = Field(None, description="None: no Ray; 'local': start Ray here; 'auto' or 'ray://host:port': join a cluster "
                                   "(the UI's Launch page then submits the run to it as a Ray Job)")
    model_workers: int = Field(1, ge=1, le=1024, description="Model-worker actors (one per GPU), each holding the base and, per ray.placement, every adapter or its members' adapters")
    placement: Literal["auto", "data_parallel", "by_member"] = Field(
        "auto", description="data_parallel: every worker holds every adapter, each phase's rows are dealt over all workers and "
                          "LoRA gradients all-reduced (every GPU works on every step, the baseline included); by_member: "
                          "members spread over workers, a member on one GPU only. auto: data_parallel when model workers "
                          "use GPUs (model.device cuda or ray.gpus_per_worker > 0), else by_member (docs/scale-out.md)")
    sandbox_workers: int = Field(2, ge=1, le=1024, description="Sandbox actors the verifier requests are spread over")
    gpus_per_worker: float = Field(0.0, ge=0, le=16, description="GPUs reserved per model worker: 1 on a GPU cluster (must be > 0 with model.device=cuda, or every worker loads onto the same GPU)")
    cpus_per_model_worker: float = Field(1.0, ge=0, le=1024, description="CPUs reserved per model worker")
    cpus_per_sandbox_worker: float = Field(0.5, ge=0, le=1024, description="CPUs reserved per sandbox actor (all actors must fit the cluster, or Ray waits)")
    num_cpus: int | None = Field(None, ge=1, le=4096, description="CPUs of a 'local' Ray instance (default: all, or what the run's "
                                 "actors reserve if that is more: they share the cores rather than wait for CPUs that never come)")

    def job_slots(self) -> int:
        """How many of the machine's job-queue slots (one per GPU) a run holds while it runs: a training on a local
        Ray with N GPU model workers (``address: local``, ``model_workers`` x ``gpus_per_worker``, e.g.
        data-parallel on every GPU) takes that many; anything else one. A Ray cluster's own scheduler places a
        cluster run.

        >>> RayConfig(address="local", model_workers=4, gpus_per_worker=1).job_slots()
        4
        >>> RayConfig(address="auto", model_workers=4, gpus_per_worker=1).job_slots(), RayConfig(address="local", model_workers=2).job_slots()
        (1, 1)
        """
        if self.address != "local" or not self.gpus_per_worker:
            return 1
        return max(1, self.model_workers * math.ceil(self.gpus_per_worker))


class TrainConfig(Section):
    name: str = Field("populora", description="Run name shown in MLflow")
    experiment: str = Field("populora", description="MLflow experiment name")
    steps: int = Field(4, ge=1, le=1_000_000, description="Training steps (with a budget: the most steps it may take)")
    seed: int = Field(0, description="Seed of every random generator")
    output_dir: str = Field("runs", description="Where run dirs (checkpoints, adapters) are written")
    baseline_run: str | None = Field(None, description="MLflow run id of the single-agent baseline to compare this population with")
    pair: str | None = Field(None, description="Id shared by a population run and its compute-matched baseline started together "
                             "(Launch's baseline box, train --baseline): whichever starts second links both runs "
                             "(populora.baseline_run / populora.baseline_of)")
    model: ModelConfig = ModelConfig()
    population: PopulationConfig = PopulationConfig()
    matchmaking: MatchmakingConfig = MatchmakingConfig()
    tasks: TasksConfig = TasksConfig()
    reward: RewardConfig = RewardConfig()
    solver: SolverConfig = SolverConfig()
    optim: OptimConfig = OptimConfig()
    evolution: EvolutionConfig = EvolutionConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    ray: RayConfig = RayConfig()
    sandbox: SandboxConfig = SandboxConfig()
    eval: PeriodicEvalConfig = PeriodicEvalConfig()
    budget: BudgetConfig = BudgetConfig()

    @model_validator(mode="after")
    def _consistent(self) -> "TrainConfig":
        if self.matchmaking.teachers_per_student > self.population.teachers and not self.population.single_agent:
            raise ValueError(
                f"matchmaking.teachers_per_student ({self.matchmaking.teachers_per_student}) exceeds "
                f"population.teachers ({self.population.teachers}); lower it or add teachers"
            )
        if "format" not in self.tasks.model_fields_set and self.model.base == "embedded":
            self.tasks.format = "direct"  # the 135M embedded model cannot follow the azr layout; named as a reduction
        if "template" not in self.tasks.model_fields_set and self.tasks.format == "direct":
            self.tasks.template = "chat"  # the direct format's few-shot turns need roles
        if self.tasks.template == "azr" and self.tasks.format == "direct":
            raise ValueError("tasks.template 'azr' (plain text, no roles) cannot carry tasks.format 'direct' (few-shot "
                             "chat turns); set tasks.template: chat, or tasks.format: azr")
        if not self.tasks.kinds:
            raise ValueError("tasks.kinds is empty; list at least one of code_o, code_i, code_f")
        if self.budget.population and not self.population.single_agent:
            raise ValueError("budget.population matches a baseline to its population's ledger; this config is a "
                             "population: set population.single_agent=true, or give budget.tokens / budget.run instead")
        if self.ray.placement == "auto":
            self.ray.placement = default_placement(self.model.device, self.ray.gpus_per_worker)
        if self.ray.address == "local":
            r = self.ray
            reserved = r.model_workers * r.cpus_per_model_worker + r.sandbox_workers * r.cpus_per_sandbox_worker
            if r.num_cpus is None and reserved > (os.cpu_count() or 1):
                r.num_cpus = math.ceil(reserved)
            elif r.num_cpus is not None and reserved > r.num_cpus:  # Ray would wait forever for the actors left out
                raise ValueError(
                    f"ray.num_cpus={r.num_cpus} is fewer than the {reserved:g} CPUs the actors reserve (ray.model_workers="
                    f"{r.model_workers} x ray.cpus_per_model_worker={r.cpus_per_model_worker:g} + ray.sandbox_workers="
                    f"{r.sandbox_workers} x ray.cpus_per_sandbox_worker={r.cpus_per_sandbox_worker:g}): the actors that do "
                    f"not fit would never start; set ray.num_cpus={math.ceil(reserved)} or leave it unset")
        if self.ray.address:
            m = self.model
            check_ray(m.generation, m.backend, m.device, self.ray.gpus_per_worker, self.ray.placement)
        return self


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> TrainConfig:
    """A preset (or the defaults) with ``key=value`` overrides, validated (raises ``ConfigError`` naming the field)."""
    return config_io.load(TrainConfig, path, overrides)


def job_slots(config_yaml: str) -> int:
    """``RayConfig.job_slots`` of a training config's YAML (a launch's, a sweep run's, or the config a run logged,
    for its resume): what its job passes as ``need`` to ``platform.jobs``. Only the ``ray`` section's known keys
    are read, so a config logged by an older version sizes its resume too.

    >>> job_slots("ray: {address: local, model_workers: 2, gpus_per_worker: 1}\\nmodel: {device: cuda}"), job_slots("")
    (2, 1)
    """
    ray = (yaml.safe_load(config_yaml) or {}).get("ray") or {}
    return RayConfig.model_validate({k: v for k, v in ray.items() if k in RayConfig.model_fields}).job_slots()


def presets_dir() -> Path:
    """The shipped presets: ``populora/configs`` (in a checkout, a link to its ``configs/``)."""
    return config_io.PRESETS


def presets() -> dict[str, Path]:
    """Preset name (file stem) -> path of every ``configs/*.yaml``."""
    folder = presets_dir()
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}
