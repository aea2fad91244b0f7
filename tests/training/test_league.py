"""The league runner against planted truth (scripted backend, the real sandbox verifier): a population and its
baseline at two checkpoints each, the base model as the anchor. The fit recovers the planted student abilities
and teacher strengths in rank, says population vs baseline with an interval, and a league killed mid-way resumes
without answering a finished (student, task) pair again or writing a new panel."""

import json
import os

import numpy as np
import pytest

from league_fixtures import ScriptedBackend, World, training_run

from populora.evaluation.statistics.league_fit import spearman
from populora.evaluation.targets import TargetError
from populora.training import league
from populora.training.league_plan import LeagueSpec, estimate, resolve

# planted truth per (run kind, step, member): student ability, teacher difficulty mean (logits, base model = 0)
ABILITY = {("population", 1, "S0"): 0.6, ("population", 2, "S0"): 1.2, ("population", 1, "S1"): -0.6,
           ("population", 2, "S1"): 0.2, ("population", 1, "S2"): 1.8, ("population", 2, "S2"): 2.4,
           ("baseline", 1, "B0"): -1.2, ("baseline", 2, "B0"): -0.3}
TEACHING = {("population", 1, "T0"): -0.5, ("population", 2, "T0"): 0.5, ("population", 1, "T1"): 1.0,
            ("population", 2, "T1"): 2.0, ("baseline", 1, "B0"): -1.5, ("baseline", 2, "B0"): -1.0}
INVALID = {("population", 2, "T1"): 0.5}  # half of T1's step-2 proposals are not programs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One store for the module (creating an MLflow store takes seconds); each test writes its own out dir."""
    tmp_path = tmp_path_factory.mktemp("league")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from populora.platform.store.tracking import Tracker

    tracker, world = Tracker(), World()
    base = training_run(tracker, world, tmp_path, "baseline", {"B0": "both"})
    pop = training_run(tracker, world, tmp_path, "population", {"T0": "teacher", "T1": "teacher", "S0": "student",
                                                                "S1": "student", "S2": "student"}, baseline=base)
    for kind, rid in (("population", pop), ("baseline", base)):
        run_dir = tmp_path / f"run_{kind}"
        for (k, step, m), v in ABILITY.items():
            if k == kind:
                world.ability[str(run_dir / "checkpoints" / f"step_{step:06d}" / "adapters" / m)] = v
        for (k, step, m), v in TEACHING.items():
            if k == kind:
                d = str(run_dir / "checkpoints" / f"step_{step:06d}" / "adapters" / m)
                world.teacher_mean[d], world.invalid[d] = v, INVALID.get((k, step, m), 0.0)
    yield tracker, world, pop, base, tmp_path
    mp.undo()


def _truth(entrant, table):
    if entrant["id"] == "base":
        return 0.0
    return table[(entrant["arm"], entrant["step"], entrant["member"])]


SPEC = dict(tasks_per_kind=5, proposals_per_round=3, rounds=3, answers=3, seed_tasks=2, n_boot=100, chunk=6)


def test_league_recovers_planted_abilities_and_teacher_strengths(runs):
    tracker, world, pop, base, tmp = runs
    plan = resolve(tracker, LeagueSpec([pop, base], out=str(tmp / "lg"), **SPEC))
    assert [e.id for e in plan.students][:1] == ["base"] and len(plan.students) == 9 and len(plan.teachers) == 7
    est = estimate(plan)
    assert est["panel_tasks"] == 7 * 5 + 2 and est["answers"] == 9 * 37 * 3
    backend = ScriptedBackend(world)
    data = league.play(plan, tracker, backend)

    panel = json.loads((tmp / "lg" / "panel.json").read_text())
    per_teacher = {t["id"]: t["tasks"] for t in data["teachers"]}
    assert set(per_teacher.values()) == {5}, per_teacher  # the same number of valid tasks per teacher and kind
    assert len(panel["tasks"]) == 37 and sum(t["teacher"] == "seed" for t in panel["tasks"]) == 2
    assert all(len(set(c for a, c in backend.student_rows if a == ad)) == 37 for ad in {a for a, _ in backend.student_rows})
    assert len(backend.student_rows) == 9 * 37 * 3

    abilities = [s["ability"]["value"] for s in data["students"]]
    assert spearman(abilities, [_truth(s, ABILITY) for s in data["students"]]) >= 0.9
    assert data["students"][0]["ability"]["value"] == 0.0  # the anchor
    for s in data["students"]:
        lo, hi = s["ability"]["ci95"]
        if s is data["students"][0]:  # the anchor is the scale's zero: no interval (issue 67: never a zero-width one)
            assert (lo, hi) == (None, None)
            continue
        assert lo < s["ability"]["value"] < hi
    strengths = [t["strength"]["value"] for t in data["teachers"]]
    assert spearman(strengths, [_truth(t, TEACHING) for t in data["teachers"]]) >= 0.9
    t1 = next(t for t in data["teachers"] if t["member"] == "T1" and t["step"] == 2)
    others = [t["validity_rate"] for t in data["teachers"] if t is not t1]
    assert t1["validity_rate"] < 0.8 and min(others) == 1.0  # its invalid half shows, beside its strength

    students = {c["population_step"]: c for c in data["comparisons"] if c["side"] == "students"}
    teachers = {c["population_step"]: c for c in data["comparisons"] if c["side"] == "teachers"}
    assert set(students) == {1, 2}
    assert students[2]["ci95"][0] > 0 and "population's students solve more" in students[2]["words"]  # +1.6 planted
    assert teachers[2]["ci95"][0] > 0 and "harder tasks" in teachers[2]["words"]                      # +2.25 planted

    run = tracker.get_run(data["mlflow_run"])
    assert run.data.tags["populora.league_runs"] == f"{pop},{base}"
    assert tracker.load_json(data["mlflow_run"], "league/league.json")["comparisons"] == data["comparisons"]
    assert any(k.startswith("league/ability/") for k in run.data.metrics)


def test_a_killed_league_resumes_without_redoing_finished_pairs(runs):
    tracker, world, pop, base, tmp = runs
    tmp = tmp / "killed"
    spec = LeagueSpec([pop, base], steps=[2], out=str(tmp / "lg"), **{**SPEC, "tasks_per_kind": 3, "rounds": 2})
    first = ScriptedBackend(world, fail_after=3)  # the panel's rounds, then a kill during the answers
    with pytest.raises(KeyboardInterrupt):
        league.play(resolve(tracker, spec), None, first)
    done_before = league.done_pairs(tmp / "lg")
    assert done_before, "some chunks were answered before the kill"
    panel_before = (tmp / "lg" / "panel.json").read_text()
    with open(tmp / "lg" / "answers.jsonl", "a") as f:  # a line cut by the kill
        f.write('{"student": "base", "task"')

    second = ScriptedBackend(world)
    data = league.play(resolve(tracker, spec), None, second)
    assert second.teacher_rows == 0 and (tmp / "lg" / "panel.json").read_text() == panel_before
    redone = {(a, c) for a, c in second.student_rows} & {(a, c) for a, c in first.student_rows}
    assert not redone, f"pairs answered twice: {sorted(redone)[:5]}"
    done = league.done_pairs(tmp / "lg")
    panel = json.loads(panel_before)
    students = [s["id"] for s in data["students"]]
    assert set(done) == {(s, t["id"]) for s in students for t in panel["tasks"]}
    assert all(len(v) == spec.answers for v in done.values())


def test_bad_league_input_names_what_is_valid(runs):
    tracker, world, pop, base, tmp = runs
    with pytest.raises(TargetError, match="no checkpoint at step"):
        resolve(tracker, LeagueSpec([pop], steps=[7]))
    with pytest.raises(TargetError, match="alive at none"):
        resolve(tracker, LeagueSpec([pop], members=["S9"]))
    with pytest.raises(TargetError, match="no MLflow run"):
        resolve(tracker, LeagueSpec(["0123456789abcdef"]))
