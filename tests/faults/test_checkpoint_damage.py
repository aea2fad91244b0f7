"""A damaged checkpoint (a truncated or changed file, a missing one) is found before it is trusted: a resume takes
the newest intact checkpoint by itself and says what was wrong with the newer one; a named step (``--resume RUN
--step N``) that is damaged is refused with what is wrong and which steps are intact. Checkpoints from before
manifests are verified by loading their files."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import cli_in_process
from safetensors.torch import save_file

from populora.platform.store import manifest as mf
from populora.platform.store import runlayout as rl
from populora.training.run import checkpoint
from populora.training.run.checkpoint import CheckpointError

TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4", "--set", "tasks.seed_rounds=0",
        "--set", "tasks.max_new_tokens_propose=16", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=1", "--set", "tasks.rollouts=2", "--set", "checkpoint.every=1", "--quiet"]


class FakeBackend:
    def save_adapter(self, member, directory):
        directory.mkdir(parents=True, exist_ok=True)
        save_file({"w": torch.arange(64.0)}, str(directory / "adapter_model.safetensors"))
        (directory / "adapter_config.json").write_text("{}")

    def optimizer_state(self, member):
        return {"state": {0: {"exp_avg": torch.ones(256)}}}


def _save(run_dir, step, keep=3):
    path, _ = checkpoint.save(run_dir, step, {"step": step}, "steps: 4\n", FakeBackend(), ["T0", "S0"], {"r": 1}, keep=keep)
    return path


def _truncate(f, keep_fraction=0.5):
    data = f.read_bytes()
    f.write_bytes(data[: int(len(data) * keep_fraction)])
    return len(data)


def test_the_manifest_lists_every_file_with_size_and_crc_and_is_written_last(tmp_path):
    path = _save(tmp_path, 1)
    found = mf.read(path)
    on_disk = {f.relative_to(path).as_posix(): f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name != mf.NAME}
    assert {k: v["bytes"] for k, v in found["files"].items()} == on_disk
    assert found["total_bytes"] == sum(on_disk.values()) and found["checksum"] == "crc32"
    import zlib
    for rel, entry in found["files"].items():
        assert entry["crc32"] == f"{zlib.crc32((path / rel).read_bytes()):08x}"  # the reference: zlib on the whole file
    assert checkpoint.verify(path) is None


@pytest.mark.parametrize("damage, says", [
    ("truncate", r"optim/S0\.pt is \d+ bytes, its manifest says \d+"),
    ("flip", r"adapters/T0/adapter_model\.safetensors does not match its checksum \(CRC-32 [0-9a-f]{8}, its manifest says [0-9a-f]{8}\)"),
    ("delete", r"rng\.pt is missing"),
    ("manifest", r"its manifest\.json is unreadable"),
])
def test_each_kind_of_damage_is_named(tmp_path, damage, says):
    path = _save(tmp_path, 1)
    if damage == "truncate":
        _truncate(path / "optim" / "S0.pt")
    elif damage == "flip":  # one bit, same size: only the checksum sees it
        f = path / "adapters" / "T0" / "adapter_model.safetensors"
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0x10
        f.write_bytes(bytes(data))
    elif damage == "delete":
        (path / "rng.pt").unlink()
    else:
        _truncate(path / mf.NAME)
    assert re.fullmatch(says, checkpoint.verify(path).split(" (")[0] if damage == "manifest" else checkpoint.verify(path)), checkpoint.verify(path)


def test_a_checkpoint_from_before_manifests_is_verified_by_loading(tmp_path):
    path = _save(tmp_path, 1)
    (path / mf.NAME).unlink()  # as written before manifests existed
    assert checkpoint.verify(path) is None
    _truncate(path / "optim" / "T0.pt")
    problem = checkpoint.verify(path)
    assert problem.startswith("optim/T0.pt does not load (no manifest: checked by loading): "), problem
    (path / "optim" / "T0.pt").unlink()  # gone: the state names T0 alive, so its file is looked for
    (path / "state.json").write_text(json.dumps({"step": 1, "population": {"members": [{"id": "T0", "alive": True}]}}))
    assert checkpoint.verify(path) == "optim/T0.pt is missing (no manifest: checked by loading)"


def test_resume_falls_back_to_the_newest_intact_checkpoint_and_says_why(tmp_path):
    for s in (1, 2, 3):
        _save(tmp_path, s)
    root = tmp_path / rl.CHECKPOINTS
    size = _truncate(root / "step_000003" / "optim" / "T0.pt")
    (root / "step_000002" / "state.json").write_text("{}")  # rewritten shorter
    path, notes = checkpoint.resumable(tmp_path)
    assert path == root / "step_000001"
    assert notes == [f"the checkpoint of step 3 is damaged: optim/T0.pt is {size // 2} bytes, its manifest says {size}",
                     f"the checkpoint of step 2 is damaged: state.json is 2 bytes, its manifest says "
                     f"{mf.read(root / 'step_000002')['files']['state.json']['bytes']}",
                     "resuming from the checkpoint of step 1"]
    assert checkpoint.resumable(tmp_path, step=1) == (root / "step_000001", [])
    with pytest.raises(CheckpointError, match=r"the checkpoint of step 3 under .* is damaged: optim/T0\.pt is \d+ bytes, "
                                              r"its manifest says \d+; intact: step 1$"):
        checkpoint.resumable(tmp_path, step=3)
    with pytest.raises(CheckpointError, match=r"no checkpoint of step 7 under .*; it keeps steps 1, 2, 3"):
        checkpoint.resumable(tmp_path, step=7)
    _truncate(root / "step_000001" / "rng.pt")
    with pytest.raises(CheckpointError, match=r"no intact checkpoint under .*: the checkpoint of step 3 is damaged: .*; "
                                              r"the checkpoint of step 1 is damaged: rng\.pt is \d+ bytes"):
        checkpoint.resumable(tmp_path)


def test_a_stopped_run_whose_latest_checkpoint_is_truncated_resumes_from_the_previous_one(mlflow_store, tmp_path, capsys):
    """The real CLI: a 3-step run stopped (Ctrl-C) after step 2, its checkpoint of step 2 truncated (an optimizer
    state cut in half); ``--resume RUN --step 2`` is refused naming the damage, ``--resume RUN`` goes on from step 1
    by itself, saying so, and every step is in MLflow once."""
    from mlflow import MlflowClient

    from populora.training.loop import Trainer

    real = Trainer.step

    def stop_after_2(self, *args, **kwargs):  # Trainer.step(shape=None)
        record = real(self, *args, **kwargs)
        if self.step_index == 2:
            raise KeyboardInterrupt
        return record

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Trainer, "step", stop_after_2)
        assert cli_in_process("train", "--set", "steps=3", *TINY) == 130
    out = capsys.readouterr().out
    run_id = re.search(r"resume with `populora train --resume (\w+)`", out).group(1)
    client = MlflowClient(mlflow_store)
    run_dir = rl.run_dir(client.get_run(run_id))
    optim = sorted((run_dir / rl.CHECKPOINTS / "step_000002" / "optim").glob("*.pt"))[0]
    size = _truncate(optim)
    damage = f"optim/{optim.name} is {size // 2} bytes, its manifest says {size}"

    assert cli_in_process("train", "--resume", run_id, "--step", "2", "--quiet") == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: the checkpoint of step 2 under {str(run_dir)!r} is damaged: {damage}; intact: step 1", err
    assert client.get_run(run_id).info.status == "KILLED"  # refused before the run was touched

    assert cli_in_process("train", "--resume", run_id, "--quiet") == 0
    out = capsys.readouterr()
    with capsys.disabled():  # in the test log (-s), for the reliability table
        print(f"\nthe lines:\n{out.err.strip()}")
    assert out.err.strip().splitlines()[-2:] == [f"warning: the checkpoint of step 2 is damaged: {damage}",
                                                 "warning: resuming from the checkpoint of step 1"], out.err[-2000:]
    assert f"resuming run {run_id} at step 1/3" in out.out
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags[rl.RESUMED_FROM] == "step_000001"
    assert sorted(m.step for m in client.get_metric_history(run_id, rl.STEP_SENTINEL)) == [1, 2, 3]  # each once
    assert checkpoint.verify(run_dir / rl.CHECKPOINTS / "step_000002") is None  # re-written whole by the resume
    assert json.loads((run_dir / rl.CHECKPOINTS / "step_000003" / "state.json").read_text())["step"] == 3
