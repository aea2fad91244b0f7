"""Out of memory ends with the setting to lower and `populora plan`'s figure for it (training/run/oom.py): a CUDA
``torch.OutOfMemoryError`` raised in the update or in generation of a real tiny run (injected where the backend
would raise it) ends the run FAILED with one line naming the phase, the setting and the figure, checked against
``make_plan`` (the plan is the reference); the advice a trainer leaves for its supervisor (a CPU out-of-memory: the
OOM killer's SIGKILL, tested in test_restart.py) is the same text for both phases."""

from __future__ import annotations

import torch
from conftest import train_in_process
from mlflow import MlflowClient

from populora.platform import config as config_io
from populora.platform import plan
from populora.platform.store import runlayout as rl
from populora.platform.backends.multilora import MultiLoraBackend
from populora.training.run import oom
from populora.training.config import TrainConfig
from populora.training.compute.workload import make_plan

SETS = ["model.tiny_random=true", "model.lora_rank=4", "tasks.max_new_tokens_propose=24", "tasks.max_new_tokens_solve=8",
        "tasks.tasks_per_teacher=2", "tasks.rollouts=2", "tasks.seed_rounds=0", "steps=2"]
CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"


def _parent(uri: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("populora")
    return client.search_runs([exp.experiment_id], filter_string=rl.PARENT_RUNS)[0]


def _oom_run(monkeypatch, capsys, method: str, at_call: int, *sets: str) -> str:
    """A tiny run whose backend ``method`` raises a CUDA out-of-memory at its ``at_call``-th call; its last line."""
    calls = []
    original = getattr(MultiLoraBackend, method)

    def run_out(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == at_call:
            raise torch.OutOfMemoryError(CUDA_OOM)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MultiLoraBackend, method, run_out)
    code = train_in_process(*[a for s in SETS + list(sets) for a in ("--set", s)], "--quiet")
    monkeypatch.setattr(MultiLoraBackend, method, original)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err[-3000:]
    return err.strip().splitlines()[-1]


def _check_failed(uri: str, message: str):
    run = _parent(uri)
    assert run.info.status == "FAILED" and run.data.tags[rl.STATUS] == rl.FAILED
    assert run.data.tags[rl.ERROR] == f"OutOfMemoryError: {CUDA_OOM}"
    assert run.data.tags[rl.NOTE] == message.removeprefix("error: ")  # MLflow's description says the same
    return run


def test_a_cuda_oom_in_the_update_names_micro_batch_and_its_fork_command_goes_on(mlflow_store, monkeypatch, capsys):
    """At step 2, after step 1's checkpoint: the message's own command (a fork of that checkpoint with the lower
    micro-batch) trains the rest."""
    message = _oom_run(monkeypatch, capsys, "train_step", 2, "checkpoint.every=1")
    run = _check_failed(mlflow_store, message)
    cfg = config_io.load(TrainConfig, None, SETS)
    memory = make_plan(cfg)["memory_gb"]  # what `populora plan` prints (its default GPU: the figure is the same)
    per_row = memory["activations"] / cfg.optim.micro_batch
    assert message.startswith(f"error: out of GPU memory in update at step 2 ({CUDA_OOM}): lower optim.micro_batch "
                              f"(now 4): `populora plan` puts the update's activations at {memory['activations']:.2f} GB "
                              f"({per_row:.2f} GB a sequence of optim.max_seq_len=1024)"), message
    assert "this machine's RAM has " in message and ": try optim.micro_batch=" in message  # a CPU run: its RAM
    command = f"populora train --fork {run.info.run_id} --step 1 --set optim.micro_batch=2"
    assert message.endswith(f"The run is FAILED; go on with `{command}` (a new run from its last checkpoint)")
    assert train_in_process(*command.split()[2:], "--quiet") == 0


def test_a_cuda_oom_in_generation_names_the_token_budgets(mlflow_store, monkeypatch, capsys):
    message = _oom_run(monkeypatch, capsys, "generate", 1)
    _check_failed(mlflow_store, message)
    memory = make_plan(config_io.load(TrainConfig, None, SETS))["memory_gb"]
    assert message.startswith(f"error: out of GPU memory in generation at step 1 ({CUDA_OOM}): lower "
                              f"tasks.max_new_tokens_propose (now 24) and tasks.max_new_tokens_solve (now 8): `populora "
                              f"plan` puts generation's KV cache at {memory['generation_kv']:.2f} GB ({plan.GEN_BATCH} "
                              f"rows per generate call, a fixed figure)"), message
    sets = "--set tasks.max_new_tokens_propose=16 --set tasks.max_new_tokens_solve=8"  # halved, not below their minimum
    assert message.endswith(f"The run is FAILED; go on with the same command with {sets} (it had no checkpoint yet)")


def test_the_advice_for_the_oom_killer_names_both_phases(tmp_path):
    cfg = config_io.load(TrainConfig, None, ["model.generation=vllm", "model.vllm_gpu_memory=0.3"])
    g = plan.GPUS["a100-40gb"]
    text = oom.advice(cfg, None, g)
    update, generation = text.split("; or ")
    assert update == oom.update_advice(cfg, g) and generation == oom.generation_advice(cfg, g)
    vllm = make_plan(cfg, "a100-40gb")["memory_gb"]["vllm"]
    assert f"lower model.vllm_gpu_memory (now 0.3): `populora plan` gives vLLM {vllm:.2f} GB of a100-40gb's" in generation
    oom.write_advice(tmp_path, cfg)
    assert (tmp_path / oom.ADVICE_FILE).read_text().startswith("lower optim.micro_batch (now 4): ")
    oom.write_advice(None, cfg)  # outside a job: nothing written, no error


def test_the_micro_batch_it_suggests_fits_by_the_plans_own_arithmetic():
    """The micro-batch suggested is the plan's largest that fits (at most half the current one), and at 1 the
    advice moves on to checkpointing or the sequence length."""
    g = plan.GPUS["rtx4090-24gb"]
    for mb in (1, 2, 3, 8, 64):
        cfg = config_io.load(TrainConfig, None, ["model.base=Qwen/Qwen2.5-0.5B", f"optim.micro_batch={mb}"])
        text = oom.update_advice(cfg, g)
        m = make_plan(cfg, "rtx4090-24gb")["memory_gb"]
        fixed, per_row = m["base_weights"] + m["adapters"] + m["optimizer"], m["activations"] / mb
        if mb == 1:
            assert text.endswith("it is already 1, so set model.activation_checkpointing=true or lower optim.max_seq_len")
            continue
        suggested = int(text.rsplit("optim.micro_batch=", 1)[1])
        assert 1 <= suggested <= mb // 2
        assert suggested == 1 or fixed + suggested * per_row <= g.usable_gb


def test_phase_of_reads_the_innermost_phase():
    def train_step():
        raise torch.OutOfMemoryError("x")

    def generate():
        train_step()

    try:
        generate()
    except torch.OutOfMemoryError as err:
        assert oom.phase_of(err.__traceback__) == oom.UPDATE
    try:
        raise torch.OutOfMemoryError("y")
    except torch.OutOfMemoryError as err:
        assert oom.phase_of(err.__traceback__) is None


def test_a_data_parallel_workers_oom_is_an_oom_not_a_lost_worker(tmp_path, monkeypatch, capsys):
    """A worker's CUDA out-of-memory reaches the driver as WorkerLost (from the worker's error): it ends with the
    setting to lower (exit 1, not restarted: it would run out again), not as a transient lost worker (exit 75)."""
    from types import SimpleNamespace

    from populora.cli import restarts
    from populora.platform.backends.data_parallel import WorkerLost

    tags = {}
    trainer = SimpleNamespace(cfg=TrainConfig(), run_id="r1", step_index=4, checkpointed=4,
                              log=SimpleNamespace(tracker=SimpleNamespace(set_tags=lambda run, t: tags.update(t))))

    def train_step():  # the driver's call that waited on the workers
        try:
            raise torch.OutOfMemoryError(CUDA_OOM)
        except torch.OutOfMemoryError as err:
            raise WorkerLost(f"data-parallel model worker 1 of 2 failed during the update (OutOfMemoryError: {CUDA_OOM})") from err

    monkeypatch.setenv(rl.ENV_JOB_DIR, str(tmp_path))
    try:
        train_step()
    except WorkerLost as err:
        assert restarts.failure_code(err, trainer) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: out of GPU memory in update at step 5 (data-parallel model worker 1 of 2 failed")
    assert line.endswith("go on with `populora train --fork r1 --step 4 --set optim.micro_batch=2` (a new run from its last checkpoint)")
    assert tags[rl.NOTE] == line.removeprefix("error: ") and not (tmp_path / "failure.json").exists()
