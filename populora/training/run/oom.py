"""Out of memory: which setting to lower, with the figure ``populora plan`` gives for it.

Two ways a run runs out of memory, each ending with one message instead of a bare traceback:

- CUDA: ``torch.OutOfMemoryError`` raised in generation (KV cache, vLLM's share of the GPU) or in the update
  (activations of a micro-batch). ``populora train`` catches it (cli/training.py), the run ends FAILED, and
  ``explain`` names the phase (read from the traceback), the setting and the plan's figure for it on this GPU.
- CPU RAM: the kernel's OOM killer SIGKILLs the trainer, which runs no code. So the trainer writes the advice for
  both phases into its job dir when it starts (``write_advice``), and the job supervisor, seeing a SIGKILL no stop
  asked for, prints it (platform/jobs/restart.py); the figures are then the plan's against this machine's RAM.

The plan's model of memory (platform/plan.py ``memory_gb``): base weights + adapters + optimizer, plus the larger
of the update's activations (``optim.micro_batch`` sequences of ``optim.max_seq_len``), torch generation's KV cache
(``plan.GEN_BATCH`` = 16 rows per generate call, a fixed figure, at ``tasks.max_new_tokens_propose`` /
``tasks.max_new_tokens_solve``) and vLLM's share (``model.vllm_gpu_memory``).
"""

from __future__ import annotations

import dataclasses
import traceback
from pathlib import Path

import psutil
import torch

from populora.platform import plan
from populora.platform.files import write_atomic
from populora.platform.jobs.restart import ADVICE_FILE
from populora.training.config import TrainConfig
from populora.training.compute.workload import workload

UPDATE, GENERATION = "update", "generation"
# where a traceback's frames say which phase ran out: the update's modules, then generation's
_UPDATE_FILES = ("training/phases/update.py", "backends/policy_loss.py", "backends/logprobs.py")
_UPDATE_FUNCS = ("train_step", "_micro_step", "backward")
_GENERATION_FILES = ("training/phases/propose.py", "training/phases/solve.py", "training/phases/solver_batch.py", "training/phases/seeding.py",
                     "training/periodic_eval.py", "backends/generation.py", "backends/vllm.py", "backends/seeded_sampling.py")


def phase_of(tb) -> str | None:
    """The phase a traceback ran out of memory in: the innermost frame that names one (None: neither).

    >>> def update_step(): raise torch.OutOfMemoryError("x")
    >>> try:
    ...     update_step()
    ... except torch.OutOfMemoryError as e:
    ...     phase_of(e.__traceback__) is None
    True
    """
    for frame in reversed(traceback.extract_tb(tb)):
        name = frame.filename.replace("\\", "/")
        if name.endswith(_UPDATE_FILES) or frame.name in _UPDATE_FUNCS:
            return UPDATE
        if name.endswith(_GENERATION_FILES) or frame.name in ("generate", "generate_rows"):
            return GENERATION
    return None


def device(kind: str = "auto") -> plan.Gpu:
    """The memory the run has, as the plan's ``Gpu``: this CUDA GPU's (``kind`` cuda), else this machine's RAM."""
    if kind != "cpu" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return plan.Gpu(f"this GPU ({props.name})", props.total_memory / 2**30, 0.0, 0.0)
    return plan.Gpu("this machine's RAM", psutil.virtual_memory().total / 2**30, 0.0, 0.0)


def _memory(cfg: TrainConfig, g: plan.Gpu, **changes) -> dict:
    mc = cfg.model
    arch, _ = plan.find_architecture(mc.base)
    work = dataclasses.replace(workload(cfg, 1, cfg.ray.placement), **changes)
    return plan.memory_gb(arch, work, mc.dtype, mc.target_modules, mc.lora_rank, g)


def update_advice(cfg: TrainConfig, g: plan.Gpu) -> str:
    """Lower ``optim.micro_batch``: the plan's activations at it, per sequence, and the micro-batch that fits."""
    mb = cfg.optim.micro_batch
    m = _memory(cfg, g)
    fixed = m["base_weights"] + m["adapters"] + m["optimizer"]
    per_row = m["activations"] / mb
    fits = int((g.usable_gb - fixed) // per_row) if per_row > 0 else mb
    target = max(1, min(fits, mb // 2)) if mb > 1 else 1
    line = (f"lower optim.micro_batch (now {mb}): `populora plan` puts the update's activations at "
            f"{m['activations']:.2f} GB ({per_row:.2f} GB a sequence of optim.max_seq_len={cfg.optim.max_seq_len}) "
            f"next to {fixed:.2f} GB of weights, adapters and optimizer state; {g.name} has {g.usable_gb:.1f} usable GB")
    if mb > 1:
        return line + f": try optim.micro_batch={target}"
    ckpt = "" if cfg.model.activation_checkpointing else "set model.activation_checkpointing=true or "
    return line + f": it is already 1, so {ckpt}lower optim.max_seq_len"


def generation_advice(cfg: TrainConfig, g: plan.Gpu) -> str:
    """Lower the token budgets (torch generation's KV cache) or ``model.vllm_gpu_memory`` (vLLM's share)."""
    tc, m = cfg.tasks, _memory(cfg, g)
    if cfg.model.generation == "vllm":
        return (f"lower model.vllm_gpu_memory (now {cfg.model.vllm_gpu_memory}): `populora plan` gives vLLM "
                f"{m['vllm']:.2f} GB of {g.name}'s {g.memory_gib * 2**30 / plan.GB:.1f} GB (its copy of the base and "
                f"its KV cache) beside {m['base_weights'] + m['adapters'] + m['optimizer']:.2f} GB the trainer keeps")
    half = _memory(cfg, g, propose_new=max(1, tc.max_new_tokens_propose // 2), solve_new=max(1, tc.max_new_tokens_solve // 2))
    return (f"lower tasks.max_new_tokens_propose (now {tc.max_new_tokens_propose}) and tasks.max_new_tokens_solve "
            f"(now {tc.max_new_tokens_solve}): `populora plan` puts generation's KV cache at {m['generation_kv']:.2f} GB "
            f"({plan.GEN_BATCH} rows per generate call, a fixed figure), {half['generation_kv']:.2f} GB at half the budgets")


def advice(cfg: TrainConfig, phase: str | None, g: plan.Gpu | None = None) -> str:
    """What to lower for ``phase`` (None: both phases' settings), with the plan's figures on ``g``."""
    g = g or device(cfg.model.device)
    try:
        parts = {UPDATE: [update_advice(cfg, g)], GENERATION: [generation_advice(cfg, g)]}.get(
            phase, [update_advice(cfg, g), generation_advice(cfg, g)])
    except plan.PlanError as err:  # a base the plan has no shape for: the settings, without figures
        return (f"lower optim.micro_batch ({cfg.optim.micro_batch}), tasks.max_new_tokens_propose / _solve "
                f"({cfg.tasks.max_new_tokens_propose} / {cfg.tasks.max_new_tokens_solve}) or model.vllm_gpu_memory "
                f"({cfg.model.vllm_gpu_memory}); no plan figures: {err}")
    return "; or ".join(parts)


def lower_sets(cfg: TrainConfig, phase: str | None) -> list[str]:
    """The ``--set`` overrides the advice of ``phase`` comes to (the update's micro-batch halved, generation's
    budgets halved, vLLM's share less 0.1).

    >>> lower_sets(TrainConfig(), "update"), lower_sets(TrainConfig(), "generation")
    (['optim.micro_batch=2'], ['tasks.max_new_tokens_propose=80', 'tasks.max_new_tokens_solve=48'])
    """
    mc, tc, mb = cfg.model, cfg.tasks, cfg.optim.micro_batch
    if phase == UPDATE:
        return [f"optim.micro_batch={max(1, mb // 2)}"] if mb > 1 else ["model.activation_checkpointing=true"]
    if phase == GENERATION and mc.generation == "vllm":
        return [f"model.vllm_gpu_memory={max(0.05, round(mc.vllm_gpu_memory - 0.1, 2))}"]
    if phase == GENERATION:
        return [f"tasks.max_new_tokens_propose={max(16, tc.max_new_tokens_propose // 2)}",
                f"tasks.max_new_tokens_solve={max(8, tc.max_new_tokens_solve // 2)}"]
    return []


def explain(err: BaseException, cfg: TrainConfig, run_id: str, step: int, checkpointed: int = 0) -> str:
    """The one message a CUDA out-of-memory ends a run with: where, what ran out, what to lower, how to go on
    (``checkpointed``: the step of the run's last checkpoint, 0 for none: a fork of it keeps the steps done)."""
    phase = phase_of(err.__traceback__)
    where = f"in {phase}" if phase else "in a phase its traceback does not name"
    first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    sets = " ".join(f"--set {s}" for s in lower_sets(cfg, phase)) or "--set KEY=VALUE"
    again = (f"`populora train --fork {run_id} --step {checkpointed} {sets}` (a new run from its last checkpoint)"
             if checkpointed else f"the same command with {sets} (it had no checkpoint yet)")
    return f"out of GPU memory {where} at step {step} ({first}): {advice(cfg, phase)}. The run is FAILED; go on with {again}"


def write_advice(job_dir: Path | None, cfg: TrainConfig) -> None:
    """Inside a local job: the advice for both phases against this machine's RAM (CPU run) or GPU, for the
    supervisor to print if the OOM killer ends the trainer (it runs no code then)."""
    if job_dir is None:
        return
    try:
        write_atomic(Path(job_dir) / ADVICE_FILE, advice(cfg, None))
    except OSError:  # a full disk: the supervisor then names the settings without figures
        pass
