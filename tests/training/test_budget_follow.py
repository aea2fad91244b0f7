"""A baseline following its population (budget.population) when that population ends without finishing: failed,
stopped, or killed outright (kill -9, a lost machine: its MLflow run stays RUNNING, its heartbeat stops). The
baseline must stop waiting, match the population's last logged per-adapter ledger and say so (its log, its
``populora.budget_matched`` tag, the one compute figure), or end FAILED with one clear line when there is nothing
to match. No timing: the population's state is planted in a real MLflow store (its status, a heartbeat in the
past), and the "crash" happens inside the baseline's wait (its ``sleep``), the event it waits on."""

import time

import pytest
from mlflow import MlflowClient

from conftest import cli_in_process

from populora.evaluation import compute
from populora.platform import config as config_io
from populora.platform.jobs import heartbeat
from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker
from populora.training.compute import budget as B
from populora.training.config import TrainConfig

TINY = ["model.tiny_random=true", "model.lora_rank=4", "tasks.format=direct", "tasks.kinds=[code_o]",
        "tasks.seed_rounds=0", "checkpoint.every=50", "matchmaking.pfsp=even", "population.single_agent=true",
        "budget.population=true", "steps=40", "tasks.max_new_tokens_propose=24", "tasks.max_new_tokens_solve=8"]
PAIR = "crashpair"


def _beat(age_s: float) -> str:
    """A heartbeat tag written ``age_s`` seconds ago by a process that no longer matters (pid 1, another host)."""
    return heartbeat.Beat(time.time() - age_s, 20.0, 1, 0.0, "gone-host").text()


def plant_population(tracker: Tracker, ledger: list[float], status: str = rl.RUNNING, beat_age_s: float = 5.0,
                     steps: int = 4) -> str:
    """A population run as a trainer leaves it: per-adapter ledger logged at steps 1..len(ledger) (half generated,
    half trained tokens), our status tag, MLflow's status to match, a heartbeat ``beat_age_s`` old."""
    run_id = tracker.start_run("planted", "population", tags={rl.KIND: rl.POPULATION, rl.PAIR: PAIR, rl.STATUS: status,
                                                               rl.HEARTBEAT: _beat(beat_age_s)})
    tracker.client.log_param(run_id, rl.PARAM_STEPS, str(steps))
    for step, tokens in enumerate(ledger, start=1):
        tracker.log_metrics(run_id, {rl.COMPUTE_PER_ADAPTER["generated_tokens"]: tokens / 2,
                                     rl.COMPUTE_PER_ADAPTER["trained_tokens"]: tokens / 2}, step)
    if status != rl.RUNNING:
        tracker.client.set_terminated(run_id, rl.MLFLOW_STATUS[status])
    return run_id


def crash(tracker: Tracker, run_id: str) -> None:
    """What kill -9 leaves: nothing written; the heartbeat simply grows old (planted: a beat 10 min ago)."""
    tracker.set_tags(run_id, {rl.HEARTBEAT: _beat(600)})


def baseline_cfg(tmp_path, *extra: str) -> TrainConfig:
    return config_io.load(TrainConfig, None, TINY + [f"pair={PAIR}", f"output_dir={tmp_path / 'runs'}", *extra])


# ====================================================================== the target as the baseline reads it
@pytest.mark.parametrize("status, words", [(rl.RUNNING, None), (rl.FINISHED, ""), (rl.FAILED, "(the population failed"),
                                           (rl.STOPPED, "(the population was stopped"), ("crashed", "(the population crashed: no heartbeat for 10 min, limit 120 s")])
def test_the_target_is_final_once_the_population_ended_or_crashed(status, words, mlflow_store, tmp_path):
    tracker = Tracker()
    pop = plant_population(tracker, [300.0, 700.0], rl.RUNNING if status == "crashed" else status)
    if status == "crashed":
        crash(tracker, pop)
    target = B.read_target(baseline_cfg(tmp_path), tracker)
    assert target.tokens == 700.0
    assert target.final is (words is not None)
    if words:  # matched at its last logged step, and how it ended, with the run named
        assert target.note == f"matched to the population's spend at its last logged step 2 of 4 {words}, run {pop})"
    else:
        assert target.note == ""


def test_a_heartbeat_just_inside_the_limit_is_still_followed(mlflow_store, tmp_path, monkeypatch):
    """The readers' one definition of crashed (heartbeat.is_stale): older than the limit, not before."""
    monkeypatch.setenv(heartbeat.LIMIT_ENV, "300")
    tracker = Tracker()
    pop = plant_population(tracker, [500.0], beat_age_s=0)
    beat = heartbeat.Beat.parse(tracker.get_run(pop).data.tags[rl.HEARTBEAT])
    assert not B.read_target(baseline_cfg(tmp_path), tracker, now=beat.t + 299).final
    assert B.read_target(baseline_cfg(tmp_path), tracker, now=beat.t + 301).final


def test_the_wait_ends_when_the_population_crashes_inside_it(mlflow_store, tmp_path, capsys):
    """The population runs (fresh heartbeat) with less logged than a baseline step may spend: the baseline waits;
    while it waits the population is killed (its beat grows old): the next read ends the wait, the line says what
    it is matched to, once, and the step it then takes is one that fits the population's last ledger."""
    tracker = Tracker()
    pop = plant_population(tracker, [40.0])
    budget = B.Budget(baseline_cfg(tmp_path), tracker)
    waits = []

    def sleep(seconds):
        waits.append(seconds)
        crash(tracker, pop)

    budget.sleep = sleep
    step = budget.shape({}, 1)
    out = capsys.readouterr().out
    assert waits == [10.0]  # budget.poll_s, once
    assert out.count("budget: waiting for the per-adapter ledger of run " + pop) == 1
    assert out.count("budget: matched to the population's spend at its last logged step 1 of 4 (the population crashed") == 1
    assert step is not None and budget.target.final and budget.target.tokens == 40.0
    tracker.set_tags(pop, {rl.HEARTBEAT: _beat(1300)})  # the next step reads it silent for longer: not said again
    budget.shape({}, 1)
    assert "no heartbeat for 22 min" in budget.target.note and "budget: matched" not in capsys.readouterr().out
    tags = budget.tags(0.0)
    assert tags[rl.BUDGET_MATCHED] == budget.target.note and "crashed" in tags[rl.BUDGET]


@pytest.mark.parametrize("status", [rl.FAILED, "crashed"])
def test_a_population_that_ended_before_any_step_leaves_nothing_to_match(status, mlflow_store, tmp_path):
    tracker = Tracker()
    pop = plant_population(tracker, [], rl.RUNNING if status == "crashed" else status)
    if status == "crashed":
        crash(tracker, pop)
    with pytest.raises(B.BudgetError, match=f"cannot match the compute of the population: {pop} \\({status}\\), no step "
                                            "logged yet; it ended before logging any step"):
        B.Budget(baseline_cfg(tmp_path), tracker, "BASE").shape({}, 1)


# ====================================================================== the real loop and the CLI
def test_a_baseline_of_a_population_killed_mid_run_ends_matched_to_its_last_step(mlflow_store, tmp_path, capsys):
    """The tiny model, a real sandbox and store: the population (planted: 900 tokens per adapter logged at its
    step 3 of 4, heartbeat fresh) is killed while the baseline waits for it; the baseline ends FINISHED within 5%
    of 900, and its tag, ``populora runs`` and the compute figure say what it was matched to."""
    from populora.training.loop import Trainer

    tracker = Tracker()
    pop = plant_population(tracker, [300.0, 600.0, 900.0])
    trainer = Trainer.create(baseline_cfg(tmp_path))
    crashed = []

    def sleep(seconds):  # the population dies while the baseline waits for it
        crashed.append(seconds)
        crash(tracker, pop)

    trainer.budget.sleep = sleep
    try:
        trainer.train(progress=False)
    finally:
        trainer.close()
    client = MlflowClient(mlflow_store)
    base = client.get_run(trainer.run_id)
    spent = compute.per_adapter(base.data.metrics)["tokens"]
    assert crashed == [10.0], "the baseline never waited: plant a larger population ledger"
    assert base.info.status == "FINISHED" and abs(spent / 900 - 1) <= 0.05, spent
    note = f"matched to the population's spend at its last logged step 3 of 4 (the population crashed: no heartbeat for 10 min, limit 120 s, run {pop})"
    assert base.data.tags[rl.BUDGET_MATCHED] == note
    assert base.data.tags[rl.BUDGET].startswith("budget reached") and note in base.data.tags[rl.BUDGET]
    out = capsys.readouterr().out
    assert out.count(f"budget: {note}: 900 tokens per adapter") == 1
    assert compute.of_runs(client.get_run(pop), base)["words"].endswith(f"; {note}")
    tracker.set_tags(pop, {rl.BASELINE_RUN: trainer.run_id})
    assert cli_in_process("runs") == 0
    assert f"{pop[:12]} vs {trainer.run_id[:12]}: compute-matched" in capsys.readouterr().out.split(note)[0]


def test_train_ends_failed_with_one_line_when_there_is_nothing_to_match(mlflow_store, tmp_path, capsys):
    tracker = Tracker()
    pop = plant_population(tracker, [], rl.FAILED)
    sets = [a for s in TINY + [f"pair={PAIR}", f"output_dir={tmp_path / 'runs'}"] for a in ("--set", s)]
    assert cli_in_process("train", *sets, "--quiet") == 1
    err = capsys.readouterr().err
    assert f"error: cannot match the compute of the population: {pop} (failed)" in err and "Traceback" not in err
    base = next(r for r in MlflowClient(mlflow_store).search_runs(
        [e.experiment_id for e in MlflowClient(mlflow_store).search_experiments()]) if r.info.run_id != pop)
    assert base.info.status == "FAILED" and "BudgetError: cannot match" in base.data.tags[rl.ERROR]
