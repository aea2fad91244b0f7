"""Issue 54's run life in headless Chromium, as a researcher watches a run: a tiny training paused inside its
second step (an event, not a race: its trainer waits there until stopped) shows its phase, counts and ETA on the
Runs page (screenshot ``run_progress.png``) and in Launch's job list; Ctrl+Enter in Launch's overrides box
launches nothing; Stop is at the top of the run's panel; after Resume, with the one slot of the queue taken, the
run shows "resume queued (#1)", its Resume button disabled and the run still picked though a newer run exists.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``scripts/install-browser.sh``) and ``selenium``;
skips with the reason when they are missing."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from headless import NEEDS_CHROMIUM, chromium, drawn_form, settle, ui_server
from headless import open_page as _open
from headless import page_text as _text
from headless import wait_on_page as _wait_for

pytestmark = [NEEDS_CHROMIUM, pytest.mark.timeout(600)]
webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")

TINY = ("name: life\nsteps: 300\nmodel: {tiny_random: true, lora_rank: 4}\ncheckpoint: {every: 1}\n"
        "evolution: {every: 0}\ntasks: {max_new_tokens_propose: 24, max_new_tokens_solve: 8, tasks_per_teacher: 2, rollouts: 2}\n")
# `populora train` whose trainer, once step 2's proposals are written (its progress says "proposing 4/4 tasks"),
# writes a marker and waits there until stopped: the page is read while a step runs, whatever the machine's speed
PAUSED = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
import populora.cli
import populora.training.loop as loop
from populora.platform import progress
marker, original = Path(sys.argv[1]), loop.propose
def propose(*args, **kwargs):
    out = original(*args, **kwargs)
    if progress._active.step == 2 and not marker.exists():
        marker.write_text("2")
        time.sleep(3600)
    return out
loop.propose = propose
sys.exit(populora.cli.main(["train", "--config", sys.argv[2], "--quiet"]))
"""
HOLD = "import time\ntry:\n    time.sleep(300)\nexcept KeyboardInterrupt:\n    raise SystemExit(130)\n"
PROGRESS = re.compile(r"step 2/300 · proposing (\d+)/\1 tasks · \d+ s in this phase · ETA (\d+h \d\dm|\d+m \d\ds|\d+ s)")


@pytest.fixture()
def server(tmp_path, monkeypatch):
    """The app on an empty store with a one-slot queue; this process reads the same store, jobs dir and queue."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_QUEUE_DIR", str(tmp_path / "jobs" / ".queue"))  # the server's default queue dir
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "1")
    monkeypatch.chdir(tmp_path)  # the jobs this test starts write their run dirs there, not in the checkout
    with ui_server(tmp_path, env={"POPULORA_MAX_PARALLEL_JOBS": "1"}) as served:
        yield served


@pytest.fixture()
def browser():
    with chromium(window="1600,1000", page_load_timeout=60) as driver:
        yield driver


def _button(driver, label: str):
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.XPATH, f"//button[.//p[normalize-space()='{label}']]")
    return found[0] if found else None


def _click(driver, element) -> None:
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    element.click()


def _ctrl_enter_launches_nothing(driver, url: str, shots: Path, jobs_dir: Path) -> None:
    """The walk's finding: Ctrl+Enter in the overrides box submitted the form and started a run. Now it does
    nothing; "Show plan" (a submit button) still works, and no job was started by either."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from populora.platform import jobs

    before = {j.id for j in jobs.list_jobs(jobs_dir)}
    _open(driver, f"{url}/launch", "Launch a run", shots)
    form = _wait_for(driver, lambda: drawn_form(driver, "Show plan", fields=("textarea",)), 60, "the launch form")
    box = form.find_element(By.CSS_SELECTOR, 'textarea[aria-label^="Extra overrides"]')
    _click(driver, box)
    box.send_keys("model.tiny_random=true")
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    # a submit is a rerun the app runs to its end (the walk's: a job started); a click on the other button before
    # it ends would interrupt it and hide it, so the page must be quiet first (no script running)
    settle(driver, quiet=1.5, at_most=10)
    _wait_for(driver, lambda: not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]'), 120,
              "the page to be idle")
    _click(driver, _button(driver, "Show plan"))
    _wait_for(driver, lambda: "tiny randomly initialised model" in _text(driver), 60, "the plan (the form's other button)")
    assert {j.id for j in jobs.list_jobs(jobs_dir)} == before, "Ctrl+Enter (or Show plan) started a job"
    assert "Started job(s)" not in _text(driver)


def test_a_runs_step_its_stop_and_its_queued_resume(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    from populora.platform import jobs
    from populora.platform import runlayout as rl
    from populora.training.config import TrainConfig
    from populora.training.run_log import RunLog

    url, shots, jobs_dir = server["url"], tmp_path / "screenshots", tmp_path / "jobs"
    shots.mkdir()
    (tmp_path / "life.yaml").write_text(TINY)
    marker = tmp_path / "paused"
    job = jobs.start([sys.executable, "-c", PAUSED, str(marker), str(tmp_path / "life.yaml")], name="life",
                     root=jobs_dir, env={"MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"]})
    _wait_for(browser, lambda: marker.exists() or (job.status in ("failed", "lost") and pytest.fail(job.log_tail())),
              300, "the trainer to pause inside step 2")
    run_id = job.run_id

    # the running step: phase, counts, time in the phase and the ETA from step 1's phase times; Stop at the top
    _open(browser, f"{url}/?run={run_id}", "Details of run", shots)
    _wait_for(browser, lambda: PROGRESS.search(_text(browser)), 60, "the step's progress on Runs")
    stop = _wait_for(browser, lambda: _button(browser, "⏹️ Stop this run"), 30, "the Stop button")
    log = browser.find_element(By.XPATH, "//summary[.//p[starts-with(normalize-space(), 'job log')]]")
    assert stop.location["y"] < log.location["y"], "Stop is above the job log, not inside it"
    now = browser.find_element(By.XPATH, "//*[contains(text(), 'step 2/300 · proposing')]")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", now)
    browser.save_screenshot(str(shots / "run_progress.png"))
    assert "training time" in _text(browser) and "wall time" in _text(browser)
    _ctrl_enter_launches_nothing(browser, url, shots, jobs_dir)
    _wait_for(browser, lambda: PROGRESS.search(_text(browser)), 30, "the step's progress in Launch's job list")

    # Stop, from the top of the run's panel
    _open(browser, f"{url}/?run={run_id}", "Details of run", shots)
    _click(browser, _wait_for(browser, lambda: _button(browser, "⏹️ Stop this run"), 30, "the Stop button"))
    _wait_for(browser, lambda: job.status == "stopped", 120, "the run to stop", )
    RunLog.start(TrainConfig(name="newer", steps=1)).end(rl.FINISHED)  # the newest run: the picker must keep ours

    # Resume with the queue's one slot taken: "resume queued (#1)", the button disabled, the run still picked
    holder = jobs.start([sys.executable, "-c", HOLD], name="holder", root=jobs_dir, slots=1)
    _wait_for(browser, lambda: holder.status == "running", 60, "the holder to take the one slot")
    _open(browser, f"{url}/?run={run_id}", "Stopped at step", shots)
    _click(browser, _button(browser, "Resume"))
    _wait_for(browser, lambda: "resume queued (#1)" in _text(browser), 60, "the run's resume state")
    resume = _button(browser, "Resume")
    assert resume is not None and not resume.is_enabled(), "a queued resume's button is disabled"
    assert [j.name for j in jobs.list_jobs(jobs_dir) if j.run_id == run_id] == ["life (resumed)", "life"]
    picker = browser.find_element(By.XPATH, "//div[@data-testid='stSelectbox'][.//p[normalize-space()='Details of run']]")
    shown = browser.execute_script("return arguments[0].innerText + ' ' + Array.from(arguments[0].querySelectorAll('input'))"
                                   ".map(i => i.value + ' ' + (i.getAttribute('aria-label') || '')).join(' ')", picker)
    assert f"life · population · {run_id[:8]}" in shown, shown
    browser.save_screenshot(str(shots / "run_resume_queued.png"))
    if os.environ.get("POPULORA_SCREENSHOTS_TO"):  # opt-in: where a session keeps the screenshots it looked at
        for png in shots.glob("run_*.png"):
            shutil.copy(png, Path(os.environ["POPULORA_SCREENSHOTS_TO"]) / png.name)
