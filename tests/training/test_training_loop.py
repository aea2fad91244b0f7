"""The co-evolution loop end to end on a tiny random model, through the real CLI: real sandbox, real MLflow store,
real PEFT adapters and checkpoints. A subprocess where the process is the subject (kill -9 and resume); in this
process (``train_in_process``, ``cli_in_process``) where the run only produces a store to check, or a refusal whose
exit code and stderr are checked (capsys). (A random model rarely writes a valid task; the embedded model's test in
test_embedded_model.py checks that valid tasks and solved answers happen.)"""

import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path


from conftest import cli_in_process, paused_train_cmd, train_in_process, wait_for_marker

from populora.platform import progress
from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker
from populora.training.evolve.operators import FAMILY

TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
        "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=2", "--set", "tasks.rollouts=2"]


def _client(uri):
    from mlflow import MlflowClient
    return MlflowClient(tracking_uri=uri)


def _runs(uri):
    client = _client(uri)
    exp = client.get_experiment_by_name("populora")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if rl.PARENT not in r.data.tags]
    children = [r for r in runs if rl.PARENT in r.data.tags]
    return parents, children


def test_two_steps_logged_to_mlflow(mlflow_store, tmp_path):
    assert train_in_process("--config", str(Path(__file__).parents[2] / "configs/smoke.yaml"), "--set", "steps=2",
                            "--set", "evolution.every=2", "--set", "checkpoint.log_adapters_every=1", *TINY, "--quiet") == 0
    parents, children = _runs(mlflow_store)
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[rl.KIND] == "population"
    assert parent.data.params["population.teachers"] == "2"
    client = _client(mlflow_store)
    assert [m.step for m in client.get_metric_history(parent.info.run_id, rl.STEP_SENTINEL)] == [1, 2]
    for key in ("tasks/validity_rate", "teacher/reward", rl.COVERAGE, rl.COVERAGE_PER_100, rl.PROGRAMS, "time/step_s",
                "learn/no_signal_share", "learn/adv_std"):
        assert len(client.get_metric_history(parent.info.run_id, key)) == 2, key
    assert "learn/mismatch_k3" not in parent.data.metrics  # torch generation: the generator is the trainer
    # one child run per member: 4 initial + 2 children of the evolution at step 2 (1 teacher, 1 student)
    ids = sorted(c.data.tags[rl.MEMBER_ID] for c in children)
    assert ids == ["S0", "S1", "S2", "T0", "T1", "T2"]
    assert {c.info.status for c in children} == {"FINISHED"}  # members end with the parent, the replaced ones earlier
    for c in children:
        assert c.data.params["role"] in ("teacher", "student")
        assert len(client.get_metric_history(c.info.run_id, "rating/mu")) >= 1
        if "train/grad_norm" in c.data.metrics:  # it had rollouts to train on: its learning diagnostics too
            assert "learn/no_signal_share" in c.data.metrics and "learn/grad_norm" in c.data.metrics
    assert any("learn/no_signal_share" in c.data.metrics for c in children if c.data.params["role"] == "teacher")
    # the compute ledger: every member run, every step it lived, and the parent's sums
    for s in (1, 2):
        per_member = [[m.value for m in client.get_metric_history(c.info.run_id, "compute/generated_tokens") if m.step == s]
                      for c in children]
        assert all(len(v) == 1 for v in per_member if v) and sum(len(v) for v in per_member) == 4 + (2 if s == 2 else 0)
        parent_value = [m.value for m in client.get_metric_history(parent.info.run_id, "compute/generated_tokens") if m.step == s]
        assert parent_value == [sum(v[0] for v in per_member if v)] and parent_value[0] > 0
    for c in children:
        for key in ("compute/generated_tokens", "compute/trained_tokens", "compute/rollouts", "compute/cumulative/rollouts"):
            assert client.get_metric_history(c.info.run_id, key), (c.data.tags[rl.MEMBER_ID], key)
    assert client.get_metric_history(parent.info.run_id, "compute/per_adapter/rollouts")[-1].value > 0
    born = [c for c in children if c.data.tags[rl.MEMBER_ID] in ("T2", "S2")]
    assert all(c.data.params["operator"] in FAMILY and c.data.params["generation"] == "1" for c in born)
    # lineage artifact keeps every parent
    lineage = json.loads(Path(client.download_artifacts(parent.info.run_id, rl.LINEAGE, str(tmp_path))).read_text())
    assert {e["child"] for e in lineage["events"]} == set(ids)
    assert any(e["operator"] in FAMILY and e["parents"] for e in lineage["events"])
    # tasks table: every proposed task with its verdict
    tasks = json.loads(Path(client.download_artifacts(parent.info.run_id, rl.step_table(rl.TASKS, 1), str(tmp_path))).read_text())
    assert len(tasks["data"]) == 4 and "valid" in tasks["columns"] and "reason" in tasks["columns"]
    assert "completion" in tasks["columns"]  # the teacher's raw completion, reasoning included
    # the run names its tasks format, and says whether step-0 seeding fell back to hand-written programs
    assert parent.data.tags["populora.tasks_format"] == "direct"
    assert parent.data.tags["populora.seed_fallback"] in ("none", "code_o", "code_i", "code_o,code_i")
    assert "seed/valid/code_o" in parent.data.metrics
    # the validated config, as an artifact (eval / export without the run dir) equal to the run dir's copy
    logged = Path(client.download_artifacts(parent.info.run_id, rl.CONFIG_FILE, str(tmp_path / "cfg"))).read_text()
    assert logged == (Path(parent.data.tags[rl.RUN_DIR]) / rl.CONFIG_FILE).read_text() and "lora_rank" in logged
    # adapters are standard PEFT dirs, uploaded per member
    alive = [c for c in children if c.data.tags.get(rl.ALIVE) == "true"]
    assert len(alive) == 4
    for c in alive:
        assert (Path(c.data.tags[rl.ADAPTER_DIR]) / "adapter_config.json").is_file()
        assert any(a.path == rl.ADAPTER for a in client.list_artifacts(c.info.run_id))
    t0 = next(c for c in children if c.data.tags[rl.MEMBER_ID] == "T0")
    assert [a.path for a in client.list_artifacts(t0.info.run_id, "checkpoints")] == ["checkpoints/step_000001", "checkpoints/step_000002"]


def test_single_agent_baseline_runs_through_the_same_loop(mlflow_store):
    assert train_in_process("--config", str(Path(__file__).parents[2] / "configs/baseline.yaml"), "--set", "steps=1",
                            "--set", "tasks.seed_rounds=0", *TINY, "--quiet") == 0  # the seed programs: not about seeding
    parents, children = _runs(mlflow_store)
    assert parents[0].data.tags[rl.KIND] == "baseline"
    assert [c.data.tags[rl.MEMBER_ID] for c in children] == ["B0"]
    assert children[0].data.params["role"] == "both"


def test_bad_config_fails_fast_naming_the_field(mlflow_store, capsys):
    code = cli_in_process("train", "--set", "population.teacher=3")
    err = capsys.readouterr().err
    assert code == 2
    assert "population.teacher" in err and "teachers" in err
    code = cli_in_process("train", "--config", "nope.yaml")
    assert code == 2 and "nope.yaml" in capsys.readouterr().err
    assert not Path("mlflow.db").exists() or not _runs(mlflow_store)[0]  # nothing half-created


def test_kill_9_then_resume_loses_and_duplicates_no_step(mlflow_store, tmp_path, capsys):
    # the trainer waits once the third checkpoint is on disk (before its MLflow flush): kill -9 mid-run there
    marker = tmp_path / "after_checkpoint_3"
    cmd = paused_train_cmd(marker, 3, "--set", "steps=5", "--set", "evolution.every=2", "--set", "tasks.seed_rounds=0",
                           *TINY, "--quiet", after="save_checkpoint")  # the seed programs: seeding is not what's tested
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_marker(marker, proc)
    except BaseException:
        proc.kill()
        raise
    ckpts = list(tmp_path.glob("runs/*/checkpoints/step_000003"))
    assert ckpts, "no checkpoint appeared"
    run_id = ckpts[0].parents[1].name
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _client(mlflow_store).get_run(run_id).info.status == "RUNNING"  # killed, never closed
    # what the killed trainer last said (progress.json), as if it had trained 10 min past the checkpoint before the
    # kill (checkpoint.every > 1, a step cut short): the resume goes on from that, not back to the checkpoint's
    ckpt_s = json.loads((ckpts[0] / rl.CHECKPOINT_STATE).read_text())["training_s"]
    said = {**json.loads((ckpts[0].parents[1] / progress.FILE).read_text()), "phase": "next", "training_s": ckpt_s + 600}
    (ckpts[0].parents[1] / progress.FILE).write_text(json.dumps(said))

    # the resume in this process: the killed trainer is the process under test, the resume only reads what it left
    code, out = train_in_process("--resume", run_id, "--quiet"), capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "resuming run" in out.out
    client = _client(mlflow_store)
    steps = [m.step for m in client.get_metric_history(run_id, rl.STEP_SENTINEL)]
    assert sorted(steps) == [1, 2, 3, 4, 5]  # none lost, none twice
    assert client.get_run(run_id).info.status == "FINISHED"
    # training time (the steps' time, issue 54): carried over the kill in the checkpoint, so it grows across the
    # resume instead of starting again, and it leaves out both processes' model loading and the time between them
    trained = {m.step: m.value for m in client.get_metric_history(run_id, rl.TRAINING_SECONDS)}
    assert sorted(trained) == [1, 2, 3, 4, 5] and all(trained[k] < trained[k + 1] for k in range(1, 5)), trained
    assert trained[4] > ckpt_s + 600, (ckpt_s, trained)  # from the last word, not the checkpoint's (it went back)
    info = client.get_run(run_id).info
    assert trained[5] - 600 < (info.end_time - info.start_time) / 1000
    parents, children = _runs(mlflow_store)
    assert {c.info.status for c in children} == {"FINISHED"}  # reopened on resume, ended with the parent
    counts = Counter(c.data.tags[rl.MEMBER_ID] for c in children)
    assert max(counts.values()) == 1, counts  # no member got a second child run
    for c in children:
        mu_steps = [m.step for m in client.get_metric_history(c.info.run_id, "rating/mu")]
        assert len(mu_steps) == len(set(mu_steps)), (c.data.tags[rl.MEMBER_ID], mu_steps)
    # checkpoint.keep=2 deleted checkpoints 1-3: the models whose adapter lay there say so, the kept ones do not
    # (a died member's model points at its archived adapter, which stays)
    models = Tracker(mlflow_store).find_models(client.get_run(run_id).info.experiment_id, {rl.REGISTRY_RUN: run_id})
    in_checkpoint = [m for m in models if "/checkpoints/" in m.tags[rl.MODEL_ADAPTER]]
    assert {int(m.tags[rl.MODEL_STEP]) for m in in_checkpoint} == {1, 2, 3, 4, 5}
    for m in in_checkpoint:
        step, gone = int(m.tags[rl.MODEL_STEP]), not Path(m.tags[rl.MODEL_ADAPTER]).exists()
        assert gone == (step <= 3) and (rl.MODEL_PRUNED in m.tags) == gone, (step, m.tags)
        if gone:
            assert m.tags[rl.MODEL_PRUNED] == f"deleted at step {step + 2} (checkpoint.keep=2)", m.tags
    assert all(rl.MODEL_PRUNED not in m.tags for m in models if m not in in_checkpoint)


def test_resume_of_unknown_run_is_a_clear_error(mlflow_store, capsys):
    code = cli_in_process("train", "--resume", "0123456789abcdef")
    assert code == 2
    assert "0123456789abcdef" in capsys.readouterr().err
