"""Sweeps: the plan (grid x seeds + baselines), the job queue's concurrency, and the whole path on the tiny model
through the real CLI: sweep --wait, resume (nothing re-run), eval --sweep, report --sweep --json."""

import json
import re
import sys
import time
from pathlib import Path

import pytest

from conftest import cli_in_process, wait_for
from populora.cli import main
from populora.evaluation.compute import per_adapter
from populora.platform.jobs import jobs, queue
from populora.platform.store import runlayout as rl
from populora.training.run import sweep

SMOKE = str(Path(__file__).parents[2] / "configs/smoke.yaml")
MIXES = ["--grid", "population.teachers,population.students=1:1,2:2"]
# smoke.yaml matches each student with 2 teachers: a 1-teacher mix needs 1 (the config refuses more than it has)
TINY = ["--set", "steps=1", "--set", "evolution.every=0", "--set", "matchmaking.teachers_per_student=1", "--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
        "--set", "tasks.max_new_tokens_propose=16", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=1", "--set", "tasks.rollouts=1", "--set", "tasks.references=0",
        "--set", "optim.log_kl=false", "--set", "tasks.seed_rounds=0"]  # the seed programs: seeding is not a sweep's concern
# the end-to-end sweep's two mixes: as small as a population gets (2 and 3 members), so fewer adapters to evaluate
SMALL_MIXES = ["--grid", "population.teachers,population.students=1:1,1:2"]


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_grid_times_seeds_plus_one_baseline_per_seed():
    runs = sweep.plan(SMOKE, ["population.teachers,population.students=1:1,2:2", "optim.lr=0.0001,0.0002"], 2, True,
                      ["evolution.every=0", "matchmaking.teachers_per_student=1"])
    assert len(runs) == 2 * (4 + 1)
    assert [r.seed for r in runs if r.baseline] == [0, 1]
    assert {tuple(sorted(r.overrides.items())) for r in runs if not r.baseline} == {
        (("optim.lr", lr), ("population.students", n), ("population.teachers", n)) for lr in (0.0001, 0.0002) for n in (1, 2)}
    assert len({r.key for r in runs}) == len(runs)
    base = next(r for r in runs if r.baseline and r.seed == 1)
    assert "single_agent: true" in base.yaml and "seed: 1" in base.yaml and "every: 0" in base.yaml
    assert sweep.sweep_id(runs) == sweep.sweep_id(sweep.plan(SMOKE, ["population.teachers,population.students=1:1,2:2",
                                                                       "optim.lr=0.0001,0.0002"], 2, True, ["evolution.every=0", "matchmaking.teachers_per_student=1"]))
    assert sweep.sweep_id(runs) != sweep.sweep_id(runs[:-1])


def test_dry_run_json_and_bad_grid(mlflow_store, capsys):
    code = cli_in_process("sweep", "--config", SMOKE, *MIXES, "--seeds", "2", "--baseline", "--dry-run", "--json",
                          "--set", "matchmaking.teachers_per_student=1")
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    planned = _last_json(out.out)
    assert len(planned["runs"]) == 6 and planned["sweep"].startswith("sw-")
    assert {(json.dumps(r["overrides"], sort_keys=True), r["seed"]) for r in planned["runs"]} == {
        (json.dumps(o, sort_keys=True), s) for s in (0, 1)
        for o in ({}, {"population.teachers": 1, "population.students": 1}, {"population.teachers": 2, "population.students": 2})}
    assert not Path(".populora").exists()  # a dry run starts nothing
    # the smallest effect these 2 seeds per arm detect, before launch (evaluation/statistics/power.py): printed and in the JSON
    assert planned["mde"]["seeds"] == 2 and planned["mde"]["level"] == "method" and 0 < planned["mde"]["overall"] < 1
    assert "power: 2 seeds per arm detect >= " in out.out
    # the same figure as power.planned gives the Launch form, and no figure above the 0-100 scale (#52)
    from populora.evaluation.statistics import power
    assert planned["mde"]["words"] == power.planned(2)["words"] and f"power: {planned['mde']['words']}" in out.out
    assert not re.search(r"\b\d{3,}\.\d\b", out.out.split("power: ")[1])
    code = cli_in_process("sweep", "--config", SMOKE, "--grid", "population.teacher=1,2", "--dry-run")
    assert code == 2 and "population.teacher" in capsys.readouterr().err


def test_queue_runs_at_most_k_at_a_time_and_reports_failures(tmp_path):
    def starter(code: str):
        return lambda: jobs.start([sys.executable, "-c", code], root=tmp_path)

    items = [sweep.Item(f"ok{i}", starter("import time; time.sleep(0.6)")) for i in range(4)]
    items.append(sweep.Item("bad", starter("raise SystemExit(3)")))
    peak, started = [0], []

    def on_started(item):
        started.append(item.key)
        peak[0] = max(peak[0], sum(i.job is not None and i.job.status in queue.ACTIVE for i in items))

    t0 = time.time()
    sweep.run_items(items, parallel=2, on_started=on_started, poll_s=0.1)
    assert peak[0] <= 2 and started == [i.key for i in items]
    assert {i.key: i.status for i in items} == {"ok0": "finished", "ok1": "finished", "ok2": "finished",
                                                "ok3": "finished", "bad": "failed"}
    assert time.time() - t0 >= 1.2  # 4 x 0.6 s two at a time: the cap held
    with pytest.raises(ValueError):
        sweep.run_items([], parallel=0)


@pytest.mark.slow
@pytest.mark.paper
def test_sweep_of_two_mixes_two_seeds_with_baselines_end_to_end(mlflow_store, tmp_path, monkeypatch, capsys):
    """The whole path, kept cheap (each run is one 1-step training process, mostly imports; two at a time; one
    benchmark, one problem): 3 configurations (2 mixes + the baseline) x 2 seeds, 2 comparisons per mix. The
    sweep's runs are jobs (processes, as a user's are); the sweep's driver, its resume, the figures, the evaluation
    and the report run in this process through ``populora.cli.main`` (the same commands, without ~10 s of imports
    each: nothing checked here depends on their process boundary).

    In `make test-paper`, not `make test` (~110 s of CPU, six training processes): make test has its parts, the grid
    and its baselines (above), the queue and a killed run's resume (below), a two-seed sweep's figures, pages and
    report on a synthetic store (test_paper_figures, test_ui_sweeps, test_sweep_report), a linked and matched
    baseline run for real (test_baseline_rule, test_compute_budget)."""
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "2")  # the machine's queue (1 slot on a CPU) lets two run
    from mlflow import MlflowClient

    from populora.evaluation.harness import benchmarks as B

    args = ["sweep", "--config", SMOKE, *SMALL_MIXES, "--seeds", "2", "--baseline", "--parallel", "2", *TINY]
    capsys.readouterr()
    code = main([*args, "--wait", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.out[-3000:] + out.err[-3000:]
    sid = _last_json(out.out)["sweep"]
    client = MlflowClient(mlflow_store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], f"tags.`{rl.SWEEP}` = '{sid}'")
    runs = [r for r in runs if rl.PARENT not in r.data.tags]
    assert len(runs) == 6 and all(r.info.status == "FINISHED" for r in runs)
    baselines = {r.data.tags[rl.SWEEP_SEED]: r.info.run_id for r in runs if r.data.tags[rl.KIND] == rl.BASELINE}
    assert len(baselines) == 2
    for r in runs:
        if r.data.tags[rl.KIND] == rl.POPULATION:  # linked to the baseline of its own seed
            assert r.data.tags[rl.BASELINE_RUN] == baselines[r.data.tags[rl.SWEEP_SEED]]
        # the driver found the run through its job: the job the trainer linked the run to holds its id
        assert rl.read_run_id(Path(".populora/sweeps", sid, "jobs", r.data.tags[rl.JOB_ID])) == r.info.run_id
    # each seed's baseline trained to its seed's population ledger (the larger of the two mixes': budget.population)
    ledger = {r.info.run_id: per_adapter(r.data.metrics)["tokens"] for r in runs}
    for seed, base in baselines.items():
        target = max(ledger[r.info.run_id] for r in runs
                     if r.data.tags[rl.SWEEP_SEED] == seed and r.data.tags[rl.KIND] == rl.POPULATION)
        with capsys.disabled():  # for the record (pytest -s): the tiny model's rows are coarse next to its target
            print(f"\nseed {seed}: baseline {ledger[base]:.0f} vs population {target:.0f} tokens per adapter "
                  f"({ledger[base] / target:.3f}x)")
        assert client.get_run(base).data.tags[rl.BUDGET].startswith("budget"), client.get_run(base).data.tags

    capsys.readouterr()
    assert main([*args, "--wait"]) == 0
    again = capsys.readouterr().out
    assert "6 finished earlier, 0 to run" in again, again[-2000:]
    # the paper's figure set of the real sweep: every arm found through the sweep's tags, the baseline last
    assert main(["figures", "--sweep", sid, "--out", str(tmp_path / "figs"), "--formats", "png"]) == 0, capsys.readouterr().err[-3000:]
    figures = json.loads((tmp_path / "figs" / "figures.json").read_text())
    assert list(figures["arms"])[-1] == "baseline" and len(figures["arms"]) == 3
    assert all(len(seeds) == 2 for seeds in figures["arms"].values())
    assert (tmp_path / "figs" / "validity.png").stat().st_size > 1000

    if not (B.data_dir() / B.CHECKSUMS).is_file():
        pytest.skip("no benchmark data: the evaluation half needs it")
    capsys.readouterr()
    code = cli_in_process("eval", "--sweep", sid, "--benchmarks", "gsm8k", "--limit", "1", "--max-new-tokens", "4")
    assert code == 0, capsys.readouterr().err[-3000:]
    capsys.readouterr()
    code = main(["report", "--sweep", sid, "--json", "--out", str(tmp_path / "rep")])
    rep = capsys.readouterr()
    assert code == 0, rep.err[-3000:]
    data = _last_json(rep.out)
    assert len(data["configs"]) == 3
    for c in data["configs"]:
        assert c["seeds"] == [0, 1]
        lo, hi = c["overall"]["ci95"]
        assert lo <= c["overall"]["mean"] <= hi
    assert {json.dumps(c["config"], sort_keys=True) for c in data["configs"]} == {
        '{"population.single_agent": true}', '{"population.students": 1, "population.teachers": 1}',
        '{"population.students": 2, "population.teachers": 1}'}
    names = [c["name"] for c in data["comparisons"]]
    assert len(names) == 4 and sum("population mean vs baseline" in n for n in names) == 2
    assert sum("weakest member vs baseline" in n for n in names) == 2
    for c in data["comparisons"]:
        assert c["ci95"][0] <= c["delta"] <= c["ci95"][1] and 0 <= c["p_value"] <= 1
    assert (tmp_path / "rep" / "intervals.png").stat().st_size > 1000
    assert (tmp_path / "rep" / "arms_race.png").stat().st_size > 1000
    assert sum(line.startswith("compute, seed ") for line in data["compute"]) == 4  # 2 mixes x 2 seeds


def test_a_killed_sweep_run_resumes_through_the_machine_s_queue(mlflow_store, tmp_path, monkeypatch):
    """Re-running a sweep resumes its KILLED run as every local job starts: in the machine's one queue, holding
    its slot need, knowing its run from the start (here it waits behind a job holding the only slot)."""
    from mlflow import MlflowClient

    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "1")
    monkeypatch.setenv("POPULORA_QUEUE_DIR", str(tmp_path / "queue"))
    runs = sweep.plan(SMOKE, [], 1, False, ["matchmaking.teachers_per_student=1"])
    sid = sweep.sweep_id(runs)
    client = MlflowClient(mlflow_store)  # this test's store: an earlier test in the process may have set mlflow's global URI
    killed = client.create_run(client.create_experiment("sweep-test"), tags=rl.sweep_tags(sid, runs[0].key, runs[0].config, 0))
    client.set_terminated(killed.info.run_id, "KILLED")
    holder = jobs.start([sys.executable, "-c", "import time; time.sleep(600)"], root=tmp_path / "held", slots=1)
    try:
        # the holder must hold the slot before the resume is queued: while its process starts it is itself queued,
        # first in line, and the resume second (the failure CI saw under load)
        wait_for(lambda: holder.status == "running", 120, "the holder to take the only slot", interval=0.1,
                 detail=lambda: f" (status {holder.status})")
        item, = sweep.Driver(sid, runs, log=lambda line: None).items()
        resumed = item.start()
        assert resumed.argv[-3:] == ["--resume", killed.info.run_id, "--quiet"]
        assert resumed.run_id == killed.info.run_id  # linked before it runs: the UI shows this job on the run's page
        deadline = time.time() + 120  # a bound for a loaded machine: returns at the event
        while resumed.status not in ("queued", "running", "finished", "failed") and time.time() < deadline:
            time.sleep(0.1)
        assert resumed.status == "queued" and queue.position(resumed) == 1
        assert jobs.stop(resumed) == "stopped"
    finally:
        jobs.stop(holder)
