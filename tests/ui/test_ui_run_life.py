"""Issue 54's run life in headless Chromium, as a researcher watches a run: a tiny training paused inside its
third step (an event, not a race: its trainer waits there until stopped) shows its phase, counts and ETA on the
Runs page (screenshot ``run_progress.png``) and in Launch's job list; Ctrl+Enter in Launch's overrides box
launches nothing; Stop is at the top of the run's panel. The stopped run is forked at step 1 from the Runs page's
fork form with one more student: the new student gets an id the parent never gave out (the parent's evolution of
step 2 used the next one), and the fork's Lineage draws it outside the parent's box, born in the fork, as its
downloaded ancestry record says (``fork_grow_lineage.png``). After Resume, with the one slot of the queue taken,
the run shows "resume queued (#1)", its Resume button disabled and the run still picked though newer runs exist;
an evaluation launched from Compare waits behind it and Compare shows it instead of "No benchmark scores ...
Launch an evaluation" (``compare_eval_queued.png``), and its line follows a running one's pairs without a reload
(``compare_eval_running.png``); a queued league shows on League instead of "No league yet" (``league_queued.png``). One server, one trained run and its one fork serve every part.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``scripts/install-browser.sh``) and ``selenium``;
skips with the reason when they are missing."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from conftest import HOLD, cli_in_process
from headless import LIMIT, NEEDS_CHROMIUM, PICKER, button, chromium, click, drawn_form, fill_eval_form, fill_fork_form, press, settle, ui_server
from headless import open_page as _open
from headless import page_text as _text
from headless import wait_on_page as _wait_for

pytestmark = [NEEDS_CHROMIUM, pytest.mark.timeout(600)]
webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")

# an evolution at step 2 (one teacher and one student replaced): by its pause in step 3 the run has given out
# ids after the checkpoint of step 1 the fork starts from (checkpoint.keep 2 keeps that checkpoint)
TINY = ("name: life\nsteps: 300\nmodel: {tiny_random: true, lora_rank: 4}\ncheckpoint: {every: 1, keep: 2}\n"
        "evolution: {every: 2}\ntasks: {max_new_tokens_propose: 24, max_new_tokens_solve: 8, tasks_per_teacher: 2, rollouts: 2}\n")
# `populora train` whose trainer, once step 3's proposals are written (its progress says "proposing 4/4 tasks"),
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
    if progress._active.step == 3 and not marker.exists():
        marker.write_text("3")
        time.sleep(3600)
    return out
loop.propose = propose
sys.exit(populora.cli.main(["train", "--config", sys.argv[2], "--quiet"]))
"""
PROGRESS = re.compile(r"step 3/300 · proposing (\d+)/\1 tasks · \d+ s in this phase · ETA (\d+h \d\dm|\d+m \d\ds|\d+ s)")


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
        # the page's viewport 1600x1000, as the screenshots are (the window's size holds headless Chrome's frame too)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 1600, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        yield driver


def _ctrl_enter_launches_nothing(driver, url: str, shots: Path, jobs_dir: Path) -> None:
    """The walk's finding: Ctrl+Enter in the overrides box submitted the form and started a run. Now it does
    nothing; "Show plan" (a submit button) still works, and no job was started by either."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from populora.platform.jobs import jobs

    before = {j.id for j in jobs.list_jobs(jobs_dir)}
    _open(driver, f"{url}/launch", "Launch a run", shots)
    form = _wait_for(driver, lambda: drawn_form(driver, "Show plan", fields=("textarea",)), 60, "the launch form")
    box = form.find_element(By.CSS_SELECTOR, 'textarea[aria-label^="Extra overrides"]')
    click(driver, box)
    box.send_keys("model.tiny_random=true")
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    # a submit is a rerun the app runs to its end (the walk's: a job started); a click on the other button before
    # it ends would interrupt it and hide it, so the page must be quiet first (no script running)
    settle(driver, quiet=1.5, at_most=10)
    _wait_for(driver, lambda: not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]'), 120,
              "the page to be idle")
    press(driver, "Show plan")
    _wait_for(driver, lambda: "tiny randomly initialised model" in _text(driver), 60, "the plan (the form's other button)")
    assert {j.id for j in jobs.list_jobs(jobs_dir)} == before, "Ctrl+Enter (or Show plan) started a job"
    assert "Started job(s)" not in _text(driver)


def _lineage_of(run_id: str) -> dict:
    from populora.platform.store import ancestry
    from populora.platform.store import runlayout as rl

    return rl.lineage_of(ancestry.artifact_or_none(os.environ["MLFLOW_TRACKING_URI"], run_id, rl.LINEAGE))


def _boxes(driver) -> dict:
    """The lineage graph as drawn: {"nodes": {member: [left, top, right, bottom]}, "clusters": {label: [...]}} in
    page pixels (Graphviz's SVG: a node's <title> is its id; a fork's dashed box is a cluster with a label)."""
    return driver.execute_script("""
        const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
        const nodes = {}, clusters = {};
        document.querySelectorAll('svg g.node').forEach(g => { nodes[g.querySelector('title').textContent] = box(g); });
        document.querySelectorAll('svg g.cluster').forEach(g => {
            clusters[Array.from(g.querySelectorAll('text')).map(t => t.textContent).join(' ')] = box(g.querySelector('path, polygon')); });
        return {nodes, clusters};""")


def _inside(inner: list[float], outer: list[float]) -> bool:
    return outer[0] <= inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2] and inner[3] <= outer[3]


def _fork_with_one_more_student(driver, url: str, run_id: str, shots: Path, downloads: Path) -> str:
    """The walk's finding: a fork that grew the population gave its new student S3, which the parent had already
    given a member born after the fork step; Lineage drew it inside the parent's box and its ancestry credited
    the parent. Now: the form previews an id no member of the parent had, the fork gives it that id, and Lineage
    draws it outside the parent's box, born in the fork, as its ancestry record says. Returns the fork's run id."""
    from selenium.webdriver.common.by import By

    from populora.platform.jobs import jobs

    jobs_dir = Path(os.environ["POPULORA_JOBS_DIR"])
    parent_ids = {e["child"] for e in _lineage_of(run_id)["events"]}
    assert any(e["step"] == 2 for e in _lineage_of(run_id)["events"]), "the parent gave out ids after the fork step"
    # one step, no evolution in it: the grown student is still alive when Lineage is read
    fill_fork_form(driver, url, run_id, 1, "population.students=3\nsteps=2\nevolution.every=0", shots)
    said = _wait_for(driver, lambda: re.search(r"students 2 → 3: adds (S\d+), a mutation child of (S\d+)", _text(driver)),
                     60, "the fork form's resize preview")
    grown, grown_from = said.groups()
    assert grown not in parent_ids, f"the fork form offers {grown}, an id the parent gave out: {sorted(parent_ids)}"
    press(driver, "Fork from here")
    job = _wait_for(driver, lambda: next((j for j in jobs.list_jobs(jobs_dir) if j.name == f"life · fork of {run_id[:8]} @1"), None),
                    30, "the fork job on disk")
    driver.get("about:blank")  # a page left open redraws its live part while the fork trains
    _wait_for(driver, lambda: job.status in ("finished", "failed", "lost"), 300, "the fork to end")
    assert job.status == "finished", job.log_tail()
    fork = job.run_id
    (event,) = [e for e in _lineage_of(fork)["events"] if e["details"].get("resize") == "grow"]
    assert (event["child"], event["parents"], event["step"], event.get("run")) == (grown, [grown_from], 1, fork), event

    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    _open(driver, f"{url}/lineage?run={fork}&member={grown}", f"Member {grown}", shots)
    parents_box = f"run {run_id[:8]}, up to its step 1: forked here"
    drawn = _wait_for(driver, lambda: (lambda b: b if parents_box in b["clusters"] and grown in b["nodes"] else None)(_boxes(driver)),
                      30, "the lineage graph with the parent's box")
    assert _inside(drawn["nodes"][grown_from], drawn["clusters"][parents_box]), drawn  # born in the parent: in its box
    assert not _inside(drawn["nodes"][grown], drawn["clusters"][parents_box]), f"{grown} is drawn in the parent's box: {drawn}"
    born = f"born in this fork at its step 1, added by the fork's resize: {event['operator']} of {grown_from}"
    assert born in _text(driver), _text(driver)[-1500:]
    assert f"except those the fork's resize added (born in this fork): students 2 → 3 ({grown} = " in _text(driver)
    graph = driver.find_element(By.CSS_SELECTOR, '[data-testid="stGraphVizChart"]')
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", graph)
    _wait_for(driver, lambda: not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]'), 60, "the page to be idle")
    driver.save_screenshot(str(shots / "fork_grow_lineage.png"))
    press(driver, "Download ancestry record (YAML)")
    path = downloads / f"{grown}-ancestry.yaml"
    _wait_for(driver, path.is_file, 30, f"the browser's download of {path.name}")
    record = yaml.safe_load(path.read_text())
    assert [(a["member"], a["run"]) for a in record["ancestors"][:2]] == [(grown, fork), (grown_from, run_id)], record["ancestors"]
    return fork


def _queued_evaluation_on_compare(driver, url: str, run_id: str, shots: Path) -> None:
    """The walk's finding: Compare said "No benchmark scores ... Launch an evaluation" while the run's evaluation
    was on its way. An evaluation launched from its form waits behind the queue's one busy slot; Compare shows it
    with its place in line instead."""
    from selenium.webdriver.common.by import By

    from populora.platform.jobs import jobs

    _open(driver, f"{url}/compare?run={run_id}", "Training scores", shots)
    assert "No benchmark scores for this run yet" in _text(driver)  # nothing on its way: say how to start one
    form = _wait_for(driver, lambda: drawn_form(driver, "Launch evaluation", fields=(PICKER, LIMIT)), 60, "the evaluation form")
    fill_eval_form(driver, form, ["gsm8k"], limit=1)
    press(driver, "Launch evaluation", within=form)
    job = _wait_for(driver, lambda: next((j for j in jobs.list_jobs() if j.kind == "eval"), None), 30, "the evaluation job")
    _wait_for(driver, lambda: job.status == "queued", 60, "the evaluation to wait in the queue")
    # the launch reruns the page: its top says what is on its way (no reload)
    _wait_for(driver, lambda: "An evaluation of this run is on its way" in _text(driver), 60, "the evaluation on Compare")
    # the launch's own rerun may show the job "starting" (its supervisor not yet in line); the line's fragment
    # refreshes it (every 3 s) to its place in line: wait for that, not for the first render
    text = _wait_for(driver, lambda: (lambda t: t if "queued · #2 in line for one of 1 slot(s)" in t else None)(_text(driver)),
                     60, "the evaluation's place in line on Compare (its fragment refreshed, no reload)")
    assert "No benchmark scores" not in text, text[:2000]
    _wait_for(driver, lambda: not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stToast"]'), 30, "the launch's toast to go")
    said = driver.find_element(By.XPATH, "//*[contains(text(), 'An evaluation of this run is on its way')]")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", said)
    driver.save_screenshot(str(shots / "compare_eval_queued.png"))
    _running_evaluation_on_compare(driver, run_id, shots)


def _running_evaluation_on_compare(driver, run_id: str, shots: Path) -> None:
    """The line at the top of Compare follows the evaluation on its way without a reload: a stand-in evaluation
    job of the run (outside the queue; it holds until stopped) whose runner's files the test writes, as
    ``populora eval`` writes them: "running", then "1/2 pairs scored · 6/8 generations". (The line was drawn once
    with the page: an evaluation that started running still read "queued", one scoring its pairs "running".)"""
    import json
    import time

    from populora.platform.jobs import jobs
    from populora.platform.store import runlayout as rl

    out = Path(os.environ["POPULORA_JOBS_DIR"]).parent / "standin_eval"
    job = jobs.start([sys.executable, "-c", HOLD], name="stand-in eval", kind="eval",
                     files={"config.yaml": yaml.safe_dump({"run": run_id, "benchmarks": "gsm8k"}), rl.EVAL_OUT_FILE: str(out)})
    _wait_for(driver, lambda: "An evaluation of this run is on its way: 🟢 running." in _text(driver), 60,
              "the running evaluation at the top of Compare (no reload)")
    pairs = [{"target": t, "benchmark": "gsm8k", "file": f"pairs/{t}/gsm8k.json"} for t in ("S0", "S1")]
    (out / "pairs" / "S0").mkdir(parents=True)
    (out / "pairs" / "S0" / "gsm8k.json").write_text(json.dumps({"score": 1.0}))
    for target, done in (("S0", 4), ("S1", 2)):
        (out / "items" / target).mkdir(parents=True)
        (out / "items" / target / "gsm8k.json").write_text(json.dumps({"done": done, "total": 4, "started": time.time(), "updated": time.time()}))
    (out / "progress.json").write_text(json.dumps({"run": run_id, "step": None, "pairs": pairs}))
    _wait_for(driver, lambda: "on its way: 🟢 running · 1/2 pairs scored · 6/8 generations" in _text(driver), 60,
              "the evaluation's pairs at the top of Compare (no reload)")
    driver.save_screenshot(str(shots / "compare_eval_running.png"))
    jobs.stop(job)


def _queued_league_on_league(driver, url: str, run_id: str, shots: Path) -> None:
    """The walk's finding: League said "No league yet" while a league was queued. ``populora league`` queues one
    behind the busy slot; League lists it with its place in line instead."""
    from populora.platform.jobs import jobs

    _open(driver, f"{url}/league", "No league yet", shots)
    assert cli_in_process("league", "--runs", run_id, "--answers", "1", "--tasks-per-kind", "1") == 0
    job = next(j for j in jobs.list_jobs() if j.kind == "league")
    _wait_for(driver, lambda: job.status == "queued", 60, "the league to wait in the queue")
    _open(driver, f"{url}/league", job.name, shots, "league_queued")
    text = _text(driver)
    assert f"{job.name} · queued · #3 in line for one of 1 slot(s)" in text and "No league yet" not in text, text[:2000]


def test_a_runs_life_its_fork_and_its_jobs_in_the_queue(server, browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    from populora.platform.jobs import jobs
    from populora.platform.store import runlayout as rl
    from populora.training.config import TrainConfig
    from populora.training.run.run_log import RunLog

    url, shots, jobs_dir = server["url"], tmp_path / "screenshots", tmp_path / "jobs"
    shots.mkdir()
    (tmp_path / "life.yaml").write_text(TINY)
    marker = tmp_path / "paused"
    job = jobs.start([sys.executable, "-c", PAUSED, str(marker), str(tmp_path / "life.yaml")], name="life",
                     root=jobs_dir, env={"MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"]})
    _wait_for(browser, lambda: marker.exists() or (job.status in ("failed", "lost") and pytest.fail(job.log_tail())),
              300, "the trainer to pause inside step 3")
    run_id = job.run_id

    # the running step: phase, counts, time in the phase and the ETA from step 2's phase times; Stop at the top
    _open(browser, f"{url}/?run={run_id}", "Details of run", shots)
    _wait_for(browser, lambda: PROGRESS.search(_text(browser)), 60, "the step's progress on Runs")
    stop = _wait_for(browser, lambda: button(browser, "⏹️ Stop this run"), 30, "the Stop button")
    log = browser.find_element(By.XPATH, "//summary[.//p[starts-with(normalize-space(), 'job log')]]")
    assert stop.location["y"] < log.location["y"], "Stop is above the job log, not inside it"
    now = browser.find_element(By.XPATH, "//*[contains(text(), 'step 3/300 · proposing')]")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", now)
    browser.save_screenshot(str(shots / "run_progress.png"))
    assert "training time" in _text(browser) and "wall time" in _text(browser)
    _ctrl_enter_launches_nothing(browser, url, shots, jobs_dir)
    _wait_for(browser, lambda: PROGRESS.search(_text(browser)), 30, "the step's progress in Launch's job list")

    # Stop, from the top of the run's panel
    _open(browser, f"{url}/?run={run_id}", "Details of run", shots)
    press(browser, "⏹️ Stop this run", timeout=30)
    _wait_for(browser, lambda: job.status == "stopped", 120, "the run to stop", )
    fork = _fork_with_one_more_student(browser, url, run_id, shots, tmp_path / "downloads")
    RunLog.start(TrainConfig(name="newer", steps=1)).end(rl.FINISHED)  # the newest run: the picker must keep ours

    # Resume with the queue's one slot taken: "resume queued (#1)", the button disabled, the run still picked
    holder = jobs.start([sys.executable, "-c", HOLD], name="holder", root=jobs_dir, slots=1)
    _wait_for(browser, lambda: holder.status == "running", 60, "the holder to take the one slot")
    _open(browser, f"{url}/?run={run_id}", "Stopped after step", shots)
    press(browser, "Resume")
    _wait_for(browser, lambda: "resume queued (#1)" in _text(browser), 60, "the run's resume state")
    resume = button(browser, "Resume")
    assert resume is not None and not resume.is_enabled(), "a queued resume's button is disabled"
    assert [j.name for j in jobs.list_jobs(jobs_dir) if j.run_id == run_id] == ["life (resumed)", "life"]
    picker = browser.find_element(By.XPATH, "//div[@data-testid='stSelectbox'][.//p[normalize-space()='Details of run']]")
    shown = browser.execute_script("return arguments[0].innerText + ' ' + Array.from(arguments[0].querySelectorAll('input'))"
                                   ".map(i => i.value + ' ' + (i.getAttribute('aria-label') || '')).join(' ')", picker)
    assert f"life · population · {run_id[:8]}" in shown, shown
    state = browser.find_element(By.XPATH, "//*[contains(text(), 'resume queued (#1)')]")
    ActionChains(browser).move_to_element(state).perform()  # off the disabled button: no tooltip in the shot
    _wait_for(browser, lambda: not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stToast"]'), 30, "the resume's toast to go")
    browser.save_screenshot(str(shots / "run_resume_queued.png"))

    # behind the resume in the queue: an evaluation of the fork (from Compare) and a league (from the CLI)
    _queued_evaluation_on_compare(browser, url, fork, shots)
    _queued_league_on_league(browser, url, fork, shots)
    if os.environ.get("POPULORA_SCREENSHOTS_TO"):  # opt-in: where a session keeps the screenshots it looked at
        for png in ("run_progress", "run_resume_queued", "fork_grow_lineage", "compare_eval_queued", "compare_eval_running",
                    "league_queued"):
            shutil.copy(shots / f"{png}.png", Path(os.environ["POPULORA_SCREENSHOTS_TO"]) / f"{png}.png")
