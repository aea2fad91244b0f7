"""Forks end to end on a tiny random model, through the real CLI: a finished run forked at step 1 with a changed
learning rate, killed with -9 mid-run and resumed (no step lost or logged twice), then forked again (a fork of a
fork); refused settings, ``populora diff`` and the ancestry record on the same runs."""

import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import yaml
from conftest import paused_train_cmd, train_in_process, wait_for_marker

from populora.cli import main
from populora.platform.config import ConfigError
from populora.training.config import TrainConfig
from populora.training.run.fork import checkpoint_config, checkpoint_population, fork_config, resize_preview, role_sizes
from populora.training.evolve.operators import FAMILY
from populora.platform.store import ancestry, family
from populora.platform.store import runlayout as rl

ROOT = Path(__file__).parents[2]
TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
        "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=2", "--set", "tasks.rollouts=2"]


def _client(uri):
    from mlflow import MlflowClient
    return MlflowClient(tracking_uri=uri)


def _children(client, run_id):
    return rl.member_runs(client, run_id)


def _sentinels(client, run_id):
    return sorted(m.step for m in client.get_metric_history(run_id, rl.STEP_SENTINEL))


def _lineage(run_id):
    return rl.read_json(os.environ["MLFLOW_TRACKING_URI"], run_id, rl.LINEAGE)


def _parent_ids(client) -> set[str]:
    exp = client.get_experiment_by_name("populora")
    return {r.info.run_id for r in client.search_runs([exp.experiment_id], filter_string=rl.PARENT_RUNS)}


def _new_run(client, known: set[str]) -> str:
    (new,) = _parent_ids(client) - known
    return new


def _models(client) -> dict[tuple[str, str, int], object]:
    """Every member checkpoint's LoggedModel of the store, by (training run, member, step)."""
    exps = [e.experiment_id for e in client.search_experiments()]
    return {(m.tags[rl.REGISTRY_RUN], m.tags[rl.REGISTRY_MEMBER], int(m.tags[rl.MODEL_STEP])): m
            for m in client.search_logged_models(exps, max_results=1000)}


def _expected_models(lineage: dict, last: int, first: int = 0) -> dict:
    """(member, step) -> (origin, [(parent member, parent step)]) as the lineage says, for a run checkpointed at
    every step from ``first`` + 1 to ``last`` (a fork at ``first``): every member has a model at each checkpoint
    it was alive at and one at its death; its first is its birth's (init: no parents; a child: its parents' models
    of its birth step), each later one stands on its previous one (a fork's first ones: on the parent run's)."""
    events = lineage["events"]
    died = {e["replaced"]: e["step"] for e in events if e["replaced"]}
    out = {}
    for e in events:
        member, born = e["child"], e["step"]
        for s in range(max(born, first + 1, 1), min(died.get(member, last), last) + 1):
            if s == max(born, 1) and born >= first:  # its first model anywhere
                out[(member, s)] = (e["operator"] if e["parents"] else "init", [(p, born) for p in e["parents"]])
            else:
                out[(member, s)] = ("died" if died.get(member) == s else "trained", [(member, s - 1)])
    return out


def _check_models(models: dict, run: str, expected: dict, earlier_run: str = "", first: int = 0) -> None:
    """The run's LoggedModels are exactly the expected ones, named, typed, READY, with those origins and parents
    (a parent of step <= ``first`` is ``earlier_run``'s model)."""
    mine = {(m, s): v for (r, m, s), v in models.items() if r == run}
    assert set(mine) == set(expected), (sorted(mine), sorted(expected))
    for (member, step), (origin, parents) in expected.items():
        model = mine[(member, step)]
        assert (model.name, str(model.status), model.model_type) == (f"{member}-step{step}", "READY", rl.MODEL_TYPE)
        assert model.tags[rl.MODEL_ORIGIN] == origin, (member, step, model.tags[rl.MODEL_ORIGIN], origin)
        want = [models[(earlier_run if s <= first else run, p, s)].model_id for p, s in parents]
        assert model.tags[rl.MODEL_PARENTS] == (",".join(want) or "-"), (member, step)
        assert (Path(model.tags[rl.MODEL_ADAPTER]) / "adapter_config.json").is_file(), (member, step)


def test_fork_kill_9_resume_fork_of_fork_diff_and_ancestry(mlflow_store, tmp_path, capsys, monkeypatch):
    """The kill -9 and the resume are processes (the subject); the parent, the fork of the fork and the sweep's
    driver run in this process through ``populora.cli.main`` (nothing asserted of them needs a process boundary;
    each saves ~10 s of imports), the sweep's jobs are processes as ever."""
    # the parent: 2 steps, evolution every step, so its members at step 1 already include a child (with ancestry);
    # from the hand-written seed programs (seeding is not what forks are about)
    assert train_in_process("--config", str(ROOT / "configs/smoke.yaml"), "--set", "steps=2", "--set", "evolution.every=1",
                             "--set", "tasks.seed_rounds=0", *TINY, "--quiet") == 0, capsys.readouterr().err[-3000:]
    capsys.readouterr()
    client = _client(mlflow_store)
    parent = _new_run(client, set())
    parent_dir = Path(client.get_run(parent).data.tags[rl.RUN_DIR])
    at_1 = json.loads((parent_dir / "checkpoints/step_000001/state.json").read_text())
    alive_at_1 = {m["id"] for m in at_1["population"]["members"] if m["alive"]}
    dead_at_1 = {m["id"] for m in at_1["population"]["members"] if not m["alive"]}
    assert dead_at_1 and any(e["parents"] for e in at_1["lineage"]["events"])  # evolution happened by step 1

    # each member's checkpoints are MLflow 3 LoggedModels (and a replaced member's weights at its death), each an
    # output of the member's run, its parents the models its weights came from (as the lineage says); the member's
    # metrics of that step are the model's too
    models = _models(client)
    _check_models(models, parent, _expected_models(_lineage(parent), 2))
    members_of_parent = {c.data.tags[rl.MEMBER_ID]: c for c in _children(client, parent)}
    for (_, member, step), model in models.items():
        member_run = members_of_parent[member].info.run_id
        assert model.source_run_id == member_run
        mu = [m.value for m in client.get_metric_history(member_run, "rating/mu") if m.step == step]
        assert [(m.value, m.step) for m in model.metrics if m.key == "rating/mu"] == [(mu[0], step)], (member, step)
        assert model.model_id in {o.model_id for o in client.get_run(member_run).outputs.model_outputs}
    newest = {m: max(s for (_, mm, s) in models if mm == m) for (_, m, _) in models}
    assert {m: c.data.tags[rl.MODEL_ID] for m, c in members_of_parent.items()} == {
        m: models[(parent, m, s)].model_id for m, s in newest.items()}

    # a setting the checkpoint was built with is refused, with the reason, before any run exists
    assert train_in_process("--fork", parent, "--step", "1", "--set", "model.lora_rank=8") == 2
    err = capsys.readouterr().err
    assert "model.lora_rank: 4 -> 8 refused" in err and "rank" in err
    assert train_in_process("--fork", parent, "--step", "7", "--set", "optim.lr=3e-5") == 2
    assert "no checkpoint of step 7" in capsys.readouterr().err
    assert _parent_ids(client) == {parent}  # nothing half-created

    # the fork at step 1 with a new learning rate, killed with -9 once its step-2 checkpoint (its last) is on disk,
    # before that step reached MLflow: the resume must log step 2 once
    marker = tmp_path / "fork_after_checkpoint_2"
    proc = subprocess.Popen(paused_train_cmd(marker, 2, "--fork", parent, "--step", "1", "--set", "optim.lr=3e-5",
                                             "--quiet", after="save_checkpoint"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_marker(marker, proc)
    except BaseException:
        proc.kill()
        raise
    fork = _new_run(client, {parent})
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert client.get_run(fork).info.status == "RUNNING"  # killed, never closed
    code = train_in_process("--resume", fork, "--quiet")  # the killed fork is the process under test; the resume reads it
    assert code == 0, capsys.readouterr().err[-3000:]

    run = client.get_run(fork)
    assert run.info.status == "FINISHED" and run.data.tags[rl.STATUS] == rl.FINISHED
    assert run.data.tags[rl.FORKED_FROM] == parent and run.data.tags[rl.FORK_STEP] == "1"
    assert run.data.tags[rl.NOTE] == f"forked from run {parent} at step 1; changed: optim.lr 5e-05 -> 3e-05"
    assert run.data.params["optim.lr"] == "3e-05" and client.get_run(parent).data.params["optim.lr"] == "5e-05"
    # its run name says it is a fork (issue 54): the parent's name, of which run, at which step
    assert run.info.run_name == f"smoke · fork of {parent[:8]} @1" and client.get_run(parent).info.run_name == "smoke"
    assert _sentinels(client, fork) == [2]  # the fork's own step: not lost, not twice, none of the parent's
    lineage = _lineage(fork)
    assert lineage["forks"] == [{"run": parent, "step": 1}]
    # its lineage continues the parent's: the parent's events up to step 1 first, then the fork's own (details
    # grow as the fork goes on: a child's rating change is settled when it dies)
    def births(events):
        return [(e["child"], e["parents"], e["operator"], e["step"], e["replaced"], e["details"].get("strength")) for e in events]

    assert births(lineage["events"][:len(at_1["lineage"]["events"])]) == births(at_1["lineage"]["events"])
    assert all(e["step"] > 1 for e in lineage["events"][len(at_1["lineage"]["events"]):])
    # the fork's step-2 children and the parent's (both evolved at step 2, from the same counters of step 1) have
    # different ids: the fork went on from the family's numbering (platform.family), not from its checkpoint's
    parent_events = {e["child"]: e for e in _lineage(parent)["events"]}
    own = [e for e in lineage["events"] if e["step"] == 2]
    assert own and not {e["child"] for e in own} & set(parent_events), (own, sorted(parent_events))
    members = {c.data.tags[rl.MEMBER_ID]: c for c in _children(client, fork)}
    assert max(Counter(c.data.tags[rl.MEMBER_ID] for c in _children(client, fork)).values()) == 1
    assert alive_at_1 <= set(members) and not dead_at_1 & set(members)  # the parent's replaced ones never lived here
    assert {c.info.status for c in members.values()} == {"FINISHED"}
    for member_id, c in members.items():
        mu_steps = [m.step for m in client.get_metric_history(c.info.run_id, "rating/mu")]
        assert len(mu_steps) == len(set(mu_steps)) and min(mu_steps) >= 2, (member_id, mu_steps)

    # the fork's models go on from the parent run's models at step 1 (none of its own for step 1); the kill -9
    # after its step-2 checkpoint made them once
    _check_models(_models(client), fork, _expected_models(lineage, 2, first=1), parent, 1)

    assert main(["runs", fork]) == 0
    assert f"forked from run {parent} at step 1" in capsys.readouterr().out

    # diff: only the changed setting, and the fork's name
    assert main(["diff", parent, fork]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 3 and printed[2].split() == ["optim.lr", "5e-05", "3e-05"], printed
    assert printed[1].split() == ["name", "smoke", "smoke", "·", "fork", "of", parent[:8], "@1"], printed

    # a fork of the fork, at its step 2, one step further, resized: teachers 2 -> 1 (the weakest by evolution's
    # rule removed), students 2 -> 3 (a mutation child of the strongest student)
    # what the fork form says the resize will do, from the checkpoint, before the fork runs (checked below)
    fork_dir, changes = Path(client.get_run(fork).data.tags[rl.RUN_DIR]), ["steps=3", "population.teachers=1",
                                                                           "population.students=3", "matchmaking.teachers_per_student=1"]
    cfg_2 = fork_config(checkpoint_config(fork_dir, 2), changes, 2)
    at_fork = checkpoint_population(fork_dir, 2)
    at_fork.reserve(family.floor_of(client, mlflow_store, fork, include_self=True))  # as the fork form does
    preview = resize_preview(at_fork, role_sizes(checkpoint_config(fork_dir, 2)),
                             role_sizes(cfg_2), cfg_2.evolution.conservative_k, cfg_2.population.grow)
    assert train_in_process("--fork", fork, "--step", "2", *[a for c in changes for a in ("--set", c)],
                             "--quiet") == 0, capsys.readouterr().err[-3000:]
    fork2 = _new_run(client, {parent, fork})
    assert client.get_run(fork2).info.status == "FINISHED" and _sentinels(client, fork2) == [3]
    lineage2 = _lineage(fork2)
    assert lineage2["forks"] == [{"run": parent, "step": 1}, {"run": fork, "step": 2}]
    at_2 = json.loads((Path(client.get_run(fork).data.tags[rl.RUN_DIR]) / "checkpoints/step_000002/state.json").read_text())
    k = float(client.get_run(fork).data.params["evolution.conservative_k"])
    alive_2 = [m for m in at_2["population"]["members"] if m["alive"]]
    strength = {m["id"]: m["mu"] - k * m["sigma"] for m in alive_2}
    # strongest first, ties in member order (a random model's students often tie): the rule evolution ranks by
    teachers = sorted((m["id"] for m in alive_2 if m["role"] == "teacher"), key=lambda i: -strength[i])
    students = sorted((m["id"] for m in alive_2 if m["role"] == "student"), key=lambda i: -strength[i])
    assert [(r["member"], r["operator"], r["step"]) for r in lineage2["removed"]] == [(teachers[-1], "shrink_weakest", 2)]
    (grown,) = [e for e in lineage2["events"] if e["details"].get("resize") == "grow"]
    assert (grown["role"], grown["parents"], grown["step"]) == ("student", [students[0]], 2)
    assert FAMILY[grown["operator"]].kind == "mutation"
    assert len(preview) == 2 and preview[0].startswith(f"teachers 2 -> 1: removes {teachers[-1]} ("), preview
    assert preview[1].startswith(f"students 2 -> 3: adds {grown['child']}, a mutation child of {students[0]} ("), preview
    members2 = {c.data.tags[rl.MEMBER_ID] for c in _children(client, fork2)}
    born_3 = {e["child"] for e in lineage2["events"] if e["step"] == 3}  # fork2's own evolution (every step)
    assert members2 == {teachers[0], *students, grown["child"]} | born_3  # the removed teacher never lived in fork2
    tags2 = client.get_run(fork2).data.tags
    assert tags2[rl.FORK_RESIZE] == (f"resized: teachers 2 -> 1 ({teachers[-1]} removed: shrink_weakest), students 2 -> 3 "
                                     f"({grown['child']} = {grown['operator']} of {students[0]})")
    assert tags2[rl.NOTE].endswith(tags2[rl.FORK_RESIZE]) and "population.students 2 -> 3" in tags2[rl.NOTE]
    # the grown member's first model stands on its parent's model of step 2 (the fork's)
    models = _models(client)
    assert models[(fork2, grown["child"], 2)].tags[rl.MODEL_PARENTS] == models[(fork, students[0], 2)].model_id
    assert models[(fork2, grown["child"], 2)].tags[rl.MODEL_ORIGIN] == grown["operator"]
    assert not any(r == fork2 and m == teachers[-1] for r, m, _ in models)

    # the grown student's id is no member's of the family before it, and it was born in fork2 (at its fork step):
    # the ancestry record, diff and the lineage say so, not the run whose checkpoint step 2 is
    earlier = {e["child"] for r in (parent, fork) for e in _lineage(r)["events"]}
    assert grown["child"] not in earlier and grown["run"] == fork2, (grown, sorted(earlier))
    capsys.readouterr()
    assert main(["runs", fork2, "--ancestry", grown["child"], "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert [(a["member"], a["run"]) for a in record["ancestors"][:2]] == [
        (grown["child"], fork2), (students[0], ancestry.born_in(students[0], lineage2, fork2))]
    assert main(["diff", f"{fork2}/{grown['child']}", f"{fork}/{students[0]}", "--json"]) == 0
    rows = {r["setting"]: (r["a"], r["b"]) for r in json.loads(capsys.readouterr().out)}
    assert rows["member.born_in"] == (fork2, ancestry.born_in(students[0], lineage, fork)), rows
    assert client.get_run(fork2).info.run_name == f"smoke · fork of {fork[:8]} @2"

    # the ancestry record of a member born in the parent before the first fork, read from the fork of the fork
    child = next(e for e in at_1["lineage"]["events"] if e["parents"])
    path = tmp_path / "ancestry.yaml"
    assert main(["runs", fork2, "--ancestry", child["child"], "--out", str(path)]) == 0
    record = yaml.safe_load(path.read_text())
    assert [r["run"] for r in record["runs"]] == [parent, fork, fork2]
    assert [r["settings"]["optim.lr"] for r in record["runs"]] == ["5e-05", "3e-05", "3e-05"]
    me = record["ancestors"][0]
    assert (me["member"], me["run"], me["operator"], me["born_step"], me["parents"]) == (
        child["child"], parent, child["operator"], 1, child["parents"])
    assert me["strength"] == child["details"]["strength"] and me["rating_at_birth"]["mu"] == child["details"]["mu_at_birth"]
    assert {a["member"] for a in record["ancestors"][1:]} == set(child["parents"])
    assert all(a["operator"] == "init" and a["rating_at_birth"]["mu"] == 25.0 for a in record["ancestors"][1:])


    # a sweep over forks of the parent's step 1: the plan (a dry run: a frozen grid value refused, nothing started)
    assert main(["sweep", "--fork", parent, "--step", "1", "--grid", "model.lora_rank=8", "--dry-run"]) == 2
    assert "model.lora_rank: 4 -> 8 refused" in capsys.readouterr().err
    assert main(["sweep", "--fork", parent, "--step", "1", "--grid", "optim.lr=1e-5,2e-5", "--seeds", "2", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(r["key"], r["fork"], r["fork_step"]) for r in plan["runs"]] == [
        (f"optim.lr={lr}|seed={seed}", parent, 1) for seed in (0, 1) for lr in ("1e-5", "2e-5")]
    assert not Path(".populora/sweeps").exists()  # a dry run starts nothing (the parent's terminal train queued under .populora/jobs)
    # ... and one real: two forks (one step each, two at a time), grouped by the sweep's tags, then resumed
    argv = ["sweep", "--fork", parent, "--step", "1", "--grid", "optim.lr=1e-5,2e-5", "--parallel", "2", "--wait", "--json"]
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "2")  # the machine's queue (1 slot on a CPU) lets two run
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.out[-3000:] + out.err[-3000:]
    sid = json.loads(out.out.strip().splitlines()[-1])["sweep"]
    swept = [client.get_run(r) for r in _parent_ids(client) - {parent, fork, fork2}]
    assert len(swept) == 2 and all(r.info.status == "FINISHED" and _sentinels(client, r.info.run_id) == [2] for r in swept)
    assert sorted((r.data.tags[rl.SWEEP], r.data.tags[rl.SWEEP_CONFIG], r.data.tags[rl.FORKED_FROM], r.data.tags[rl.FORK_STEP],
                   r.data.params["optim.lr"]) for r in swept) == [
        (sid, "optim.lr=1e-5", parent, "1", "1e-05"), (sid, "optim.lr=2e-5", parent, "1", "2e-05")]
    assert main(argv) == 0  # resumed: nothing to run
    again = capsys.readouterr().out
    assert "2 finished earlier, 0 to run" in again, again[-2000:]

def test_a_resize_that_cannot_be_is_refused_with_the_reason():
    """Pure: no run. A role emptied, a single-agent baseline resized, a fork with no step left to train (its advice
    in the form both the CLI's --set and the UI's fork form take)."""
    population = TrainConfig(steps=4)
    for bad, words in ((["population.students=0"], "keeps at least one; set population.students between 1 and 2"),
                       (["steps=2"], "steps=2: a fork at step 2 trains steps 3 onwards; set steps above 2, e.g. steps=4 "
                                     "(--set on the command line)")):
        try:
            fork_config(population, bad, 2)
        except ConfigError as err:
            assert words in str(err), str(err)
        else:
            raise AssertionError(f"{bad} was not refused")
    baseline = TrainConfig(steps=4, population={"single_agent": True})
    try:
        fork_config(baseline, ["population.teachers=3"], 2)
    except ConfigError as err:
        assert "single-agent baseline" in str(err) and "cannot be resized" in str(err), str(err)
    else:
        raise AssertionError("a baseline's resize was not refused")
    assert fork_config(population, ["population.students=3"], 2).population.students == 3  # a resize is allowed
