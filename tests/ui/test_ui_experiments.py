"""Forks, diffs and notes on the Runs and Lineage pages (AppTest, no training): a parent run with a checkpoint on
disk and a fork of it at step 1 with one changed setting, written to a fresh store as the trainer writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from populora.platform import config as config_io  # noqa: E402
from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker  # noqa: E402
from populora.training import TrainConfig  # noqa: E402

VIEWS = Path(__file__).resolve().parents[2] / "populora" / "ui" / "views"
EVENTS = [{"child": m, "parents": [], "operator": "init", "step": 0, "generation": 0, "role": role, "replaced": "",
           "details": {}} for m, role in (("T0", "teacher"), ("T1", "teacher"), ("S0", "student"), ("S1", "student"))]
CHILD = {"child": "S2", "parents": ["S1"], "operator": "gaussian", "step": 1, "generation": 1, "role": "student",
         "replaced": "S0", "details": {"strength": 0.02, "mu_at_birth": 26.0}}


def _run(tracker: Tracker, cfg: TrainConfig, run_dir: Path, tags: dict, lineage: dict, dead=("S0",)) -> str:
    run_id = tracker.start_run("populora", cfg.name, tags={rl.KIND: rl.POPULATION, rl.STATUS: rl.FINISHED,
                                                          rl.RUN_DIR: str(run_dir), rl.PROGRESS: f"2/{cfg.steps}", **tags})
    tracker.log_params(run_id, config_io.flatten(cfg))
    tracker.log_json(run_id, lineage, rl.LINEAGE)
    members = [{"id": e["child"], "role": e["role"], "mu": 25.0, "sigma": 8.3, "alive": e["child"] not in dead}
               for e in lineage["events"]]
    tracker.log_json(run_id, {"members": members, "next_index": {}}, rl.POPULATION_FILE)
    tracker.log_metrics(run_id, {"evolution/gaussian/children": 1.0, "evolution/gaussian/seconds": 0.5}, 1)  # no KL, unjudged
    tracker.end_run(run_id, "FINISHED")
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store for the module (a fresh sqlite store costs seconds to create); only the notes test writes to
    it, a tag no other test reads."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _store(tmp_path_factory.mktemp("experiments"), monkeypatch)


def _store(tmp_path: Path, monkeypatch) -> dict:
    import streamlit as st

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    tracker = Tracker(uri)
    parent_cfg = TrainConfig(name="parent", steps=2)
    parent_dir = tmp_path / "runs" / "parent"
    ckpt = parent_dir / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    (ckpt / "state.json").write_text(json.dumps({"population": {"members": [  # the checkpoint's ratings: what a resize ranks
        {"id": i, "role": r, "rank": 8, "mu": mu, "sigma": 2.0, "alive": i != "S0"}
        for i, r, mu in (("T0", "teacher", 26.0), ("T1", "teacher", 22.0), ("S0", "student", 20.0),
                         ("S1", "student", 24.0), ("S2", "student", 27.0))], "next_index": {"T": 2, "S": 3}}}))
    (ckpt / "config.yaml").write_text(config_io.dump(parent_cfg))
    lineage = {"events": EVENTS + [CHILD]}
    parent = _run(tracker, parent_cfg, parent_dir, {}, lineage)
    fork_cfg = TrainConfig(name="parent", steps=2, optim={"lr": 3e-5})
    fork = _run(tracker, fork_cfg, tmp_path / "runs" / "fork",
                {rl.FORKED_FROM: parent, rl.FORK_STEP: "1", rl.NOTE: f"forked from run {parent} at step 1"},
                lineage | {"forks": [{"run": parent, "step": 1}], "removed": [  # resized at the fork: teachers 2 -> 1
                    {"member": "T1", "role": "teacher", "operator": "shrink_weakest", "step": 1, "mu": 25.0, "sigma": 8.3}]},
                dead=("S0", "T1"))
    return {"uri": uri, "parent": parent, "fork": fork}


def _page(name: str, session: dict | None = None, **query) -> AppTest:
    import streamlit as st

    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / f"{name}.py"), default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    for k, v in (session or {}).items():
        at.session_state[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _texts(at: AppTest) -> str:
    return "\n".join(str(e.value) for kind in ("info", "error", "caption", "markdown", "success", "warning")
                     for e in getattr(at, kind))


def _table(at: AppTest, column: str):
    return next(t.value for t in at.table if column in t.value.columns)


def test_fork_form_refuses_a_frozen_setting_with_the_reason_and_shows_the_one_changed_setting(store):
    at = _page("runs", run=store["parent"], fork="1")
    area = next(a for a in at.text_area if a.label.startswith("settings to change"))
    area.set_value("model.lora_rank=16").run()
    errors = [e.value for e in at.error]
    assert any("model.lora_rank: 8 -> 16 refused" in e and "rank" in e for e in errors), errors
    area = next(a for a in at.text_area if a.label.startswith("settings to change"))
    area.set_value("optim.lr=3e-5").run()
    table = _table(at, "the fork")
    assert list(table.index) == ["optim.lr"] and table.loc["optim.lr"].tolist() == ["5e-05", "3e-05"]
    assert any(b.label == "Fork from here" for b in at.button)


def test_fork_form_says_which_members_a_resize_removes_and_adds(store):
    """A fork that changes the population's sizes: before it runs, the form names the weakest teacher it removes
    and the student it adds with the parent it is made from, from the checkpoint's ratings."""
    at = _page("runs", run=store["parent"], fork="1")
    area = next(a for a in at.text_area if a.label.startswith("settings to change"))
    area.set_value("population.teachers=1\npopulation.students=3").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    said = "\n".join(str(e.value) for e in at.info)
    assert "The fork resizes the population" in said, said
    assert "teachers 2 -> 1: removes T1 (the weakest by mu - 0*sigma: 22.00)" in said, said
    assert "students 2 -> 3: adds S3, a mutation child of S2 (the strongest first" in said, said
    area = next(a for a in at.text_area if a.label.startswith("settings to change"))
    area.set_value("population.students=3\npopulation.grow=init").run()
    said = "\n".join(str(e.value) for e in at.info)
    assert "students 2 -> 3: adds S3, a fresh adapter (as at step 0)" in said and "teachers" not in said, said


def test_fork_form_names_the_fork_and_previews_ids_from_the_familys_numbering(store):
    """The fork's run name says it is one (editable); the ids a grow adds go on from the family's numbering: the
    parent gave out S3 and S4 after the checkpoint (its tag populora.next_ids), so the fork's new student is S5,
    not the checkpoint's next S3 (issue 54)."""
    from mlflow import MlflowClient

    from populora.platform.store import family

    name = next(t for t in _page("runs", run=store["parent"], fork="1").text_input if t.label == "the fork's run name")
    assert name.value == f"parent · fork of {store['parent'][:8]} @1"
    client = MlflowClient(store["uri"])
    client.set_tag(store["parent"], family.NEXT_IDS, family.encode({"T": 2, "S": 5}))
    try:
        at = _page("runs", run=store["parent"], fork="1")
        area = next(a for a in at.text_area if a.label.startswith("settings to change"))
        area.set_value("population.students=3").run()
        said = "\n".join(str(e.value) for e in at.info)
        assert "students 2 -> 3: adds S5, a mutation child of S2" in said, said
    finally:
        client.delete_tag(store["parent"], family.NEXT_IDS)


def test_a_fork_names_its_parent_and_its_diff_shows_only_the_changed_setting(store):
    at = _page("runs", run=store["fork"])
    assert f"Forked from run `{store['parent']}` at its checkpoint of step 1" in _texts(at)
    table = _table(at, f"this run ({store['fork'][:8]})")  # the diff opens on the parent by itself
    assert list(table.index) == ["optim.lr"] and table.loc["optim.lr"].tolist() == ["3e-05", "5e-05"]
    assert any(a.label.startswith("notes") and a.value.startswith("forked from run") for a in at.text_area)


def test_notes_are_saved_as_the_mlflow_run_description(store):
    from mlflow import MlflowClient

    at = _page("runs", run=store["parent"])
    next(a for a in at.text_area if a.label.startswith("notes")).set_value("lr sweep of Tuesday").run()
    next(b for b in at.button if b.label == "Save notes").click().run()
    assert MlflowClient(store["uri"]).get_run(store["parent"]).data.tags[rl.NOTE] == "lr sweep of Tuesday"


def test_lineage_boxes_the_members_born_in_the_parent_run_and_offers_a_fork(store):
    at = _page("lineage", run=store["fork"])
    dot = at.get("graphviz_chart")[0].proto.spec
    box = next(line for line in dot.splitlines() if line.startswith('subgraph "cluster_fork0"'))
    assert f"run {store['parent'][:8]}, up to its step 1: forked here" in box
    assert all(f'"{m}";' in box for m in ("T0", "T1", "S0", "S1", "S2"))  # born at or before step 1: the parent's
    ranked = " ".join(line for line in dot.splitlines() if line.startswith("{ rank=same"))
    assert '"T0"' not in ranked  # a boxed node also in a rank=same group: Graphviz would drop the box
    operators = next(d.value for d in at.dataframe if "operator" in d.value.columns)
    assert operators.iloc[0].tolist() == ["gaussian", "1", "–", "–", "–", "–", "0.500"]  # "–", never "None"
    at = _page("lineage", run=store["parent"])
    assert "cluster_fork" not in at.get("graphviz_chart")[0].proto.spec
    assert "Fork from here (a checkpoint of step 1)" in _texts(at)  # a link to Runs' fork form (a caption in AppTest)


def test_lineage_says_a_member_removed_by_a_fork_s_resize_was_removed_not_replaced(store):
    at = _page("lineage", run=store["fork"], member="T1")
    assert next(m.value for m in at.metric if m.label == "status") == "removed"
    assert "**removed** at step 1 by the fork's resize (**shrink_weakest**" in _texts(at)
    node = next(line for line in at.get("graphviz_chart")[0].proto.spec.splitlines() if line.startswith('"T1" ['))
    assert "dashed" in node and 'tooltip="teacher, generation 0, removed at the fork at step 1 (shrink_weakest)' in node, node
    at = _page("lineage", run=store["fork"], member="S0")  # replaced by evolution, as before
    assert next(m.value for m in at.metric if m.label == "status") == "replaced"


def test_the_chosen_run_is_kept_when_a_page_is_opened_from_the_sidebar(store):
    """The walk's finding: from one run's Tasks page, Lineage (a sidebar link, no ?run=) opened another run."""
    at = _page("lineage", session={"populora_chosen_run": store["parent"]})
    assert at.selectbox(key="pick_run").value == store["parent"]  # not the newest run, the one chosen before
    at = _page("lineage")
    assert at.selectbox(key="pick_run").value == store["fork"]  # nothing chosen yet: the newest


def test_diff_of_two_members_prints_only_their_differing_facts(store, capsys):
    """``populora diff RUN/M /M``: the members' own facts (operator, strength, parents, birth step), the run's
    settings being the same."""
    from populora.cli import main

    assert main(["diff", f"{store['fork']}/S2", "/S1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.strip().splitlines()[1:]]
    assert rows == [["member.born_step", "1", "0"], ["member.generation", "1", "0"], ["member.operator", "gaussian", "init"],
                    ["member.parents", "S1", "-"], ["member.strength", "0.02", "None"]], rows
    assert main(["diff", store["fork"], "/S1"]) == 2  # a run against a member: refused
    assert "not a run with a member" in capsys.readouterr().err


def test_fork_form_shows_no_error_before_any_input_and_the_reason_on_submit(tmp_path, monkeypatch):
    """Issue 67: the form drew a red error on its first render (its default name is an override, and a fork
    from a finished run's last checkpoint must raise ``steps``). Before input: a hint, no error; on a click: the
    reason. Its own store: the parent keeps a checkpoint of its last step too."""
    own = _store(tmp_path, monkeypatch)
    last = tmp_path / "runs" / "parent" / "checkpoints" / "step_000002"
    last.mkdir()
    for name in ("state.json", "config.yaml"):
        (last / name).write_text((last.parent / "step_000001" / name).read_text())
    at = _page("runs", run=own["parent"], fork="2")
    assert next(s for s in at.selectbox if s.label == "checkpoint step").value == 2
    assert not at.error, [e.value for e in at.error]
    assert "it is checked when you press Fork from here" in _texts(at)
    next(b for b in at.button if b.label == "Fork from here").click().run()
    assert any("steps" in e.value for e in at.error), [e.value for e in at.error]


def test_fork_form_of_a_run_still_training_says_its_trainer_holds_it(tmp_path, monkeypatch):
    """One writer per run: the form of a run whose trainer is alive here says so, and what a fork that waits in
    the queue risks (the trainer's prune); a run nobody writes says nothing of it."""
    import subprocess
    import sys
    import time

    import psutil

    from populora.platform.jobs import heartbeat

    own = _store(tmp_path, monkeypatch)
    assert "is still training" not in _texts(_page("runs", run=own["parent"], fork="1"))
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        beat = heartbeat.Beat(time.time(), 20.0, trainer.pid, psutil.Process(trainer.pid).create_time(),
                              heartbeat.this_process()[2])
        Tracker(own["uri"]).set_tags(own["parent"], {rl.STATUS: rl.RUNNING, rl.HEARTBEAT: beat.text()})
        said = _texts(_page("runs", run=own["parent"], fork="1"))
    finally:
        trainer.kill()
        trainer.wait()
    assert f"This run is still training: its trainer (pid {trainer.pid} on {beat.host}) is alive" in said, said
