"""A population stopped half-way and resumed, with its linked baseline run while it was stopped: the baseline first
matches the stopped population's spend (and says so), and the population's resume extends it (a resumable
baseline), so the pair ends compute-matched to what the population finally spent (issue 67, end to end on the tiny
random model, once)."""

import pytest
from conftest import train_in_process
from mlflow import MlflowClient

from populora.evaluation import compute
from populora.platform import config as config_io
from populora.platform.store import runlayout as rl
from populora.training import TrainConfig, matched_baseline
from populora.training.compute import budget as B
from populora.training.loop import Trainer

TINY = ["model.tiny_random=true", "model.lora_rank=4", "tasks.format=direct", "tasks.kinds=[code_o]",
        "tasks.seed_rounds=0", "checkpoint.every=1", "matchmaking.pfsp=even", "tasks.max_new_tokens_propose=24",
        "tasks.max_new_tokens_solve=8", "steps=8", "pair=stopresume"]  # 8 steps: a target many baseline steps long (5% band)


class StopAt(Exception):
    pass


@pytest.mark.slow
def test_a_stopped_and_resumed_population_ends_compute_matched_with_its_extended_baseline(mlflow_store, tmp_path):
    cfg = config_io.load(TrainConfig, None, TINY + [f"output_dir={tmp_path / 'runs'}"])
    population = Trainer.create(cfg)

    def stop_after_4(record):
        if population.step_index == 4:
            raise KeyboardInterrupt  # the UI's Stop, as the trainer sees it
    try:
        with pytest.raises(KeyboardInterrupt):
            population.train(progress=False, on_step=stop_after_4)
    finally:
        population.close()
    baseline = Trainer.create(matched_baseline(cfg))  # the queue starts it once the stopped population freed the slot
    try:
        baseline.train(progress=False)
    finally:
        baseline.close()
    client = MlflowClient(mlflow_store)
    pop_id, base_id = population.run_id, baseline.run_id
    early = client.get_run(base_id).data.tags[rl.BUDGET_MATCHED]
    assert early.startswith(B.SHORT_MATCH + " its last logged step 4 of 8 (the population was stopped"), early
    assert B.baseline_to_extend(population.log.tracker, pop_id) == base_id

    assert train_in_process("--resume", pop_id, "--quiet") == 0  # the population's resume, then its baseline's
    pop, base = client.get_run(pop_id), client.get_run(base_id)
    assert rl.status(pop) == rl.FINISHED and rl.status(base) == rl.FINISHED
    assert [m.step for m in client.get_metric_history(pop_id, rl.STEP_SENTINEL)] == list(range(1, 9))
    assert not base.data.tags.get(rl.BUDGET_MATCHED, "").startswith(B.SHORT_MATCH)  # matched to the final spend
    figure = compute.figure(pop.data.metrics, base.data.metrics)
    assert figure["matched"] and abs(figure["ratio"] - 1) <= 0.05, figure["words"]
    assert B.baseline_to_extend(population.log.tracker, pop_id) is None  # extended once, not again
