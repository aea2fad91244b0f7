"""solver.data: buffer (AZR): the answers that estimate solve rates are not trained on; each student trains on a
batch per kind drawn from the buffers by max_new (this step's additions first, then uniform), one answer each."""

from __future__ import annotations

import numpy as np

from populora.training.phases.buffers import TaskBuffers
from populora.training.tasks import Task


def _task(i: int, step: int) -> Task:
    return Task(id=f"t{i}", kind="code_o", program="def f(a):\n    return a", input=str(i), output=str(i), step=step,
                valid=True)


def test_max_new_takes_this_steps_tasks_first_then_uniform():
    buffers = TaskBuffers(["code_o"], 100)
    for i in range(20):
        buffers.add(_task(i, step=1 if i < 17 else 2))  # three added at step 2
    rng = np.random.default_rng(0)
    got = buffers.sample_max_new("code_o", 8, 2, rng)
    assert len(got) == 8 and {t.id for t in got} >= {"t17", "t18", "t19"}
    assert {t.id for t in buffers.sample_max_new("code_o", 2, 2, rng)} <= {"t17", "t18", "t19"}
    assert len(buffers.sample_max_new("code_o", 50, 2, rng)) == 50  # more than the buffer: drawn with replacement


def test_full_buffer_drops_the_new_task_as_azr_or_the_oldest_as_ours():
    azr, ours = TaskBuffers(["code_o"], 8, "drop_new"), TaskBuffers(["code_o"], 8)
    for i in range(10):
        azr.add(_task(i, 1))
        ours.add(_task(i, 1))
    assert [t.id for t in azr.buffers["code_o"]] == [f"t{i}" for i in range(8)]
    assert [t.id for t in ours.buffers["code_o"]] == [f"t{i}" for i in range(2, 10)]


def test_code_f_pool_azr_draws_code_i_and_code_o_programs_only():
    buffers = TaskBuffers(["code_o", "code_f"], 8, code_f_pool="programs")
    buffers.add(_task(0, 1))
    buffers.add(Task(id="f", kind="code_f", program="def f(a):\n    return 2", inputs=["1"], outputs=["2"], valid=True))
    rng = np.random.default_rng(0)
    assert {buffers.programs(rng).id for _ in range(20)} == {"t0"}


def test_buffer_step_trains_students_on_the_batch_not_on_the_estimation_answers(mlflow_store):
    from populora.platform import config as config_io
    from populora.training.config import TrainConfig
    from populora.training.loop import Trainer

    cfg = config_io.load(TrainConfig, None, [
        "steps=1", "model.tiny_random=true", "model.lora_rank=4", "population.teachers=2", "population.students=2",
        "tasks.tasks_per_teacher=2", "tasks.answers_per_task=2", "tasks.kinds=[code_o, code_i]",
        "tasks.max_new_tokens_propose=16", "tasks.max_new_tokens_solve=8", "tasks.seed_buffer=1",
        "tasks.seed_rounds=0", "evolution.every=0", "solver.data=buffer", "solver.batch_per_kind=3"])
    trainer = Trainer.create(cfg)
    record = trainer.step()
    trainer.finish()
    assert record["run_metrics"]["solver/batch_answers"] == 2 * 2 * 3  # students x kinds x batch_per_kind
    for s in trainer.population.students:
        metrics = record["member_metrics"][s.id]
        estimation = sum(a["member"] == s.id for a in record["answers"])
        assert metrics["train/rollouts"] == 2 * 3  # trained: its batch, one answer per drawn task
        assert metrics["compute/rollouts"] == 2 * 3 + estimation  # the ledger counts both
