"""`populora runs RUN_ID`: every member of a run with its status, origin and ratings, and the checks a reader
makes first (member runs left RUNNING, peak ratings, evolution's children), read from a store the trainer's own
writers made (tests/synthetic_store.py)."""

from __future__ import annotations

import json

import synthetic_store

from populora import cli
from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker


def test_runs_run_id_shows_every_member_and_the_summary(tmp_path, monkeypatch, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tracker = Tracker(uri)
    rid = synthetic_store.make_run(tracker, "detail", members=4, steps=8, tasks_per_step=4)
    # an operator whose name and parents are longer than the origin column used to be (22): shown whole
    child = next(c for c in rl.member_runs(tracker.client, rid) if c.data.tags.get(rl.PARENTS, "-") != "-")
    tracker.set_tags(child.info.run_id, {rl.OPERATOR: "component_swap", rl.PARENTS: "S10,S11"})
    children = rl.member_runs(tracker.client, rid)
    assert cli.main(["runs", rid]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for child in children:
        member = child.data.tags[rl.MEMBER_ID]
        (line,) = [l for l in lines if l.startswith(member + " ")]
        assert child.info.status in line and child.data.tags[rl.ROLE] in line
        parents = child.data.tags.get(rl.PARENTS, "-")
        origin = child.data.tags[rl.OPERATOR] + ("" if parents == "-" else f" of {parents.replace(',', '+')}")
        assert f" {origin} " in line, (origin, line)
    peaks = {c.data.tags[rl.MEMBER_ID]: max(m.value for m in tracker.client.get_metric_history(c.info.run_id, "rating/mu"))
             for c in children if c.data.tags[rl.ROLE] == "teacher"}
    best = max(peaks, key=peaks.get)
    assert f"peak teacher rating: mu {peaks[best]:.2f} ({best}, step" in out
    assert "member runs still RUNNING: none" in out
    n_parents = [len(c.data.tags[rl.PARENTS].split(",")) for c in children if c.data.tags.get(rl.PARENTS, "-") != "-"]
    assert f"children: {sum(n >= 2 for n in n_parents)} crossover, {sum(n == 1 for n in n_parents)} mutation" in out


def test_an_unknown_run_id_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert cli.main(["runs", "no-such-run"]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err


def test_a_stopped_runs_header_says_the_step_its_trainer_finished_and_the_checkpoint(tmp_path, monkeypatch, capsys):
    """Issue 67: the progress tag moves at a checkpoint only (4/6) while the trainer's log said step 5/6: the header
    says both, from the trainer's progress record, as the Runs page does."""
    import json

    from populora.platform import progress

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tracker = Tracker(uri)
    rid = synthetic_store.make_run(tracker, "stopped", members=2, steps=6, tasks_per_step=4, status=rl.STOPPED)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / progress.FILE).write_text(json.dumps({"step": 5, "steps": 6, "phase": "next"}))
    tracker.set_tags(rid, {rl.RUN_DIR: str(run_dir), rl.PROGRESS: "4/6"})
    assert cli.main(["runs", rid]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "stopped after step 5/6; its last checkpoint is step 4, so Resume goes on from there (step 5 again)" in head, head


def test_runs_json_is_one_document_for_the_list_a_run_and_an_ancestry(tmp_path, monkeypatch, capsys):
    """`--json` asks `populora runs` for JSON as every other command's flag does: the runs listed, a run's members,
    a member's ancestry record (`--format json`, its older spelling, gives the same record)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tracker = Tracker(uri)
    rid = synthetic_store.make_run(tracker, "detail", members=4, steps=3, tasks_per_step=2)
    assert cli.main(["runs", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [rid]
    assert cli.main(["runs", rid, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    members = sorted(c.data.tags[rl.MEMBER_ID] for c in rl.member_runs(tracker.client, rid))
    assert listed["run_id"] == rid and sorted(m["member"] for m in listed["members"]) == members
    assert cli.main(["runs", rid, "--ancestry", members[0], "--json"]) == 0
    record = capsys.readouterr().out
    assert cli.main(["runs", rid, "--ancestry", members[0], "--format", "json"]) == 0
    assert capsys.readouterr().out == record and json.loads(record)["ancestors"]
