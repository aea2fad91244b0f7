"""A compute-matched baseline whose population has no MLflow run yet (budget.population, "waiting for the
population (not started yet)"): while the population's job is queued or running it waits; once that job has ended
without ever creating its run (a bad config, stopped while queued) the baseline ends FAILED with one line naming
the job, how it ended, its log and what to do, instead of waiting for ever (training/compute/population_job.py).

The population's jobs are real jobs of the real launcher (platform/jobs/jobs.py: supervisor, queue, exit code) on a
queue of one slot; the baseline's wait is observed through its ``sleep``, where the test makes the population's
next event happen (its run appears, it is stopped): no test waits on a clock. The last test runs both as real
``populora train`` jobs, as the Launch page starts a population with its baseline."""

import json
import socket
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from conftest import HOLD, wait_for

from populora.platform import config as config_io
from populora.platform.jobs import heartbeat, jobs, queue
from populora.platform.store import runlayout as rl
from populora.platform.store import sweep as S
from populora.platform.jobs.job_record import Job
from populora.platform.store.tracking import Tracker
from populora.training.compute import budget as B
from populora.training.config import TrainConfig
from populora.training.compute.population_job import PopulationJob, ended_without_run

TINY = ["model.tiny_random=true", "model.lora_rank=4", "tasks.format=direct", "tasks.kinds=[code_o]",
        "tasks.seed_rounds=0", "checkpoint.every=50", "matchmaking.pfsp=even", "tasks.max_new_tokens_propose=24",
        "tasks.max_new_tokens_solve=8"]
BASELINE = ["population.single_agent=true", "budget.population=true", "steps=40"]
PAIR = "jobpair"
FAILS = ("import sys; print('loading the model', flush=True); "
         "print('error: no model at /no/such/model', file=sys.stderr); sys.exit(2)")
AGAIN = ("fix what ended it, then launch the population and its baseline again (the Launch page's baseline box, "
         "or populora train --config CONFIG --baseline), or give this baseline a number: --set budget.tokens=N")


@pytest.fixture
def job_queue(mlflow_store, tmp_path, monkeypatch):
    """A store, a jobs dir and a queue of one slot in ``tmp_path``; every job started in the test is stopped."""
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_QUEUE_DIR", str(tmp_path / "queue"))
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "1")
    yield tmp_path / "jobs"
    for job in jobs.list_jobs(tmp_path / "jobs"):  # never leave a process behind
        jobs.stop(job, timeout_s=10)


def cfg_of(tmp_path, *sets: str) -> TrainConfig:
    return config_io.load(TrainConfig, None, TINY + [f"output_dir={tmp_path / 'runs'}", *sets])


def population_yaml(tmp_path, *sets: str) -> str:
    return config_io.dump(cfg_of(tmp_path, f"pair={PAIR}", "steps=4", *sets))


def as_baseline_job(root: Path, monkeypatch, name: str = "baseline-job") -> Path:
    """This process as the baseline's job: its job dir next to the population's (what the launcher sets)."""
    job_dir = root / name
    job_dir.mkdir(parents=True)
    monkeypatch.setenv(rl.ENV_JOB_DIR, str(job_dir))
    return job_dir


def population_job(argv_code: str, config_yaml: str, name: str = "pop") -> Job:
    """A population job of the real launcher, in the queue, whose process is ``python -c argv_code``."""
    return jobs.start([sys.executable, "-c", argv_code], name=name, slots=queue.max_parallel(),
                      files={"config.yaml": config_yaml})


def ended(job: Job) -> str:
    return wait_for(lambda: job.status not in queue.ACTIVE and job.status, 120, f"job {job.id} to end",
                    detail=job.log_tail)


def never_sleeps(seconds):
    raise AssertionError("the baseline waited for a population whose job had already ended")


# ====================================================================== the baseline's wait, through Budget.shape
def test_a_population_job_that_failed_before_its_run_fails_the_baseline(job_queue, tmp_path, monkeypatch):
    pop = population_job(FAILS, population_yaml(tmp_path))
    assert ended(pop) == "failed" and pop.run_id is None
    as_baseline_job(job_queue, monkeypatch)
    budget = B.Budget(cfg_of(tmp_path, f"pair={PAIR}", *BASELINE), Tracker(), None)
    budget.sleep = never_sleeps
    with pytest.raises(B.BudgetError) as err:
        budget.shape({}, 1)
    assert str(err.value) == (
        f"cannot match the compute of the population: it never started and no longer can: job {pop.id} (pop) "
        f"failed (exit code 2) before it created its MLflow run (log: {pop.log_path}; its last line: \"error: no "
        f"model at /no/such/model\"); {AGAIN}")


def test_the_baseline_waits_while_its_population_is_queued_and_fails_once_it_is_stopped(job_queue, tmp_path,
                                                                                         monkeypatch, capsys):
    """Behind a job that holds the one slot, the population is queued (no process of it runs its argv): the
    baseline waits; stopped there (killed while queued), it never starts, and the baseline's next read says so."""
    holder = jobs.start([sys.executable, "-c", HOLD], name="holder", slots=queue.max_parallel())
    wait_for(lambda: holder.status == "running", 60, "the holder to take the slot", detail=holder.log_tail)
    pop = population_job(FAILS, population_yaml(tmp_path))
    wait_for(lambda: pop.status == "queued", 60, "the population to queue", detail=pop.log_tail)
    as_baseline_job(job_queue, monkeypatch)
    budget = B.Budget(cfg_of(tmp_path, f"pair={PAIR}", *BASELINE), Tracker(), None)
    seen = []

    def sleep(seconds):
        seen.append((seconds, pop.status))
        assert len(seen) <= 2, f"the baseline still waits for a population stopped before it started: {seen}"
        if len(seen) == 2:  # it waited on every read while queued; now the population is stopped in the queue
            assert jobs.stop(pop) == "stopped"

    budget.sleep = sleep
    with pytest.raises(B.BudgetError, match=f"it never started and no longer can: job {pop.id} \\(pop\\) was stopped "
                                            "\\(exit code 130\\) before it created its MLflow run \\(log: "):
        budget.shape({}, 1)
    assert seen == [(10.0, "queued"), (10.0, "queued")]
    assert capsys.readouterr().out.count("budget: waiting for the population (not started yet)") == 1


def test_a_running_population_without_a_run_yet_is_waited_for_then_followed(job_queue, tmp_path, monkeypatch):
    """The population's job runs (its model loading, say) with no run yet: the baseline waits; once the run is in
    the store (planted with a ledger and a fresh heartbeat, as a trainer leaves it), it follows that run."""
    pop = population_job(HOLD, population_yaml(tmp_path))
    wait_for(lambda: pop.status == "running", 60, "the population's job to run", detail=pop.log_tail)
    as_baseline_job(job_queue, monkeypatch)
    tracker = Tracker()
    budget = B.Budget(cfg_of(tmp_path, f"pair={PAIR}", *BASELINE), tracker, None)
    seen = []

    def sleep(seconds):
        seen.append(pop.status)
        assert len(seen) == 1, "the baseline still waits: the population's run is in the store"
        run_id = tracker.start_run("pop", "population", tags={
            rl.KIND: rl.POPULATION, rl.PAIR: PAIR, rl.STATUS: rl.RUNNING,
            rl.HEARTBEAT: heartbeat.Beat(time.time(), 20.0, 1, 0.0, "gone-host").text()})
        tracker.log_metrics(run_id, {rl.COMPUTE_PER_ADAPTER["generated_tokens"]: 2500.0,
                                     rl.COMPUTE_PER_ADAPTER["trained_tokens"]: 2500.0}, 1)

    budget.sleep = sleep
    step = budget.shape({}, 1)
    assert seen == ["running"] and step is not None
    assert budget.target.started and budget.target.tokens == 5000.0 and not budget.target.final


def test_a_sweeps_baseline_waits_for_a_population_not_started_yet_then_fails_once_its_job_failed(
        job_queue, tmp_path, monkeypatch, capsys):
    """A sweep's baseline (no pair): its sweep's plan names the population of its seed; before the driver has
    started that population's job the baseline waits; once the job failed before creating its run, it fails."""
    sweep = tmp_path / "sweeps" / "sw-test"
    keys = {"pop": S.run_key("default", 0), "base": S.run_key(S.BASELINE_LABEL, 0)}
    (sweep / "jobs").mkdir(parents=True)
    plan = [{"key": keys["pop"], "config": "default", "seed": 0, "baseline": False},
            {"key": S.run_key("default", 1), "config": "default", "seed": 1, "baseline": False},  # another seed's
            {"key": keys["base"], "config": S.BASELINE_LABEL, "seed": 0, "baseline": True}]
    (sweep / S.PLAN_FILE).write_text(json.dumps(plan))
    base_dir = as_baseline_job(sweep / "jobs", monkeypatch)
    (sweep / S.JOBS_FILE).write_text(json.dumps({keys["base"]: str(base_dir)}))
    budget = B.Budget(cfg_of(tmp_path, "seed=0", *BASELINE), Tracker(), None)
    started = []

    def sleep(seconds):  # the driver starts the population; it fails before creating its run
        assert not started, "the baseline still waits for a population whose job failed before its run"
        pop = jobs.start([sys.executable, "-c", FAILS], name="sw-pop", root=sweep / "jobs", slots=1)
        (sweep / S.JOBS_FILE).write_text(json.dumps({keys["base"]: str(base_dir), keys["pop"]: pop.dir}))
        ended(pop)
        started.append(pop)

    budget.sleep = sleep
    with pytest.raises(B.BudgetError) as err:
        budget.shape({}, 1)
    pop = started[0]
    assert str(err.value) == (
        f"cannot match the compute of the population of seed 0 in sweep sw-test: it never started and no longer "
        f"can: job {pop.id} (sw-pop) failed (exit code 2) before it created its MLflow run (log: {pop.log_path}; "
        f"its last line: \"error: no model at /no/such/model\"); fix what ended it, then run the same sweep again "
        f"(populora sweep with the same arguments, or the same Launch: it starts the failed population and this "
        f"baseline afresh), or give this baseline a number: --set budget.tokens=N")
    assert "budget: waiting for the population (not started yet)" in capsys.readouterr().out


# ====================================================================== what a job record tells
def _record(root: Path, name: str, code: str | None = None, run_id: str | None = None, **fields) -> Path:
    job_dir = root / name
    job_dir.mkdir(parents=True)
    Job(id=name, argv=["x"], dir=str(job_dir), created=1.0, **fields).save()
    if code is not None:
        (job_dir / "exit_code").write_text(code)
    if run_id:
        rl.write_run_id(job_dir, run_id)
    return job_dir


@pytest.mark.parametrize("code, run_id, fields, expected", [
    ("1", None, {}, "failed"),
    ("130", None, {}, "stopped"),
    ("0", None, {}, "finished"),
    ("1", "RUN", {}, None),  # it created its run before failing: the store has it (budget.read_target reads it)
    (None, None, {"pid": 1, "pid_started": 0.0, "host": socket.gethostname()}, "lost"),  # its supervisor is gone
    (None, None, {"pid": 1, "pid_started": 0.0, "host": "another-host"}, None),  # lost only as seen from here
    (None, None, {"pid": 1, "pid_started": 0.0}, None),  # a record from before hosts were kept: cannot tell
    (None, None, {}, None),  # no pid yet: starting
    ("1", None, {"ray_address": "http://head:8265"}, None),  # a Ray Job's state is Ray's
])
def test_a_population_job_has_ended_without_a_run_only_when_its_record_says_so(tmp_path, code, run_id, fields,
                                                                              expected):
    found = ended_without_run(_record(tmp_path, "pop", code, run_id, **fields))
    assert (found[1] if found else None) == expected


def test_no_population_job_known_keeps_the_wait(tmp_path):
    """Outside a job, a pair with no population job next to it (started by hand), only single-agent or other
    pairs' jobs, a dir with no plan (no sweep): nothing to tell, so never an error."""
    cfg = cfg_of(tmp_path, f"pair={PAIR}", *BASELINE)
    assert PopulationJob(cfg, None).never_started() is None
    root = tmp_path / "jobs"
    mine = root / "mine"
    mine.mkdir(parents=True)
    assert PopulationJob(cfg, mine).never_started() is None
    other = _record(root, "other-pair", "1")
    (other / "config.yaml").write_text(population_yaml(tmp_path).replace(PAIR, "otherpair"))
    single = _record(root, "a-baseline", "1")
    (single / "config.yaml").write_text(config_io.dump(cfg))
    assert PopulationJob(cfg, mine).never_started() is None
    assert PopulationJob(cfg_of(tmp_path, *BASELINE), mine).never_started() is None  # no pair, no sweep
    pop = _record(root, "pop", "1")  # now the population: failed, no run
    (pop / "config.yaml").write_text(population_yaml(tmp_path))
    assert PopulationJob(cfg, mine).never_started().startswith("cannot match the compute of the population: it "
                                                                "never started and no longer can: job pop failed")


# ====================================================================== end to end: both as jobs of the launcher
@pytest.mark.slow  # two `populora train` jobs, one after the other: ~30 s on 2 loaded cores
def test_a_baseline_launched_with_a_population_that_fails_before_its_run_ends_failed(job_queue, mlflow_store,
                                                                                   tmp_path):
    """As the Launch page starts them: the population, then its baseline, as `populora train` jobs sharing a pair.
    The population's config asks for in-training evaluation whose benchmark data is missing: refused before any
    MLflow run exists. The baseline then runs (the one slot), finds that its population never started, and ends
    FAILED at once (exit 1) with the line in its log and as its run's error."""
    pop = jobs.launch_training(population_yaml(tmp_path, "eval.every=1"), name="pop",
                               env={"POPULORA_DATA_DIR": str(tmp_path / "no-benchmarks")})
    base = jobs.launch_training(config_io.dump(cfg_of(tmp_path, f"pair={PAIR}", *BASELINE)), name="pop-baseline")
    assert ended(pop) == "failed" and pop.run_id is None and "eval.every=1 needs" in pop.log_tail()
    assert ended(base) == "failed" and base.exit_code == 1, base.log_tail()
    line = (f"error: cannot match the compute of the population: it never started and no longer can: job {pop.id} "
            f"(pop) failed (exit code 2) before it created its MLflow run (log: {pop.log_path}; its last line: "
            f"\"error: eval.every=1 needs")
    assert line in base.log_tail() and "Traceback" not in base.log_tail()
    assert '...\"); fix what ended it, then launch the population' in base.log_tail()  # its long line, shortened
    run = MlflowClient(mlflow_store).get_run(base.run_id)
    assert run.info.status == "FAILED" and run.data.tags[rl.ERROR].startswith(f"BudgetError: {line[7:]}")
    assert AGAIN in run.data.tags[rl.ERROR]
