"""Issue 67's walk in headless Chromium, as a researcher leaving runs alone: a population launched with its linked
baseline (two jobs, one slot) is stopped from the Runs page, which reads "stopping" until its trainer has written
its state, then "stopped" and says what Resume does to the baseline; the baseline runs meanwhile (matched to the
stopped population's spend); Resume trains the population on and extends the baseline in the same job, and the pair
ends compute-matched. A ``populora train`` typed in a terminal waits in the same queue (``populora jobs`` and the
Runs page list it), then, SIGSTOPped while it trains, reads "silent" with no Resume (the refusal names its process);
a league from the CLI queues behind it and League shows it. One server, the one-slot queue, one slow test.

Needs ``chromium`` and ``chromium-driver`` (``scripts/install-browser.sh``) and ``selenium``; skips without them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_in_process, wait_for
from headless import NEEDS_CHROMIUM, button, chromium, press, ui_server
from headless import open_page as _open
from headless import page_text as _text
from headless import wait_on_page as _wait_for

pytestmark = [NEEDS_CHROMIUM, pytest.mark.timeout(900), pytest.mark.slow]
webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")

# every trainer beats every 0.5 s and the server calls one silent after 10 s: a SIGSTOP reads silent within seconds
BEATS = {"POPULORA_HEARTBEAT_S": "0.5", "POPULORA_HEARTBEAT_LIMIT_S": "10", "POPULORA_MAX_PARALLEL_JOBS": "1"}
POP = ["model.tiny_random=true", "model.lora_rank=4", "tasks.format=direct", "tasks.kinds=[code_o]",
       "tasks.seed_rounds=0", "checkpoint.every=1", "matchmaking.pfsp=even", "tasks.max_new_tokens_propose=24",
       "tasks.max_new_tokens_solve=8", "steps=8", "pair=walk", "name=walk"]
# the population's trainer pauses inside step 4 (after its proposals) until stopped; a stop then waits for the
# test's release file before the trainer writes its state, so "stopping" is on the page for as long as the test looks
PAUSED = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
import populora.cli
import populora.training.loop as loop
from populora.platform import progress
folder, original = Path(sys.argv[1]), loop.propose
def propose(*args, **kwargs):
    out = original(*args, **kwargs)
    if progress._active.step == 4 and not (folder / "paused").exists():
        (folder / "paused").write_text("4")
        try:
            time.sleep(3600)
        except KeyboardInterrupt:
            while not (folder / "release").exists():
                time.sleep(0.1)
            raise
    return out
loop.propose = propose
sys.exit(populora.cli.main(["train", "--config", sys.argv[2], "--quiet"]))
"""


@pytest.fixture()
def server(tmp_path, monkeypatch):
    """The app on an empty store with a one-slot queue; this process (and what it starts) reads the same store,
    jobs dir and queue, with the short heartbeat."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_QUEUE_DIR", str(tmp_path / "jobs" / ".queue"))
    for name, value in BEATS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    with ui_server(tmp_path, env=BEATS) as served:
        yield served


def _configs(tmp_path: Path) -> tuple[Path, str]:
    from populora.platform import config as config_io
    from populora.training import TrainConfig, matched_baseline

    cfg = config_io.load(TrainConfig, None, POP + [f"output_dir={tmp_path / 'runs'}"])
    path = tmp_path / "walk.yaml"
    path.write_text(config_io.dump(cfg))
    return path, config_io.dump(matched_baseline(cfg))


def test_the_walk_stop_resume_with_its_baseline_a_silent_terminal_trainer_and_a_league(server, tmp_path, capsys):
    from mlflow import MlflowClient

    from populora.evaluation import compute
    from populora.platform.jobs import jobs, queue
    from populora.platform.store import runlayout as rl
    from populora.training.compute import budget as B

    url, shots, jobs_dir = server["url"], tmp_path / "shots", tmp_path / "jobs"
    shots.mkdir()
    pop_yaml, base_yaml = _configs(tmp_path)
    env = {"MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"]}
    pop_job = jobs.start([sys.executable, "-c", PAUSED, str(tmp_path), str(pop_yaml)], name="walk", root=jobs_dir,
                         env=env, slots=1)
    base_job = jobs.launch_training(base_yaml, name="walk-baseline", env=env)  # the Launch page's baseline box
    wait_for(lambda: (tmp_path / "paused").exists() or (pop_job.status in ("failed", "lost") and pytest.fail(pop_job.log_tail())),
             300, "the population to pause inside step 4")
    pop = pop_job.run_id
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    with chromium(window="1600,1000", page_load_timeout=60) as browser:
        # Stop: "stopping" at once, held while the trainer writes its state, then "stopped" with the baseline's line
        _open(browser, f"{url}/?run={pop}", "Details of run", shots)
        press(browser, "⏹️ Stop this run", timeout=60)
        _wait_for(browser, lambda: "Stopping: the trainer finishes writing its state" in _text(browser), 60,
                  "the run stopping on the page")
        _wait_for(browser, lambda: button(browser, "⏹️ Stop this run") is None and "⏳ stopping" in _text(browser), 60,
                  "the state 'stopping' and no Stop button (the rerun's stale elements gone)")
        browser.save_screenshot(str(shots / "walk_stopping.png"))
        (tmp_path / "release").write_text("go")
        wait_for(lambda: pop_job.status == "stopped", 120, "the population to stop", detail=lambda: pop_job.log_tail())
        # the baseline takes the freed slot and matches the stopped population's spend
        wait_for(lambda: base_job.status in ("finished", "failed", "lost"), 600, "the baseline to end",
                 detail=lambda: base_job.log_tail())
        assert base_job.status == "finished", base_job.log_tail()
        base = base_job.run_id
        assert client.get_run(base).data.tags[rl.BUDGET_MATCHED].startswith(B.SHORT_MATCH)
        _open(browser, f"{url}/?run={pop}", "Stopped after step", shots)
        assert f"Its linked baseline {base[:8]}, if it was matched to this population's spend while it was stopped" in _text(browser)

        # Resume: the population trains on, then its baseline is extended to the final spend, in the same job
        press(browser, "Resume")
        _wait_for(browser, lambda: "resuming" in _text(browser) or "resume queued" in _text(browser) or
                  "🟢 running" in _text(browser), 60, "the run's resume state")
        resume_job = wait_for(lambda: next((j for j in jobs.list_jobs(jobs_dir) if j.name == "walk (resumed)"), None), 30,
                              "the resume job")
        # a terminal's `populora train` beside the UI's job: it waits in the same queue, listed by populora jobs
        # (no seeding rounds, short generations: its first step is what the walk waits for, on a loaded machine too)
        term = subprocess.Popen([sys.executable, "-m", "populora.cli", "train", "--set", "model.tiny_random=true",
                                 "--set", "model.lora_rank=4", "--set", "steps=50", "--set", "name=terminal-run",
                                 "--set", "tasks.seed_rounds=0", "--set", "tasks.max_new_tokens_propose=24",
                                 "--set", "tasks.max_new_tokens_solve=8",
                                 "--set", f"output_dir={tmp_path / 'runs'}", "--quiet"], env=dict(os.environ),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: any(e.job.pid == term.pid and e.position == 1 for e in queue.snapshot()), 120,
                     "the terminal's train waiting #1 in the queue")
            capsys.readouterr()
            assert cli_in_process("jobs") == 0
            listed = capsys.readouterr().out
            assert "1 slot(s), 1 running, 1 waiting" in listed and "terminal: populora train" in listed, listed
            _open(browser, f"{url}/", "Details of run", shots)  # the queue's table (a canvas: its count is text)
            _wait_for(browser, lambda: "Job queue: 1 waiting for a slot" in _text(browser), 60, "the terminal's job on Runs")
            wait_for(lambda: resume_job.status in ("finished", "failed", "lost"), 600, "the resume job to end",
                     detail=lambda: resume_job.log_tail())
            assert resume_job.status == "finished", resume_job.log_tail()
            p, b = client.get_run(pop), client.get_run(base)
            assert rl.status(p) == rl.FINISHED and not b.data.tags.get(rl.BUDGET_MATCHED, "").startswith(B.SHORT_MATCH)
            figure = compute.figure(p.data.metrics, b.data.metrics)
            assert figure["matched"], figure["words"]

            # the terminal's trainer holds the slot now; SIGSTOPped once its run beats, it reads silent, no Resume
            term_run = wait_for(lambda: next((r.info.run_id for r in client.search_runs(
                [client.get_experiment_by_name("populora").experiment_id], filter_string=rl.PARENT_RUNS)
                if r.info.run_name == "terminal-run" and rl.STEP_SENTINEL in r.data.metrics), None), 300,
                "the terminal run's first step")
            os.kill(term.pid, signal.SIGSTOP)
            _open(browser, f"{url}/?run={term_run}", "Details of run", shots)
            _wait_for(browser, lambda: "Silent: its trainer (pid" in _text(browser), 120, "the SIGSTOPped run shown silent")
            text = _text(browser)
            assert f"pid {term.pid} on" in text and f"kill -CONT {term.pid}" in text and "No Resume while it lives" in text
            assert button(browser, "Resume") is None
            browser.save_screenshot(str(shots / "walk_silent.png"))

            # a league from the CLI queues behind the (suspended) terminal trainer; League shows it with its place
            assert cli_in_process("league", "--runs", pop, "--answers", "1", "--tasks-per-kind", "1") == 0
            league = next(j for j in jobs.list_jobs(jobs_dir) if j.kind == "league")
            wait_for(lambda: league.status == "queued", 60, "the league to wait in the queue")
            _open(browser, f"{url}/league", league.name, shots, "walk_league")
            assert f"{league.name} · queued · #1 in line" in _text(browser), _text(browser)[:2000]
            jobs.stop(league, timeout_s=10)
        finally:
            os.kill(term.pid, signal.SIGCONT)
            term.kill()
            term.communicate()
