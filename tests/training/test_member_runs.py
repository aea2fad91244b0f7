"""Member runs end with their parent run (FINISHED / FAILED / KILLED), and a replaced member's run when it dies."""

import pytest

from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker
from populora.training.config import TrainConfig
from populora.training.member import STUDENT, TEACHER, Member, Population
from populora.training.run.member_models import plan
from populora.training.run.run_log import RunLog


def _log(uri: str) -> tuple[RunLog, Population]:
    log = RunLog.start(TrainConfig(), Tracker(uri))
    pop = Population([Member("T0", TEACHER, 8), Member("T1", TEACHER, 8), Member("S0", STUDENT, 8)])
    for m in pop.alive():
        log.member_run(m)
    return log, pop


def _statuses(log: RunLog) -> dict[str, str]:
    return {c.data.tags[rl.MEMBER_ID]: c.info.status for c in log.tracker.children(log.run_id)}


@pytest.mark.parametrize("status", [rl.FINISHED, rl.FAILED, rl.STOPPED])
def test_member_runs_end_with_their_parent(mlflow_store, status):
    log, _ = _log(mlflow_store)
    assert set(_statuses(log).values()) == {"RUNNING"}
    log.end(status)
    assert log.tracker.get_run(log.run_id).info.status == rl.MLFLOW_STATUS[status]
    assert _statuses(log) == {"T0": rl.MLFLOW_STATUS[status], "T1": rl.MLFLOW_STATUS[status], "S0": rl.MLFLOW_STATUS[status]}


def test_a_replaced_member_run_ends_when_it_dies_and_a_resume_reopens_the_living(mlflow_store):
    log, pop = _log(mlflow_store)
    pop["T1"].alive = False
    pop.add(Member("T2", TEACHER, 8, parents=["T0"], operator="mutation", born_step=1))
    record = {"step": 1, "run_metrics": {}, "member_metrics": {"T0": {"rating/mu": 26.0}, "T2": {"rating/mu": 25.0}},
              "tasks": [], "answers": [], "events": [{"dead": "T1", "child": "T2", "parents": ["T0"], "operator": "mutation"}]}
    log.write_steps([record], pop)
    statuses = _statuses(log)
    assert statuses["T1"] == "FINISHED" and statuses["T0"] == statuses["T2"] == "RUNNING"
    log.end(rl.STOPPED)
    assert _statuses(log) == {"T0": "KILLED", "T1": "FINISHED", "T2": "KILLED", "S0": "KILLED"}

    resumed = RunLog(log.run_id, log.experiment, log.member_runs, log.tracker)
    resumed.resumed("step_000001", [m.id for m in pop.alive()])
    assert _statuses(resumed) == {"T0": "RUNNING", "T1": "FINISHED", "T2": "RUNNING", "S0": "RUNNING"}
    resumed.finish(pop)
    assert set(_statuses(resumed).values()) == {"FINISHED"}


def test_a_resumed_process_finds_the_models_its_killed_process_made(mlflow_store):
    """Models made, then a kill -9 before the checkpoint that records them: the replay of that checkpoint gets the
    same ids back (one search of the run's models), no second copy. sqlite only, no model: about a second."""
    log, pop = _log(mlflow_store)
    alive = [{"id": m.id, "adapter_dir": f"/ckpt/{m.id}"} for m in pop.alive()]
    births = {m.id: {"parents": [], "operator": "init", "step": 0} for m in pop.alive()}
    latest: dict = {}
    made = log.log_models(plan(1, alive, {}, latest, births), pop, latest, births, "tiny")
    assert sorted(made) == [("S0", 1), ("T0", 1), ("T1", 1)]
    replay = RunLog(log.run_id, log.experiment, log.member_runs, log.tracker)  # a resumed process: new=False
    again = replay.log_models(plan(1, alive, {}, {}, births), pop, {}, births, "tiny")
    assert again == made
    exp = log.tracker.experiment_id(log.experiment)
    assert len(log.tracker.find_models(exp, {rl.REGISTRY_RUN: log.run_id})) == 3
    # the next checkpoint stands on them
    step2 = replay.log_models(plan(2, alive, {}, latest, births), pop, latest, births, "tiny")
    model = log.tracker.client.get_logged_model(step2[("T0", 2)])
    assert (model.tags[rl.MODEL_ORIGIN], model.tags[rl.MODEL_PARENTS]) == ("trained", made[("T0", 1)])


def test_a_finished_run_drops_the_note_its_stop_left(mlflow_store):
    """Issue 67: "stopped at step 5/6; resume with ..." stayed the run's description after the resumed run finished;
    a note someone wrote stays."""
    from populora.training.run.run_log import stop_line

    for note, kept in ((stop_line("r", 5, 6, 4), ""), ("lr sweep, second try", "lr sweep, second try")):
        log, pop = _log(mlflow_store)
        log.tracker.set_tags(log.run_id, {rl.NOTE: note})
        log.finish(pop)
        assert log.tracker.get_run(log.run_id).data.tags.get(rl.NOTE, "") == kept
