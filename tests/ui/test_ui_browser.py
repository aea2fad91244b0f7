"""End to end in headless Chromium: serve the app, launch a tiny run from the Launch page, watch it appear and
progress on the Runs page, open its arms race, lineage and tasks pages, fork it at step 1 with a changed learning
rate (the fork finishes, Lineage draws the fork point, the diff shows the one changed setting), evaluate it from
Compare, and save screenshots. (Stop in a browser: the walk's, tests/ui/test_ui_run_walk.py, on Runs; Launch's in
tests/ui/test_ui_run_state.py.)

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``scripts/install-browser.sh``) and ``selenium``;
skips with the reason when they are missing. Screenshots go to a tmp dir and the latest set is copied to
``docs/screenshots/`` for the README."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from headless import (LIMIT, NAME, NEEDS_CHROMIUM, PICKER, ROOT, chromium, drawn_form, fill_eval_form,
                      fill_fork_form, press, ui_server)
from headless import open_page as _open
from headless import page_text as _text
from headless import wait_on_page as _wait_for

# steps=2 shadows the form's steps (4, from the smoke preset): the page must warn that the override wins
# checkpoint.keep=2: every step's checkpoint stays on disk, so the run can be forked at step 1 (and the fork trains
# step 2 only: the least a fork can train)
TINY = ("model.tiny_random=true\nsteps=2\nevolution.every=1\ntasks.tasks_per_teacher=2\n"
        "tasks.max_new_tokens_propose=24\ntasks.max_new_tokens_solve=8\ncheckpoint.keep=2")

# in make test-paper, not make test (~155 s of CPU): its parts are the other browser flows' too (docs/ui.md)
pytestmark = [NEEDS_CHROMIUM, pytest.mark.timeout(600), pytest.mark.paper]
webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")


@pytest.fixture()
def server(tmp_path):
    """The app served by ``populora ui`` on an empty store in a fresh working dir."""
    with ui_server(tmp_path) as served:
        yield served


@pytest.fixture()
def browser():
    with chromium(window="1400,1500", page_load_timeout=60) as driver:
        yield driver


def _launch(driver, url: str, shots: Path, name_text: str = "browser-e2e", overrides: str = TINY) -> None:
    from selenium.webdriver.common.by import By

    _open(driver, f"{url}/launch", "Launch a run", shots)
    from selenium.webdriver.common.keys import Keys

    # the title draws before the form: on a busy machine the form's inputs come seconds later
    form = _wait_for(driver, lambda: drawn_form(driver, "Show plan", fields=(NAME, "textarea")), 60, "the launch form")
    name = form.find_element(By.CSS_SELECTOR, NAME)
    name.send_keys(Keys.CONTROL, "a")  # clear() does not reach Streamlit's React state
    name.send_keys(Keys.BACKSPACE, name_text)
    form.find_element(By.TAG_NAME, "textarea").send_keys(overrides)
    press(driver, "Launch")
    # a bound for a loaded machine (the click's rerun writes the config and starts the job), as the baseline flow's
    _wait_for(driver, lambda: "Started job(s)" in _text(driver), 60, "the launch confirmation")


def _away(browser) -> None:
    """A blank page while a job ends and nothing is read from the app: a page left open redraws its live part
    every 3-5 s while a job runs (a server rerun and a browser redraw each time)."""
    browser.get("about:blank")


def _fork_a_run(browser, server, run_id: str, shots: Path) -> None:
    """Issue 42's flow: Runs' "Fork from a checkpoint" at step 1 with optim.lr=3e-5 (the diff shown before the
    job starts), the fork job finishes, its Lineage boxes the parent's members with the fork point, and its Runs
    page shows the diff against its parent: the one changed setting."""
    from mlflow import MlflowClient
    from selenium.webdriver.common.by import By

    from populora.platform.jobs import jobs
    from populora.platform.store import runlayout as rl

    url = server["url"]
    fill_fork_form(browser, url, run_id, 1, "optim.lr=3e-5", shots)
    _wait_for(browser, lambda: "the fork" in _text(browser) and "3e-05" in _text(browser), 60, "the fork's diff")
    press(browser, "Fork from here")
    job = _wait_for(browser, lambda: next((j for j in jobs.list_jobs(server["dir"] / "jobs") if "fork" in j.name and j.name.endswith("@1")), None),
                    30, "the fork job on disk")
    _away(browser)
    _wait_for(browser, lambda: job.status in ("finished", "failed", "lost"), 300, "the fork to end")
    assert job.status == "finished", job.log_tail()
    fork = job.run_id
    tags = MlflowClient(f"sqlite:///{server['dir'] / 'mlflow.db'}").get_run(fork).data.tags
    assert tags[rl.FORKED_FROM] == run_id and tags[rl.FORK_STEP] == "1" and tags[rl.PROGRESS] == "2/2"
    _open(browser, f"{url}/lineage?run={fork}", "Forked from run", shots, "fork_lineage")
    fork_point = f"run {run_id[:8]}, up to its step 1: forked here"
    _wait_for(browser, lambda: fork_point in [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg text")], 30,
              "the lineage graph's fork point")  # the graph is drawn after the script ends
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg text")]
    assert fork_point in labels, labels
    assert {"T0", "T1", "S0", "S1"} <= set(labels)  # the parent's initial members, in the fork's lineage
    _open(browser, f"{url}/?run={fork}", "2 setting(s) differ", shots)
    diff = browser.find_element(By.XPATH, "//*[contains(text(), '2 setting(s) differ')]")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", diff)
    time.sleep(1)
    browser.save_screenshot(str(shots / "fork_diff.png"))
    table = browser.find_element(By.XPATH, "//*[contains(text(), '2 setting(s) differ')]/following::table[1]")
    rows = [r.text.split() for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    # the changed learning rate, and the fork's name, which says it is one ("NAME · fork of RUN @1")
    assert ["optim.lr", "3e-05", "5e-05"] in rows and len(rows) == 2, rows
    assert any(r[0] == "name" and f"fork of {run_id[:8]} @1" in " ".join(r) for r in rows), rows


def _evaluate_from_compare(browser, server, run_id: str, shots: Path) -> None:
    """The Compare page of the finished run has no scores: its form launches an evaluation (gsm8k, 1 item, at most
    8 new tokens: the tiny random model never stops early, and the quick protocol's 512 tokens took ~20 s of CPU
    per target), the job's progress per (target, benchmark) shows while it runs, and its scores appear in the table
    once it ends."""
    import json

    from populora.platform.jobs import jobs
    from populora.platform.store import runlayout

    url = server["url"]
    _open(browser, f"{url}/compare?run={run_id}", "Training scores", shots)
    assert "No benchmark scores for this run yet" in _text(browser)
    form = _wait_for(browser, lambda: drawn_form(browser, "Launch evaluation", fields=(PICKER, LIMIT)), 60, "the evaluation form")
    fill_eval_form(browser, form, ["gsm8k"], limit=1, max_new_tokens=8)
    press(browser, "Launch evaluation", within=form)
    job = _wait_for(browser, lambda: next((j for j in jobs.list_jobs(server["dir"] / "jobs") if j.kind == "eval"), None),
                    30, "the evaluation job on disk")
    config = (Path(job.dir) / "config.yaml").read_text()
    assert "benchmarks: gsm8k" in config and "limit: 1" in config and "max_new_tokens: 8" in config, config
    _wait_for(browser, lambda: job.name in _text(browser), 30, "the evaluation job on the Compare page")
    _wait_for(browser, lambda: "pairs scored" in _text(browser) or job.status == "finished", 240, "the job's progress")
    time.sleep(2)
    browser.save_screenshot(str(shots / "compare_eval_launch.png"))
    _away(browser)
    _wait_for(browser, lambda: job.status in ("finished", "failed"), 400, "the evaluation to end")
    assert job.status == "finished", job.log_tail()
    results = json.loads((Path((Path(job.dir) / runlayout.EVAL_OUT_FILE).read_text()) / "results.json").read_text())
    _open(browser, f"{url}/compare?run={run_id}", "Benchmark scores", shots, "compare_eval_scores")
    text = _text(browser)
    assert "No benchmark scores" not in text and "GSM8K" in text
    assert set(results["results"]) >= {"base model"} and all("gsm8k" in per for per in results["results"].values())


def test_launch_watch_and_browse_a_run(server, browser, tmp_path):
    from populora.platform.jobs import jobs

    url, shots = server["url"], tmp_path / "screenshots"
    shots.mkdir()
    _launch(browser, url, shots)
    assert "the override steps=2 replaces the form's value 4" in _text(browser), "a shadowed field is warned"
    job = _wait_for(browser, lambda: next(iter(jobs.list_jobs(server["dir"] / "jobs")), None), 10, "the job on disk")
    run_id = _wait_for(browser, lambda: job.run_id or (job.status == "failed" and pytest.fail(job.log_tail())), 120, "the run id in the job log")
    _wait_for(browser, lambda: f"run {run_id[:12]}" in _text(browser), 30, "the run in the jobs panel")
    assert "browser-e2e" in _text(browser), "the typed run name reached the job"
    browser.save_screenshot(str(shots / "launch.png"))

    # the run's progress on the Runs page, loaded once while the run trains: its live part redraws every 5 s by
    # itself (no reload), and the tiny model's 2 steps can both end between two redraws, so any step counts
    _open(browser, f"{url}/?run={run_id}", "Details of run", shots)
    _wait_for(browser, lambda: re.search(r"\b[12]/2\b", _text(browser)), 240, "the run's progress (n/2) on the Runs page")
    browser.save_screenshot(str(shots / "runs_training.png"))
    _away(browser)
    _wait_for(browser, lambda: job.status in ("finished", "failed"), 240, "the run to end")
    assert job.status == "finished", job.log_tail()
    _open(browser, f"{url}/runs?run={run_id}", "2/2", shots, "runs")  # /runs: a bookmarked address of the Runs page
    assert "finished" in _text(browser) and "Page not found" not in _text(browser)
    assert browser.current_url.rstrip("/").endswith(f"?run={run_id}")  # sent to the default page, query kept
    _open(browser, f"{url}/arms_race?run={run_id}", "Per member", shots, "arms_race")
    _open(browser, f"{url}/lineage?run={run_id}", "Member T0", shots, "lineage")
    _open(browser, f"{url}/tasks?run={run_id}", "tasks match", shots, "tasks")
    text = _text(browser)
    assert "Why tasks were invalid" in text
    invalid = int(re.search(r"Why tasks were invalid: (\d+) of", text).group(1))
    assert invalid == 0 or "invalid: " in text, "an invalid task's title names its reason"
    _open(browser, f"{url}/compare?run={run_id}", "Training scores", shots, "compare")
    assert "->" not in _text(browser)  # sanity: page text, not DOT source
    _fork_a_run(browser, server, run_id, shots)
    _evaluate_from_compare(browser, server, run_id, shots)
    print(f"screenshots: {shots}")
    if os.environ.get("POPULORA_UPDATE_SCREENSHOTS"):  # opt-in: a test run must not change tracked files
        out = ROOT / "docs" / "screenshots"
        out.mkdir(parents=True, exist_ok=True)
        for png in shots.glob("*.png"):
            shutil.copy(png, out / png.name)
