"""Checkpoints: everything needed to continue a run, written atomically.

Layout: ``<run_dir>/checkpoints/step_000N/`` holding config.yaml, state.json (population, lineage, buffers,
coverage, pending MLflow records, RNG states), rng.pt, adapters/<member>/ (PEFT dirs) and optim/<member>.pt.
A checkpoint is written under a temporary name and renamed into place, then ``latest`` (a one-line file) is
replaced atomically, so a kill -9 at any moment leaves the previous checkpoint intact and pointed to.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from populora.platform import runlayout as rl
from populora.platform.backends.optimizer import AdamConfig
from populora.platform.files import write_atomic

KEEP = 2


class CheckpointError(RuntimeError):
    pass


def save(run_dir: Path, step: int, state: dict, config_yaml: str, backend, members: list[str], rng_state: dict,
         keep: int = KEEP) -> tuple[Path, dict[int, Path]]:
    """Write checkpoint ``step`` (complete before it is renamed into place and pointed at), then keep the newest
    ``keep``. Returns its dir and the older checkpoints it deleted (step -> dir)."""
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp-step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "optim").mkdir(parents=True)
    (tmp / "config.yaml").write_text(config_yaml)
    for member in members:
        backend.save_adapter(member, tmp / "adapters" / member)
        torch.save(backend.optimizer_state(member), tmp / "optim" / f"{member}.pt")
    torch.save(rng_state, tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps(state))
    _fsync_tree(tmp)
    if final.exists():  # re-written after a resume that replayed this step
        shutil.rmtree(final)
    os.rename(tmp, final)
    write_atomic(root / "latest", final.name, durable=True)
    return final, _prune(root, keep=keep)


def latest(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = run_dir / "checkpoints" / pointer.read_text().strip()
    if not (path / "state.json").is_file():
        raise CheckpointError(f"checkpoint pointer {pointer} names {path.name}, which is missing or incomplete")
    return path


def at_step(run_dir: Path, step: int) -> Path:
    """Checkpoint ``step`` of a run dir; CheckpointError naming the steps it keeps if it has no such checkpoint."""
    path = rl.checkpoint_dir(run_dir, step)
    if not (path / rl.CHECKPOINT_STATE).is_file():
        raise CheckpointError(f"no checkpoint of step {step} under {str(run_dir)!r}; {rl.kept_note(run_dir)}")
    return path


def load(path: Path) -> tuple[dict, str, dict]:
    """Return (state, config_yaml, rng_state); adapters and optimizer states are read by the trainer."""
    state = json.loads((path / "state.json").read_text())
    rng_state = torch.load(path / "rng.pt", map_location="cpu", weights_only=False)  # torch's RNG state is a CPU tensor
    return state, (path / "config.yaml").read_text(), rng_state


def restore_member(backend, path: Path, member: str, optim: AdamConfig) -> None:
    """Load one member's adapter and optimizer state (its optimizer built with ``optim``'s settings) from
    checkpoint ``path`` into ``backend``.

    Optimizer tensors are read onto the CPU (``map_location``): a checkpoint written on a GPU must resume on a
    process without one (a Ray head, a CPU box); the backend copies them onto its own device.
    """
    backend.add_adapter(member, from_dir=path / "adapters" / member)
    backend.init_optimizer(member, optim)
    backend.load_optimizer_state(member, torch.load(path / "optim" / f"{member}.pt", map_location="cpu", weights_only=False))


def _fsync_tree(path: Path) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())


def _prune(root: Path, keep: int) -> dict[int, Path]:
    done = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp-step_*"):
        shutil.rmtree(stale, ignore_errors=True)
    return {rl.folder_step(p.name): p for p in done[:-keep]}
