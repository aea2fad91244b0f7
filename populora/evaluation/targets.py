"""What an evaluation scores: a run's members, its single-agent baseline, the bare base model, or one adapter dir.

Read from what training leaves in MLflow and on disk: the parent run (tags ``populora.kind``, ``populora.run_dir``,
``populora.baseline_run``), its config (``<run dir>/config.yaml``: the base model the adapters were trained on)
and one child run per member (tags ``populora.member_id``, ``populora.role``, ``populora.alive``,
``populora.adapter_dir``; artifact ``adapter/``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from populora.evaluation.config import run_model
from populora.platform.store import runlayout
from populora.platform.config import ModelSource
from populora.platform.model.lora_spec import LoraSpec, read_lora_spec

MEMBER, BASELINE, BASE = "member", "baseline", "base"
BASE_LABEL = "base model"


class TargetError(ValueError):
    """An unknown run, member or adapter; the message lists what is valid."""


@dataclass
class Target:
    label: str                     # row label: member id (T0, S1), "baseline (B0)", "base model", or a dir name
    kind: str                      # member | baseline | base
    adapter_dir: str | None        # a PEFT adapter dir; None = the bare base model
    mlflow_run: str | None = None  # where the scores are logged (the member's child run)
    info: dict = field(default_factory=dict)  # role, alive, ... (shown in results.json)


def get_run(tracker, run_id: str):
    from mlflow.exceptions import MlflowException

    try:
        return tracker.get_run(run_id)
    except MlflowException as err:
        raise TargetError(f"no MLflow run {run_id!r} in {tracker.client.tracking_uri} ({str(err)[:100]}); "
                          f"list runs with: populora runs") from err


def _adapter_dir(tracker, child) -> str | None:
    """The member's adapter on local disk; else its ``adapter/`` artifact, downloaded (remote stores)."""
    local = child.data.tags.get(runlayout.ADAPTER_DIR)
    if local and (Path(local) / "adapter_config.json").is_file():
        return local
    import mlflow

    try:
        path = mlflow.artifacts.download_artifacts(run_id=child.info.run_id, artifact_path=runlayout.ADAPTER)
    except Exception:  # noqa: BLE001 - no artifact (a member that died before saving): reported by the caller
        return None
    return path if (Path(path) / "adapter_config.json").is_file() else None


def _member_runs(tracker, run_id: str) -> dict[str, object]:
    children = tracker.children(run_id)
    return runlayout.members_by_id(children)


def _ledger_tokens(metrics: dict, names: dict) -> float | None:
    values = [metrics.get(names[q]) for q in ("generated_tokens", "trained_tokens")]
    return None if any(v is None for v in values) else float(sum(values))


def run_tokens_per_adapter(metrics: dict) -> float | None:
    """The run's generated + trained tokens per adapter (compute ledger, populora.training.compute.ledger)."""
    return _ledger_tokens(metrics, runlayout.COMPUTE_PER_ADAPTER)


def member_compute(metrics: dict, run_per_adapter: float | None) -> dict:
    """What the report shows beside a member's row: its own tokens, and its run's per-adapter tokens."""
    out = {}
    own = _ledger_tokens(metrics, runlayout.COMPUTE_CUMULATIVE)
    if own is not None:
        out["compute_tokens"] = own
        out["compute_rollouts"] = metrics.get(runlayout.COMPUTE_CUMULATIVE["rollouts"])
    if run_per_adapter is not None:
        out["run_compute_tokens_per_adapter"] = run_per_adapter
    return out


def member_targets(tracker, run_id: str, members: str = "all") -> list[Target]:
    """``all`` (members with a saved adapter), ``alive``, or ids like ``T0,S1`` (unknown ids list the valid ones)."""
    by_id = _member_runs(tracker, run_id)
    per_adapter = run_tokens_per_adapter(get_run(tracker, run_id).data.metrics)
    if members in ("all", "alive"):
        chosen = [m for m, c in by_id.items() if members == "all" or c.data.tags.get(runlayout.ALIVE) == "true"]
    else:
        chosen = [m.strip() for m in members.split(",") if m.strip()]
        unknown = [m for m in chosen if m not in by_id]
        if unknown:
            raise TargetError(f"unknown member(s) {', '.join(unknown)} in run {run_id}; valid: {', '.join(sorted(by_id))} "
                              f"(or all, alive)")
    out = []
    for m in sorted(chosen, key=lambda x: (x[0], int(x[1:]) if x[1:].isdigit() else 0, x)):
        c = by_id[m]
        path = _adapter_dir(tracker, c)
        if path is None:
            if members not in ("all", "alive"):
                raise TargetError(f"member {m} of run {run_id} has no saved adapter (tag populora.adapter_dir, artifact adapter/)")
            continue  # a member that died before the run saved adapters
        info = {"role": c.data.tags.get(runlayout.ROLE), "alive": c.data.tags.get(runlayout.ALIVE)}
        info.update(member_compute(c.data.metrics, per_adapter))
        out.append(Target(m, MEMBER, path, c.info.run_id, info))
    if not out:
        raise TargetError(f"run {run_id} has no member with a saved adapter (is it finished?); members: {', '.join(sorted(by_id)) or 'none'}")
    return out


def baseline_targets(tracker, baseline_run: str) -> list[Target]:
    run = get_run(tracker, baseline_run)
    kind = run.data.tags.get(runlayout.KIND)
    if kind != runlayout.BASELINE:
        raise TargetError(f"run {baseline_run} is tagged populora.kind={kind!r}, not a baseline run")
    return [Target(f"baseline ({t.label})", BASELINE, t.adapter_dir, t.mlflow_run, t.info)
            for t in member_targets(tracker, baseline_run, "all")]


def _model(run, store: str | None = None) -> ModelSource:
    """The base model a run was trained on, from the config in its run dir or its config artifact in ``store``
    (``ConfigError`` if neither is there)."""
    return run_model(run.info.run_id, run.data.tags.get(runlayout.RUN_DIR) or ".", store)


def run_targets(tracker, run_id: str, members: str = "all", baseline: str | None = None,
                include_base: bool = True) -> tuple[list[Target], ModelSource, object]:
    """Targets of a training run (members, then baseline, then the base model), its base model and the run."""
    run = get_run(tracker, run_id)
    if run.data.tags.get(runlayout.KIND) not in (runlayout.POPULATION, runlayout.BASELINE):
        raise TargetError(f"run {run_id} is not a PopuLoRA training run (tag {runlayout.KIND} is missing); "
                          f"pass the parent run id shown by populora runs")
    model = _model(run, getattr(tracker, "uri", None))
    out = member_targets(tracker, run_id, members)
    if run.data.tags.get(runlayout.KIND) == runlayout.BASELINE:
        out = [Target(f"baseline ({t.label})", BASELINE, t.adapter_dir, t.mlflow_run, t.info) for t in out]
    baseline = baseline or run.data.tags.get(runlayout.BASELINE_RUN) or None
    if baseline and baseline != run_id:
        base_model = _model(get_run(tracker, baseline), getattr(tracker, "uri", None))
        if base_model != model:
            raise TargetError(f"baseline run {baseline} was trained on {base_model!r}, the population on {model!r}: "
                              f"not comparable")
        out += baseline_targets(tracker, baseline)
    if include_base:
        out.append(Target(BASE_LABEL, BASE, None))
    return out, model, run


def checkpoint_steps(run_dir: str | Path) -> list[int]:
    """Steps with a complete checkpoint under ``<run dir>/checkpoints`` (training keeps the last few)."""
    root = Path(run_dir) / "checkpoints"
    steps = (runlayout.folder_step(p.name) for p in root.glob("step_*") if (p / "state.json").is_file())
    return sorted(s for s in steps if s is not None)


def _checkpoint(run, step: int) -> Path:
    """``<run dir>/checkpoints/step_NNNNNN`` of ``run``; TargetError listing the steps that exist if it is not there."""
    run_dir = run.data.tags.get(runlayout.RUN_DIR) or ""
    path = Path(run_dir) / "checkpoints" / runlayout.step_folder(step)
    if not (path / "state.json").is_file():
        steps = checkpoint_steps(run_dir) if run_dir else []
        have = f"checkpoints at step(s) {', '.join(map(str, steps))}" if steps else "no checkpoint"
        raise TargetError(f"run {run.info.run_id} has no checkpoint at step {step} under {str(Path(run_dir) / 'checkpoints')!r} "
                          f"({have}; training writes one every checkpoint.every steps and keeps only the newest few): "
                          f"pick one of those with --step")
    return path


def checkpoint_targets(run, step: int, members: str = "all", kind: str = MEMBER,
                       runs: dict[str, str] | None = None) -> list[Target]:
    """The members alive at checkpoint ``step`` of ``run``, each with its own adapter saved there; ``members``:
    all / alive (the same here: a checkpoint holds the alive members only) or ids like ``T0,S1``; ``runs``:
    member id -> its MLflow child run."""
    path = _checkpoint(run, step)
    state = json.loads((path / "state.json").read_text())
    alive = {m["id"]: m for m in state["population"]["members"] if m.get("alive")}
    if members in ("all", "alive"):
        chosen = list(alive)
    else:
        chosen = [m.strip() for m in members.split(",") if m.strip()]
        unknown = [m for m in chosen if m not in alive]
        if unknown:
            raise TargetError(f"member(s) {', '.join(unknown)} not alive at step {step} of run {run.info.run_id}; "
                              f"alive then: {', '.join(sorted(alive, key=runlayout.member_order))}")
    runs = runs or {}
    out = []
    for m in sorted(chosen, key=runlayout.member_order):
        adapter = path / "adapters" / m
        if not (adapter / "adapter_config.json").is_file():
            raise TargetError(f"checkpoint {path} has no adapter for member {m} (expected {adapter}); is it complete?")
        info = {"role": alive[m].get("role"), "alive": "true", "step": step}
        label = m if kind == MEMBER else f"baseline ({m})"
        out.append(Target(label, kind, str(adapter), runs.get(m), info))
    return out


def step_targets(tracker, run_id: str, step: int, members: str = "all", baseline: str | None = None,
                 include_base: bool = True) -> tuple[list[Target], ModelSource, object]:
    """Like ``run_targets``, at checkpoint ``step``: the members alive then with their adapters from that
    checkpoint; the baseline run's checkpoint at the same step when it has one (else it is left out, said on
    stderr); the base model."""
    run = get_run(tracker, run_id)
    kind = run.data.tags.get(runlayout.KIND)
    if kind not in (runlayout.POPULATION, runlayout.BASELINE):
        raise TargetError(f"run {run_id} is not a PopuLoRA training run (tag {runlayout.KIND} is missing); "
                          f"pass the parent run id shown by populora runs")
    model = _model(run, getattr(tracker, "uri", None))
    def child_runs(rid: str) -> dict[str, str]:
        return {m: c.info.run_id for m, c in _member_runs(tracker, rid).items()}

    out = checkpoint_targets(run, step, members, BASELINE if kind == runlayout.BASELINE else MEMBER, child_runs(run_id))
    baseline = baseline or run.data.tags.get(runlayout.BASELINE_RUN) or None
    if baseline and baseline != run_id:
        brun = get_run(tracker, baseline)
        if _model(brun, getattr(tracker, "uri", None)) != model:
            raise TargetError(f"baseline run {baseline} was trained on another base model than run {run_id}: not comparable")
        try:
            out += checkpoint_targets(brun, step, "all", BASELINE, child_runs(baseline))
        except TargetError as err:
            print(f"baseline left out: {err}", file=sys.stderr)
    if include_base:
        out.append(Target(BASE_LABEL, BASE, None))
    return out, model, run


def lora_spec(targets: list[Target]):
    """The one LoRA shape (rank, alpha, target modules) of every adapter target, which batched multi-LoRA needs;
    the default shape when only the bare base is evaluated."""
    specs = {}
    for t in targets:
        if t.adapter_dir:
            try:
                specs[t.label] = replace(read_lora_spec(t.adapter_dir), dropout=0.0)  # dropout: training only
            except ValueError as err:
                raise TargetError(f"{t.label}: {err} (or evaluate with --backend peft)") from err
    if len(set(specs.values())) > 1:
        shapes = ", ".join(f"{label}: r={s.rank} alpha={s.alpha} {','.join(s.target_modules)}" for label, s in specs.items())
        raise TargetError(f"the adapters have different LoRA shapes ({shapes}); evaluate them with --backend peft")
    return next(iter(specs.values()), LoraSpec())


def adapter_target(path: str) -> Target:
    p = Path(path)
    if not (p / "adapter_config.json").is_file():
        raise TargetError(f"{p} is not a PEFT adapter dir (no adapter_config.json)")
    return Target(p.resolve().name, MEMBER, str(p.resolve()))
