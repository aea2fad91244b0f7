"""A league end to end on the tiny random model: a population run and its baseline (2 steps, so 2 checkpoints
each), ``populora league --runs P,B --wait`` queued as a job, its results in MLflow and as JSON; the League page
shows them (AppTest, and in headless Chromium with a screenshot)."""

from __future__ import annotations

import json
import os
import sys
import time
import types
from pathlib import Path

import pytest
from conftest import cli_in_dir, trained_runs
from headless import NEEDS_CHROMIUM, chromium, ui_server
from headless import open_page, page_text, wait_on_page
from streamlit.testing.v1 import AppTest

from populora.platform.store import runlayout as rl

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4", "--set", "tasks.max_new_tokens_propose=24",
        "--set", "tasks.max_new_tokens_solve=8", "--set", "steps=2", "--set", "evolution.every=0", "--quiet"]
LEAGUE = ["--tasks-per-kind", "1", "--proposals-per-round", "1", "--rounds", "1", "--seed-tasks", "2", "--answers", "2",
          "--boot", "60"]


@pytest.fixture(scope="module")
def league(tmp_path_factory) -> dict:
    """Two tiny runs, then ``populora league`` on them through the job queue (``--wait``), once for the module."""
    tmp = tmp_path_factory.mktemp("league_e2e")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    # ``populora train --baseline`` (the population, then its compute-matched baseline, linked) and ``populora league
    # --wait`` in this process: the league's job, a process of its own, is under test, not the commands' processes
    population, baseline = trained_runs(tmp, uri, "--config", str(ROOT / "configs/smoke.yaml"), "--baseline", *TINY)
    code, stdout, stderr = cli_in_dir(tmp, {"MLFLOW_TRACKING_URI": uri, "POPULORA_JOBS_DIR": str(tmp / "jobs")},
                                      "league", "--runs", f"{population},{baseline}", *LEAGUE, "--wait")
    out = types.SimpleNamespace(returncode=code, stdout=stdout, stderr=stderr)
    return {"uri": uri, "population": population, "baseline": baseline, "out": out, "dir": tmp}


def test_league_command_queues_a_job_and_logs_abilities_difficulties_and_the_verdict(league):
    out = league["out"]
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    lines = out.stdout.splitlines()
    estimate = next(i for i, line in enumerate(lines) if "generated tokens" in line)
    queued = next(i for i, line in enumerate(lines) if line.startswith("queued as job"))
    assert estimate < queued  # the cost is said before the job starts
    # 2 checkpoints x (2 teachers + 2 students) + 2 x the baseline's adapter + the base model
    assert "11 entrants (7 teachers, 7 students)" in lines[estimate]
    assert "population's students vs the baseline at step 2" in out.stdout and "95% CI" in out.stdout

    from populora.platform.store.tracking import Tracker

    os.environ["MLFLOW_TRACKING_URI"] = league["uri"]
    try:
        tracker = Tracker()
        found = rl.league_runs(tracker.client)
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI")
    assert len(found) == 1 and found[0]["runs"] == f"{league['population']},{league['baseline']}"
    run = tracker.get_run(found[0]["run_id"])
    data = json.loads(Path(run.data.tags[rl.LEAGUE_DIR], "league.json").read_text())
    assert data == tracker.load_json(found[0]["run_id"], rl.LEAGUE_RESULTS)
    assert {s["step"] for s in data["students"] if s["arm"] != "base"} == {1, 2}
    # every interval holds its value with a positive width (issue 67: a CPU league read +0.00 [+0.00, +0.00]); the
    # base model, the scale's zero, has none
    assert all(s["ability"]["ci95"][0] < s["ability"]["ci95"][1] and s["ability"]["ci95"][0] <= s["ability"]["value"]
               <= s["ability"]["ci95"][1] for s in data["students"] if s["id"] != data["anchor"])
    assert "+0.00 to +0.00" not in out.stdout
    assert data["tasks"] and all(t["difficulty"]["value"] is not None for t in data["tasks"])
    assert {c["side"] for c in data["comparisons"]} >= {"students"}
    assert f"league/ability/{data['students'][1]['id']}" in run.data.metrics
    done = [json.loads(line) for line in Path(run.data.tags[rl.LEAGUE_DIR], "answers.jsonl").read_text().splitlines()]
    assert len(done) == len(data["students"]) * data["panel_size"] and all(len(d["correct"]) == 2 for d in done)


def test_league_page_shows_tables_heatmap_and_the_verdict(league, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", league["uri"])
    import streamlit as st

    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "populora" / "ui" / "views" / "league.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    said = "\n".join(str(e.value) for kind in ("info", "success") for e in getattr(at, kind))
    assert "population's students vs the baseline at step 2" in said
    frames = [d.value for d in at.dataframe]
    assert "ability" in frames[0].columns and len(frames[0]) == 7
    # teachers without a valid panel task have no strength: listed under the table, not as "None" cells in it (a
    # tiny random league: often every teacher, and the table is left out)
    missing = next((c.value for c in at.caption if c.value.startswith("No valid task on the panel")), "")
    teachers = [f for f in frames if "strength" in f.columns]
    assert sum(len(f) for f in teachers) + missing.count(" (valid ") == 7
    assert all(not f.empty and not f["strength"].isna().any() and "validity rate" in f.columns for f in teachers)
    # shown as the text says them: logits signed, rates in %, TrueSkill two decimals (the frames keep full values)
    shown = [{c: cfg.get("type_config", {}).get("format") for c, cfg in json.loads(d.proto.columns).items()} for d in at.dataframe]
    assert shown[0]["ability"] == "%+.2f" and shown[0]["solve rate"] == "percent", shown[0]
    assert not frames[0]["95% CI"].str.contains(r"\+0\.00 to \+0\.00").any(), frames[0]["95% CI"]
    # TrueSkill as text: two decimals, "–" for the base model and the single-agent baseline (never rated)
    mu = frames[0].set_index("arm")["TrueSkill mu (in its run)"]
    # (a population member still at the prior, never in a rated game, is "–" too: league_plan.rated)
    assert set(mu.loc[["base", "baseline"]]) == {"–"} and all(v == "–" or len(v.split(".")[1]) == 2 for v in mu.loc["population"]), mu
    for formats in (f for f in shown if "strength" in f):
        assert formats["validity rate"] == formats["solved by the league"] == "percent" and formats["ci low"] == "%+.2f", formats
    assert {"Students: ability", "Teachers: strength and validity", "Teacher × student solve rate"} <= {s.value for s in at.subheader}


def test_league_page_on_a_store_without_a_league_says_how_to_play_one(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'empty.db'}")
    import streamlit as st

    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "populora" / "ui" / "views" / "league.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert "populora league --runs" in at.info[0].value


@NEEDS_CHROMIUM
@pytest.mark.timeout(300)
def test_league_page_in_the_browser(league, tmp_path):
    pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    shots = Path(os.environ.get("POPULORA_SCREENSHOTS") or tmp_path)
    from selenium.webdriver.common.by import By

    with ui_server(tmp_path, league["uri"]) as served, chromium(window="1400,2200") as driver:
        open_page(driver, f"{served['url']}/league", "Teacher × student solve rate", shots)

        def drawn() -> bool:  # the tables and charts draw after the script ends (canvas / svg)
            grids = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stDataFrame"] canvas')
            charts = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg')
            # the abilities' table at least: the teachers' is left out where no teacher has a valid panel task
            return len(grids) >= 1 and len(charts) >= 2

        wait_on_page(driver, drawn, 60, "the League page's tables and charts (curves, heat map)")
        time.sleep(1)
        driver.save_screenshot(str(shots / "league.png"))
        text = page_text(driver)
        assert "population's students vs the baseline at step 2" in text
        assert "Students: ability" in text and "Teachers: strength and validity" in text
        assert "students' mean ability over checkpoints" in text or "mean ability" in text


# ====================================================================== a league's states (platform/jobs/state.py)
def test_league_states_are_the_state_modules_on_the_page_in_jobs_and_in_league_wait(one_slot_queue, capsys):
    """A league said "killed" (MLflow's word) on its page and its job's raw status elsewhere; its run, its job on the
    League page, in ``populora jobs`` and ``populora league --wait`` now say the state module's words."""
    from mlflow import MlflowClient
    from conftest import HOLD, app_page, cli_in_process, wait_for

    from populora.cli import league as league_cli
    from populora.platform.jobs import jobs, state
    from populora.platform.jobs.job_record import STOP_FILE
    from populora.ui import league_view

    client = MlflowClient(one_slot_queue["uri"])
    run = client.create_run(client.create_experiment("leagues"), tags={rl.LEAGUE: "lg-stopped", rl.LEAGUE_RUNS: "a,b"})
    client.set_terminated(run.info.run_id, "KILLED")  # a league stopped before its fit was logged
    job = jobs.start([sys.executable, "-c", HOLD], name="league lg-1", kind="league")
    try:
        wait_for(lambda: job.status == "running", 60, "the league job to run")
        Path(job.dir, STOP_FILE).touch()  # what Stop writes first (jobs.stop_soon); the job has not ended yet
        assert state.of_job(job) == state.STOPPING
        at = app_page("league")
        shown = list(at.selectbox[0].options)  # AppTest holds the options as the page formats them
        assert any(o.endswith(f"{state.icon(state.STOPPED)} stopped") for o in shown), shown
        assert not any("killed" in o for o in shown), shown
        said = [i.value for i in at.info]
        assert any("**league lg-1** · stopping" in v for v in said), said
        assert league_view.job_line(job)[0].split(" · ")[1] == state.STOPPING
        capsys.readouterr()
        assert cli_in_process("jobs") == 0
        listed = capsys.readouterr().out
        assert any(line.split()[-5:-2] == ["league", "stopping", job.id] for line in listed.splitlines()), listed
        jobs.stop(job, timeout_s=30)
        assert league_cli._wait(job, one_slot_queue["dir"], poll_s=0.05) == job.exit_code
        words = [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines() if line.startswith("league job ")]
        assert words == [state.STOPPED] == [state.of_job(job)], words
    finally:
        jobs.stop(job, timeout_s=10)
