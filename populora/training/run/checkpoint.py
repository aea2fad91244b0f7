"""Checkpoints: everything needed to continue a run, written atomically and verified before they are trusted.

Layout: ``<run_dir>/checkpoints/step_000N/`` holding config.yaml, state.json (population, lineage, buffers,
coverage, pending MLflow records, RNG states), rng.pt, adapters/<member>/ (PEFT dirs), optim/<member>.pt and,
written last, manifest.json (every file's size and CRC-32, ``platform.manifest``). A checkpoint is written under a
temporary name and renamed into place, then ``latest`` (a one-line file) is replaced atomically, so a kill -9 at
any moment leaves the previous checkpoint intact. A write that fails (a full disk) removes its temporary dir, and
one that cannot fit is not started: before each checkpoint the disk must hold the last one's size plus MARGIN.

A resume takes the newest checkpoint that verifies (``resumable``), saying what was wrong with any newer one.
A fork of a run whose trainer still runs (it prunes old checkpoints as it writes new ones: ``checkpoint.keep``)
reads a pinned copy (``pinned``): hard links in ``checkpoints/.pin-*`` (no copy, no space; the prune only removes
``step_*`` and ``.tmp-*``), verified, removed when the fork has its own checkpoint.

Checkpoints from before manifests (no manifest.json) are verified by loading every file they hold, as a resume
would: slower (they are deserialized), but a truncated or garbled file fails there as it would in the resume.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import yaml
from safetensors import safe_open

from populora.platform import diskspace
from populora.platform.store import manifest as mf
from populora.platform.store import runlayout as rl
from populora.platform.backends.optimizer import AdamConfig
from populora.platform.files import write_atomic

KEEP = 2
# the space a checkpoint must find free, as a fraction over the last one's size: its members' files keep their
# size, state.json grows with the buffers, the lineage and the step records it holds; the margin also leaves room
# for the MLflow writes that follow it (when the store shares the disk)
MARGIN = 0.25


class CheckpointError(RuntimeError):
    pass


def save(run_dir: Path, step: int, state: dict, config_yaml: str, backend, members: list[str], rng_state: dict,
         keep: int = KEEP) -> tuple[Path, dict[int, Path]]:
    """Write checkpoint ``step`` (complete and its manifest written before it is renamed into place and pointed
    at), then keep the newest ``keep``. Returns its dir and the older checkpoints it deleted (step -> dir).

    A full disk raises DiskFull: before the write when the last checkpoint's size plus MARGIN is not free, during
    it when the disk fills anyway (another writer); either way no temporary dir is left."""
    root = run_dir / rl.CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / rl.step_folder(step)
    tmp = root / f".tmp-{rl.step_folder(step)}"
    shutil.rmtree(tmp, ignore_errors=True)
    what, needed = f"the checkpoint of step {step}", space_needed(run_dir)
    diskspace.ensure_space(what, root, needed)
    try:
        with diskspace.writing(what, root, needed, exact=True):
            (tmp / "optim").mkdir(parents=True)
            (tmp / "config.yaml").write_text(config_yaml)
            for member in members:
                backend.save_adapter(member, tmp / "adapters" / member)
                torch.save(backend.optimizer_state(member), tmp / "optim" / f"{member}.pt")
            torch.save(rng_state, tmp / "rng.pt")
            (tmp / rl.CHECKPOINT_STATE).write_text(json.dumps(state))
            mf.write(tmp)  # last, fsyncing every file as it reads it
    except BaseException:  # a full disk, a stop: the half-written dir goes, the previous checkpoint stays latest
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():  # re-written after a resume that replayed this step
        shutil.rmtree(final)
    os.rename(tmp, final)
    with diskspace.writing("the checkpoint pointer", root / "latest"):
        write_atomic(root / "latest", final.name, durable=True)
    return final, _prune(root, keep=keep)


def space_needed(run_dir: Path) -> int | None:
    """The bytes the next checkpoint needs free: the newest one's size (its manifest's total) plus MARGIN; None
    before the first (nothing to measure)."""
    newest = next(iter(_newest_first(run_dir)), None)
    if newest is None:
        return None
    try:
        found = mf.read(newest)
    except ValueError:
        found = None
    size = found["total_bytes"] if found else diskspace.tree_bytes(newest)
    return int(size * (1 + MARGIN))


def verify(path: Path) -> str | None:
    """What is wrong with checkpoint ``path`` (a missing, truncated or changed file), None if it is intact.
    Against its manifest; a checkpoint from before manifests: by loading every file it holds."""
    if not path.is_dir():
        return "its dir is missing"
    try:
        found = mf.read(path)
    except ValueError as err:
        return str(err)
    if found is not None:
        return mf.check(path, found)
    return _loads(path)


def _loads(path: Path) -> str | None:
    """A checkpoint without a manifest, loaded file by file: the first that does not load, None if all do."""
    files = [path / rl.CHECKPOINT_STATE, path / "config.yaml", path / "rng.pt"]
    files += sorted((path / "optim").glob("*.pt")) + sorted((path / "adapters").glob("*/adapter_model.*"))
    try:  # the members its state names alive: their files must be there too (a glob cannot miss what is gone)
        members = json.loads(files[0].read_text())["population"]["members"]
        files += [path / "optim" / f"{m['id']}.pt" for m in members if m.get("alive", True)]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # the loop below names what is wrong with state.json
    for f in dict.fromkeys(files):
        rel = f.relative_to(path).as_posix()
        if not f.is_file():
            return f"{rel} is missing (no manifest: checked by loading)"
        try:
            if f.suffix == ".json":
                json.loads(f.read_text())
            elif f.suffix == ".yaml":
                yaml.safe_load(f.read_text())
            elif f.suffix == ".safetensors":
                with safe_open(str(f), framework="pt") as st:
                    for key in st.keys():
                        st.get_tensor(key)
            else:
                torch.load(f, map_location="cpu", weights_only=False)
        except Exception as err:  # noqa: BLE001 - whatever the loader says is the damage
            return f"{rel} does not load (no manifest: checked by loading): {str(err).splitlines()[0][:200]}"
    return None


def resumable(run_dir: Path, step: int | None = None) -> tuple[Path, list[str]]:
    """The checkpoint a resume continues from, and a line per newer checkpoint it skipped (what was wrong).

    ``step`` None: the newest that verifies. ``step`` given: that one, or a CheckpointError naming what is wrong
    with it (a named step is never silently replaced by another)."""
    if step is not None:
        path = at_step(run_dir, step)
        return path, []
    notes = []
    for path in _newest_first(run_dir):
        problem = verify(path)
        if problem is None:
            if notes:
                notes.append(f"resuming from the checkpoint of step {rl.folder_step(path.name)}")
            return path, notes
        notes.append(f"the checkpoint of step {rl.folder_step(path.name)} is damaged: {problem}")
    if not notes:
        raise CheckpointError(f"no checkpoint under {str(run_dir)!r}; start a new run instead")
    raise CheckpointError(f"no intact checkpoint under {str(run_dir)!r}: " + "; ".join(notes))


def _newest_first(run_dir: Path) -> list[Path]:
    """The run dir's checkpoint dirs (renamed into place: complete when written), newest step first."""
    root = Path(run_dir) / rl.CHECKPOINTS
    found = [(rl.folder_step(p.name), p) for p in root.glob("step_*") if p.is_dir()] if root.is_dir() else []
    return [p for s, p in sorted(((s, p) for s, p in found if s is not None), reverse=True)]


def at_step(run_dir: Path, step: int) -> Path:
    """Checkpoint ``step`` of a run dir, verified; CheckpointError naming the steps it keeps if it has no such
    checkpoint, or what is wrong with it."""
    path = rl.checkpoint_dir(run_dir, step)
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint of step {step} under {str(run_dir)!r}; {rl.kept_note(run_dir)}")
    problem = verify(path)
    if problem is not None:
        intact = [rl.folder_step(p.name) for p in _newest_first(run_dir) if p != path and verify(p) is None]
        others = (f"intact: step {', '.join(map(str, sorted(intact)))}" if intact else "no other checkpoint is intact")
        raise CheckpointError(f"the checkpoint of step {step} under {str(run_dir)!r} is damaged: {problem}; {others}")
    return path


PIN_PREFIX = ".pin-"


@contextlib.contextmanager
def pinned(run_dir: Path, step: int, writer: str | None = None):
    """Checkpoint ``step`` of a run dir, verified, for a fork to read. ``writer``: words naming the run's trainer
    while it may still write the run (``lease.held_by``; None: nobody does, read it in place). Then the step is
    read from a pinned copy the trainer's prune cannot remove mid-read, and a step it has not finished writing, or
    pruned before or while the copy was made, is a CheckpointError naming the writer and the steps it keeps."""
    if writer is None:
        yield at_step(run_dir, step)
        return
    run_dir, path = Path(run_dir), rl.checkpoint_dir(run_dir, step)
    forkable(run_dir, step, writer)
    pin = _pin_dir(run_dir, path.name)
    try:
        copy = pin / path.name
        try:
            shutil.copytree(path, copy, copy_function=_link)
            problem = verify(copy)
        except (OSError, shutil.Error) as err:
            problem = f"it could not be copied: {str(err)[:200]}"
        if problem is not None and not path.is_dir():  # the writer's prune won the race
            raise CheckpointError(f"the checkpoint of step {step} under {str(run_dir)!r} was pruned while this fork "
                                  f"copied it: {writer} and keeps only its newest checkpoints (checkpoint.keep); "
                                  f"{rl.kept_note(run_dir)}: fork from one of them")
        if problem is not None:
            raise CheckpointError(f"the checkpoint of step {step} under {str(run_dir)!r} is damaged: {problem}")
        yield copy
    finally:
        shutil.rmtree(pin, ignore_errors=True)


def forkable(run_dir: Path, step: int, writer: str | None = None) -> None:
    """CheckpointError now if the run dir holds no complete checkpoint ``step`` (``writer``: ``pinned``'s), saying
    why: a fork checks this before it waits in the job queue, and ``pinned`` verifies the step when it reads it."""
    if not (rl.checkpoint_dir(run_dir, step) / rl.CHECKPOINT_STATE).is_file():
        raise CheckpointError(_not_there(run_dir, step, writer) if writer else
                              f"no checkpoint of step {step} under {str(run_dir)!r}; {rl.kept_note(run_dir)}")


def _not_there(run_dir: Path, step: int, writer: str) -> str:
    """Why a live run's checkpoint ``step`` cannot be forked now: not written yet (being written), or pruned."""
    kept = rl.checkpoint_steps(run_dir)
    if kept and step < kept[0]:
        return f"no checkpoint of step {step} under {str(run_dir)!r}: {writer} and pruned it; {rl.kept_note(run_dir)}"
    newest = f"its newest complete checkpoint is step {kept[-1]} (--step {kept[-1]})" if kept else "it has no complete checkpoint yet"
    doing = ("is writing it now" if (run_dir / rl.CHECKPOINTS / f".tmp-{rl.step_folder(step)}").exists()
             else "has not written it yet")
    return (f"no checkpoint of step {step} under {str(run_dir)!r}: {writer} and {doing}; {newest}, "
            f"or fork once step {step}'s checkpoint is complete")


def _pin_dir(run_dir: Path, name: str) -> Path:
    """A fresh dir for a pinned copy: beside the checkpoints (hard links need one filesystem), else (a run dir this
    user cannot write) the system's temporary dir, where the copy is a real one."""
    try:
        return Path(tempfile.mkdtemp(prefix=f"{PIN_PREFIX}{name}-", dir=run_dir / rl.CHECKPOINTS))
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"populora{PIN_PREFIX}{name}-"))


def _link(src: str, dst: str) -> None:
    """Hard-link ``src`` to ``dst`` (the pin costs no space and no time), copying where links cannot be made."""
    try:
        os.link(src, dst)
    except OSError as err:
        if err.errno not in (errno.EXDEV, errno.EPERM, errno.EACCES, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copy2(src, dst)


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


def _prune(root: Path, keep: int) -> dict[int, Path]:
    done = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp-step_*"):
        shutil.rmtree(stale, ignore_errors=True)
    return {rl.folder_step(p.name): p for p in done[:-keep]}
