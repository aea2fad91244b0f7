"""A full disk, met by every write of a run: each ends in one line (what was written, where, the space left and
needed, how to go on), the run FAILED, no temporary file left, and a resume once space is freed logs every step once.

Where this process may mount a tmpfs (root; ``fault_disks.tmpfs`` skips with the reason where it may not), the disk
fills for real: the run dir's filesystem under a checkpoint, the MLflow store's under a flush. Each has an
injected twin (the write call raises what the library raises on a full disk: torch's "unexpected pos", sqlite's
"database or disk is full" through sqlalchemy and MLflow) that runs everywhere. The runs are the real CLI in this
process (``cli_in_process``) on the tiny random model."""

from __future__ import annotations

import errno
import random
import re
import sqlite3
from pathlib import Path

import pytest
import torch
from conftest import cli_in_process
from fault_disks import fill, leftovers, tmpfs

from populora.platform import diskspace
from populora.platform.store import manifest as mf
from populora.platform.store import runlayout as rl
from populora.platform.diskspace import DiskFull
from populora.platform.files import write_atomic
from populora.training.run import checkpoint

TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4", "--set", "tasks.seed_rounds=0",
        "--set", "tasks.max_new_tokens_propose=16", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=1", "--set", "tasks.rollouts=2", "--set", "checkpoint.every=1", "--quiet"]
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 2368 vs 2262"  # torch 2.x on ENOSPC


# ====================================================================== recognising a full disk
def _sqlalchemy_full():
    """What MLflow's sqlite store raises on a full disk: MlflowException from sqlalchemy's OperationalError from
    sqlite3's (mlflow/store/db/utils.py wraps it so)."""
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    orig = sqlite3.OperationalError("database or disk is full")
    orig.sqlite_errorcode = 13
    try:
        try:
            raise sqlalchemy.exc.OperationalError("INSERT INTO metrics ...", {}, orig)
        except sqlalchemy.exc.OperationalError as e:
            raise MlflowException(message=e) from e
    except MlflowException as e:
        return e


@pytest.mark.parametrize("err, code", [
    (OSError(errno.ENOSPC, "No space left on device"), errno.ENOSPC),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), errno.EDQUOT),
    (RuntimeError(TORCH_FULL), errno.ENOSPC),
    (RuntimeError("[enforce fail at inline_container.cc:444] . PytorchStreamWriter failed writing file data/0: file write failed"), errno.ENOSPC),
    (RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"), errno.ENOSPC),  # safetensors
    (OSError(errno.EACCES, "Permission denied"), None),
    (RuntimeError("unexpected pos"), None),  # torch's words without torch's writer: not a disk
    (ValueError("database is locked"), None),
])
def test_every_librarys_full_disk_is_recognised_and_nothing_else(err, code):
    assert diskspace.disk_full_errno(err) == code


def test_mlflow_sqlite_full_through_sqlalchemy_is_a_full_disk():
    err = _sqlalchemy_full()
    assert diskspace.disk_full_errno(err) == errno.ENOSPC
    full = diskspace.as_disk_full(err, "the records of step 3 in the MLflow store", "/data/mlflow.db")
    assert full.where == "/data/mlflow.db" and full.errno == errno.ENOSPC


# the byte counts the line prints, over the whole range: every power of 1024 and its neighbours, and 2000 drawn
# log-uniformly (fixed seed); hypothesis is not a dependency of this project
SIZES = sorted({0, 1} | {1024**k + d for k in range(1, 7) for d in (-1, 0, 1)}
               | {int(2 ** random.Random(0).uniform(0, 62)) for _ in range(2000)})


def test_human_bytes_reads_back_within_its_rounding():
    scale = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4, "PiB": 1024**5}
    for n in SIZES:
        number, unit = diskspace.human(n).split()
        value = float(number)
        assert abs(value * scale[unit] - n) <= 0.05 * scale[unit], (n, number, unit)  # one decimal of its unit
        assert (unit == "B" and value == n < 1024) or (1 <= value < 1024.05) or unit == "PiB", (n, number, unit)


def test_the_line_names_what_where_free_needed_and_the_resume():
    rng = random.Random(1)
    for free, needed in [(0, 1), (1023, 1024)] + [(rng.choice(SIZES), rng.choice(SIZES[1:])) for _ in range(200)]:
        line = str(DiskFull(errno.ENOSPC, "the checkpoint of step 3", "/r/checkpoints", free, needed, resume="resume with X"))
        assert line == (f"disk full writing the checkpoint of step 3 to /r/checkpoints: {diskspace.human(free)} free "
                        f"there, it needs about {diskspace.human(needed)}; free space, then resume with X")
        assert "\n" not in line
    quota = DiskFull(errno.EDQUOT, "the checkpoint of step 3", "/r/checkpoints", 5 << 30, 1024, resume="resume with X")
    assert str(quota) == ("disk quota exceeded writing the checkpoint of step 3 to /r/checkpoints (the quota's limit "
                          "is not shown by df, it needs about 1.0 KiB); free space, then resume with X")


def test_write_atomic_on_a_full_disk_raises_the_line_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    real_open = open

    def full_open(path, mode="r", *a, **k):  # the write of the temporary file fails as on a full disk
        fh = real_open(path, mode, *a, **k)
        if "w" in mode:
            fh.write = lambda text: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))
        return fh

    monkeypatch.setattr("builtins.open", full_open)
    with pytest.raises(DiskFull) as caught:
        write_atomic(tmp_path / "results.json", "{}" * 100, what="the evaluation results")
    monkeypatch.undo()
    assert str(caught.value).startswith(f"disk full writing the evaluation results to {tmp_path / 'results.json'}: ")
    assert "it needs about 200 B" in str(caught.value) and list(tmp_path.iterdir()) == []


# ====================================================================== checkpoint.save on a full disk
class FakeBackend:
    """What checkpoint.save asks of a backend: an adapter dir and an optimizer state per member."""

    def __init__(self, kib: int = 64):
        self.kib = kib

    def save_adapter(self, member, directory):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "adapter_model.safetensors").write_bytes(b"\1" * (self.kib << 10))
        (directory / "adapter_config.json").write_text("{}")

    def optimizer_state(self, member):
        return {"state": {0: {"exp_avg": torch.ones(self.kib << 8)}}}


def _save(run_dir, step, backend=None):
    return checkpoint.save(run_dir, step, {"step": step}, "steps: 4\n", backend or FakeBackend(), ["T0", "S0"], {"r": 1})


def test_a_checkpoint_whose_write_fills_the_disk_leaves_the_previous_one_and_no_tmp(tmp_path, monkeypatch):
    """Injected: torch's save raises what it raises on a full disk, after writing half its file."""
    _save(tmp_path, 1)
    real = torch.save

    def half_then_full(obj, f, *a, **k):
        if ".tmp-step_000002" in str(f) and Path(f).parent.name == "optim":
            Path(f).write_bytes(b"\0" * 1000)
            raise RuntimeError(TORCH_FULL)
        return real(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", half_then_full)
    with pytest.raises(DiskFull) as caught:
        _save(tmp_path, 2)
    root = tmp_path / rl.CHECKPOINTS
    needed = int(mf.read(root / "step_000001")["total_bytes"] * (1 + checkpoint.MARGIN))
    assert re.fullmatch(rf"disk full writing the checkpoint of step 2 to {re.escape(str(root))}: \S+ \S+ free there, "
                        rf"it needs about {re.escape(diskspace.human(needed))}; free space, then run the same command again",
                        str(caught.value)), str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert leftovers(tmp_path) == [] and sorted(p.name for p in root.iterdir()) == ["latest", "step_000001"]
    assert (root / "latest").read_text() == "step_000001" and checkpoint.verify(root / "step_000001") is None


def test_the_space_check_refuses_a_checkpoint_that_cannot_fit_before_writing_it(tmp_path, monkeypatch):
    """Injected: the filesystem reports less free than the last checkpoint's size plus the margin."""
    _save(tmp_path, 1)
    size = mf.read(tmp_path / rl.CHECKPOINTS / "step_000001")["total_bytes"]
    monkeypatch.setattr(diskspace, "free_bytes", lambda path: size)  # the size itself: less than size * 1.25
    with pytest.raises(DiskFull) as caught:
        _save(tmp_path, 2)
    assert str(caught.value) == (
        f"not enough disk space for the checkpoint of step 2 in {tmp_path / rl.CHECKPOINTS}: {diskspace.human(size)} "
        f"free, it needs about {diskspace.human(int(size * 1.25))}; stopped before starting a write it could not "
        "finish; free space, then run the same command again")
    assert caught.value.before and sorted(p.name for p in (tmp_path / rl.CHECKPOINTS).iterdir()) == ["latest", "step_000001"]


def test_a_checkpoint_on_a_real_full_tmpfs(tmp_path):
    """Real: a 1 MiB tmpfs, filled by another writer; the space check stops the checkpoint before it starts, and
    once the check is passed (the disk fills during the write) the write fails with torch's or safetensors' own
    error, recognised, its temporary dir removed."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        run_dir = disk / "run"
        _save(run_dir, 1, FakeBackend(kib=48))
        filler = fill(disk, leave=4096)
        with pytest.raises(DiskFull) as before:
            _save(run_dir, 2, FakeBackend(kib=48))
        assert before.value.before and before.value.free <= 4096 + 4096
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(checkpoint, "space_needed", lambda run_dir: None)  # as if the check had passed
            with pytest.raises(DiskFull) as during:
                _save(run_dir, 2, FakeBackend(kib=48))
        assert not during.value.before and str(during.value).startswith(f"disk full writing the checkpoint of step 2 to {run_dir / rl.CHECKPOINTS}: ")
        assert leftovers(run_dir) == [] and checkpoint.verify(run_dir / rl.CHECKPOINTS / "step_000001") is None
        filler.unlink()
        _save(run_dir, 2, FakeBackend(kib=48))  # space freed: the next save goes through
        assert checkpoint.verify(run_dir / rl.CHECKPOINTS / "step_000002") is None


# ====================================================================== a run whose disk fills
def _run(mlflow_store):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_store)
    exp = client.get_experiment_by_name("populora")
    parents = [r for r in client.search_runs([exp.experiment_id]) if rl.PARENT not in r.data.tags]
    assert len(parents) == 1
    return client, parents[0]


def _logged_steps(client, run_id) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, rl.STEP_SENTINEL))


def _refused_resume(run_id, run_dir, capsys, mlflow_store):
    """A resume while the disk is still full: the space check refuses step 2's checkpoint before writing it."""
    code = cli_in_process("train", "--resume", run_id, "--quiet")
    last = capsys.readouterr().err.rstrip().splitlines()[-1]
    root = run_dir / rl.CHECKPOINTS
    assert code == 1 and re.fullmatch(
        rf"error: not enough disk space for the checkpoint of step 2 in {re.escape(str(root))}: [\d.]+ \S+ free, it needs "
        r"about [\d.]+ \S+; stopped before starting a write it could not finish; free space, then resume with "
        rf"`populora train --resume {run_id}` \(it restarts after the checkpoint of step 1\)", last), last
    client, run = _run(mlflow_store)
    assert run.info.status == "FAILED" and _logged_steps(client, run_id) == [1] and leftovers(run_dir) == []
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000001"]
    with capsys.disabled():
        print(f"\nthe line: {last}")


def _failed_run_then_resume(mlflow_store, capsys, out_dir: Path, free_space, still_full: bool = False):
    """A 3-step run whose checkpoint of step 2 meets the full disk (the test's fixture arranges it); asserts the
    line, FAILED, step 1 only in MLflow and no leftovers; then ``free_space()`` and the resume logs steps 1-3 once."""
    code = cli_in_process("train", "--set", "steps=3", "--set", f"output_dir={out_dir}", *TINY)
    out = capsys.readouterr()
    client, run = _run(mlflow_store)
    run_id, run_dir = run.info.run_id, out_dir / run.info.run_id
    last = out.err.rstrip().splitlines()[-1]
    root = run_dir / rl.CHECKPOINTS
    assert code == 1 and "Traceback" not in out.err, out.err[-3000:]
    assert re.fullmatch(rf"error: disk full writing the checkpoint of step 2 to {re.escape(str(root))}: [\d.]+ \S+ free there, "
                        rf"it needs about [\d.]+ \S+; free space, then resume with `populora train --resume {run_id}` "
                        r"\(it restarts after the checkpoint of step 1\)", last), last
    assert run.info.status == "FAILED" and run.data.tags[rl.STATUS] == rl.FAILED
    assert run.data.tags[rl.ERROR] == f"DiskFull: {last.removeprefix('error: ')}"
    assert _logged_steps(client, run_id) == [1] and leftovers(run_dir) == []
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000001"]
    with capsys.disabled():  # the line, in the test log (-s) for the reliability table
        print(f"\nthe line: {last}")
    if still_full:
        _refused_resume(run_id, run_dir, capsys, mlflow_store)
    free_space()
    code = cli_in_process("train", "--resume", run_id, "--quiet")
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "resuming run" in out.out and "warning:" not in out.err  # the checkpoint it resumes from is intact
    client, run = _run(mlflow_store)
    assert run.info.status == "FINISHED" and _logged_steps(client, run_id) == [1, 2, 3]  # none lost, none twice
    assert leftovers(run_dir) == []
    return last


def test_a_run_whose_run_dir_fills_for_real_fails_with_the_line_then_resumes(mlflow_store, tmp_path, capsys, monkeypatch):
    """Real: the run dir on a 4 MiB tmpfs that another writer fills once step 2's space check has passed, so the
    checkpoint's own write meets ENOSPC; a resume before space is freed is refused by the space check before it
    writes; once freed, the resume finishes."""
    with tmpfs(tmp_path / "disk", "4m") as disk:
        fillers = []
        real = diskspace.ensure_space

        def check_then_fill(what, where, needed):
            real(what, where, needed)
            if what == "the checkpoint of step 2" and not fillers:
                fillers.append(fill(disk, leave=needed // 4))

        monkeypatch.setattr(diskspace, "ensure_space", check_then_fill)
        _failed_run_then_resume(mlflow_store, capsys, disk, lambda: fillers[0].unlink(), still_full=True)


def test_a_run_whose_checkpoint_write_meets_enospc_fails_with_the_line_then_resumes(mlflow_store, tmp_path, capsys, monkeypatch):
    """Injected (runs where no mount is allowed): step 2's optimizer state write fails as torch's does on a full
    disk, half its file written."""
    real = torch.save
    failing = {"on": True}

    def full_once(obj, f, *a, **k):
        if failing["on"] and ".tmp-step_000002" in str(f) and Path(f).parent.name == "optim":
            Path(f).write_bytes(b"\0" * 1000)
            raise RuntimeError(TORCH_FULL)
        return real(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", full_once)
    _failed_run_then_resume(mlflow_store, capsys, tmp_path / "runs", lambda: failing.update(on=False))


def test_a_run_whose_mlflow_store_fills_for_real_fails_with_the_line_then_resumes(tmp_path, capsys, monkeypatch):
    """Real: the sqlite store and its artifacts on a 24 MiB tmpfs, filled once step 1 is in it; step 2's flush meets
    sqlite's "database or disk is full" (through sqlalchemy and MLflow) or ENOSPC from an artifact copy."""
    from populora.training.loop import Trainer

    with tmpfs(tmp_path / "store", "24m") as disk:
        uri = f"sqlite:///{disk / 'mlflow.db'}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        monkeypatch.chdir(disk)  # the store's artifacts (./mlruns) on the same small disk
        fillers = []
        real = Trainer.flush

        def flush_then_fill(self, *a, **k):
            real(self, *a, **k)
            if self.step_index == 1 and not fillers:
                fillers.append(fill(disk, leave=0))

        monkeypatch.setattr(Trainer, "flush", flush_then_fill)
        code = cli_in_process("train", "--set", "steps=3", "--set", f"output_dir={tmp_path / 'runs'}", *TINY)
        out = capsys.readouterr()
        last = out.err.rstrip().splitlines()[-1]
        assert code == 1 and "Traceback" not in out.err, out.err[-3000:]  # neither ours nor MLflow's
        assert re.fullmatch(r"error: disk full writing (run \w+'s records in the MLflow store|the records of step 2 in the MLflow store to "
                            rf"{re.escape(str(disk / 'mlflow.db'))}|.*{re.escape(str(disk))}.*): [\d.]+ \S+ free there.*"
                            r"; free space, then resume with `populora train --resume \w+` \(it restarts after the "
                            r"checkpoint of step 1\)", last), last
        with capsys.disabled():
            print(f"\nthe line: {last}")
        client, run = _run(uri)  # read on the full disk: the reserve it gave up let the run end FAILED
        run_id = run.info.run_id
        assert run.info.status == "FAILED" and run.data.tags[rl.STATUS] == rl.FAILED
        assert _logged_steps(client, run_id) == [1]
        fillers[0].unlink()
        code = cli_in_process("train", "--resume", run_id, "--quiet")
        assert code == 0, capsys.readouterr().err[-3000:]
        client, run = _run(uri)
        assert run.info.status == "FINISHED" and _logged_steps(client, run_id) == [1, 2, 3]
        assert client.get_run(run_id).data.tags[rl.PROGRESS] == "3/3"
