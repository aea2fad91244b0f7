"""The job life cycle in the UI (issue 31, part 4): Resume as a job, live job state after a resume (from the UI or
a terminal), queued jobs on Runs with their place in line, form errors beside the Launch button.

The resume test runs the real trainer (tiny random model) as jobs; the queue tests use sleeper jobs on a queue of
one slot. Every wait is for an event (a file, a tag, a status), never for a clock."""

from __future__ import annotations

import sys

import pytest
from conftest import HOLD, app_page, wait_for

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from populora.platform.jobs import jobs, queue
from populora.platform.store import runlayout as rl

TINY = ("name: resumable\nsteps: 300\nmodel: {tiny_random: true, lora_rank: 4}\ncheckpoint: {every: 1}\n"
        "tasks: {max_new_tokens_propose: 24, max_new_tokens_solve: 8, tasks_per_teacher: 2, rollouts: 2}\n")


def _texts(at: AppTest) -> str:
    return "\n".join(str(e.value) for kind in ("info", "error", "caption", "markdown", "code", "success", "warning")
                     for e in getattr(at, kind))


def _tag(uri: str, run_id: str, tag: str) -> str | None:
    from mlflow import MlflowClient

    return MlflowClient(uri).get_run(run_id).data.tags.get(tag)


@pytest.mark.slow  # two tiny trainings as jobs: ~2 min on 2 loaded cores
def test_resume_from_the_runs_page_runs_as_a_job_and_its_state_is_live(one_slot_queue):
    """A stopped run: Runs offers Resume; pressing it starts ``populora train --resume`` as a job linked to the run
    at once (before the trainer starts); the run's page then shows that job's log and state, the run is re-tagged
    with the resuming job, and the Launch panel marks the earlier job as resumed since."""
    first = jobs.launch_training(TINY, name="resumable", env={"MLFLOW_TRACKING_URI": one_slot_queue["uri"]})
    run_id = wait_for(lambda: first.run_id or (first.status == "failed" and pytest.fail(first.log_tail())), 300,
                      "the trainer to create its run")
    wait_for(lambda: (_tag(one_slot_queue["uri"], run_id, rl.PROGRESS) or "0/300") != "0/300", 300, "a first step",
             detail=lambda: first.log_tail())
    assert jobs.stop(first) == "stopped"
    assert _tag(one_slot_queue["uri"], run_id, rl.JOB_ID) == first.id

    at = app_page("runs", run=run_id)
    assert "Stopped at step" in _texts(at) and f"populora train --resume {run_id}" in _texts(at)
    next(b for b in at.button if b.label == "Resume").click()
    at.run()
    resumed = jobs.latest_for_run(run_id)
    assert resumed is not None and resumed.id != first.id  # the run's newest job: linked before the trainer starts
    assert resumed.argv[3:] == ["train", "--resume", run_id, "--quiet"] and resumed.kind == "train"
    assert resumed.name == "resumable (resumed)"

    wait_for(lambda: f"resuming run {run_id} at step" in resumed.log_tail(), 300, "the trainer to resume",
             detail=lambda: resumed.log_tail())
    wait_for(lambda: _tag(one_slot_queue["uri"], run_id, rl.JOB_ID) == resumed.id, 60, "the run re-tagged with the resume's job")
    at = app_page("runs", run=run_id)
    expanders = [e.label for e in at.expander]
    assert any(label.startswith("job log (running") for label in expanders), expanders  # the resume's, live
    assert not any("log of the earlier job" in label for label in expanders)
    assert f"resuming run {run_id}" in "\n".join(c.value for c in at.code)
    assert not any(b.label == "Resume" for b in at.button)  # nothing to resume while it trains

    launch = app_page("launch")
    assert f"resumed since by job {resumed.id}" in _texts(launch)
    assert jobs.stop(resumed) == "stopped"


def test_a_resume_outside_the_ui_retags_the_run_and_the_page_says_the_log_is_the_earlier_jobs(one_slot_queue, monkeypatch):
    """``populora train --resume`` in a terminal (no job) re-tags the run's job as "" (run_log.resumed): the
    Runs page then labels the last job's log as the earlier job's, instead of showing it as the run's state."""
    from populora.training.config import TrainConfig
    from populora.training.run.run_log import RunLog

    job_dir = one_slot_queue["dir"] / "jobs" / "j-old"
    job_dir.mkdir(parents=True)
    old = jobs.Job(id="j-old", argv=["x"], dir=str(job_dir), created=1.0)
    old.save()
    (job_dir / "exit_code").write_text("130")  # it stopped
    monkeypatch.setenv(rl.ENV_JOB_ID, old.id)
    monkeypatch.setenv(rl.ENV_JOB_DIR, str(job_dir))
    log = RunLog.start(TrainConfig(name="terminal", steps=3))
    rl.record_job_run(log.run_id)  # as RunLog.describe does
    assert jobs.latest_for_run(log.run_id).id == old.id
    monkeypatch.delenv(rl.ENV_JOB_ID)
    monkeypatch.delenv(rl.ENV_JOB_DIR)
    log.resumed("step_1")  # what Trainer.resume does, from a terminal
    assert _tag(one_slot_queue["uri"], log.run_id, rl.JOB_ID) == ""
    at = app_page("runs", run=log.run_id)
    assert any(e.label == "log of the earlier job j-old (stopped)" for e in at.expander), [e.label for e in at.expander]
    assert "resumed outside this UI" in _texts(at)
    assert "resumed since outside this UI" in _texts(app_page("launch"))


def test_queued_jobs_show_on_runs_with_their_place_in_line(one_slot_queue):
    """One slot: a running job holds it, two wait. Runs lists the waiting two, in launch order, with #1 and #2."""
    running = jobs.start([sys.executable, "-c", HOLD], name="holder", slots=1)
    wait_for(lambda: running.status == "running", 60, "the first job to take the slot")
    waiting = [jobs.start([sys.executable, "-c", HOLD], name=f"waiter-{i}", slots=1) for i in (1, 2)]
    wait_for(lambda: all(j.status == "queued" for j in waiting), 60, "both to wait in the queue")
    at = app_page("runs")
    table = next(d.value for d in at.dataframe if "place" in d.value.columns)
    rows = table[table["name"].str.startswith("waiter")]
    assert list(rows["name"]) == ["waiter-1", "waiter-2"] and list(rows["place"]) == ["#1 in line", "#2 in line"]
    assert "job(s) in the queue" in _texts(at) or "Job queue" in _texts(at)
    assert [e.position for e in queue.snapshot() if e.job.id in {w.id for w in waiting}] == [1, 2]  # the queue's own order


def test_launch_form_errors_are_beside_the_launch_button(one_slot_queue):
    """A bad field: the message under the field, and one beside the Launch button naming the field."""
    at = app_page("launch")
    at.number_input(key=next(k for k in (w.key for w in at.number_input) if k.endswith("_steps"))).set_value(0)
    next(b for b in at.button if b.label == "Launch").click()
    at.run()
    assert not at.exception
    form_errors = [e.value for e in at.error]
    assert any(v.startswith("Not launched: fix **steps**") for v in form_errors), form_errors
    assert jobs.list_jobs() == []


# ====================================================================== the evaluation form and its progress
FORM = "from populora.ui import eval_panel\neval_panel.launcher(RUN, None, key='t')\n"


def _form(run_id: str) -> AppTest:
    import streamlit as st

    st.cache_data.clear()
    at = AppTest.from_string(f"RUN = {run_id!r}\n" + FORM, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_eval_form_defaults_finish_on_a_cpu_and_it_estimates_before_launching(one_slot_queue):
    """No CUDA here: the defaults are the model's protocol (quick for the embedded model, named in the option) and
    a limit of 2; the estimate under the form counts every benchmark's first 2 items per target at the quick
    protocol's 512-token budget (evaluation/harness/protocol.py). A baseline run's form offers no "run's baseline"."""
    from populora.training.config import TrainConfig
    from populora.training.run.run_log import RunLog

    baseline = RunLog.start(TrainConfig(name="b", population={"single_agent": True})).run_id
    population = RunLog.start(TrainConfig(name="p")).run_id
    at = _form(baseline)
    assert at.number_input(key="t_limit").value == 2
    assert at.selectbox(key="t_protocol").options[0] == "(default for the model: quick)"
    assert not any(c.label == "the run's baseline" for c in at.checkbox)
    estimate = next(c.value for c in at.caption if c.value.startswith("**Estimate**"))
    # no member runs logged: the base model is the one target; 10 benchmarks x 2 items x 512 tokens
    assert "1 targets, 20 generations, at most 10,240 new tokens (protocol quick)" in estimate, estimate
    assert "no earlier evaluation on this machine" in estimate
    assert any(c.label == "the run's baseline" for c in _form(population).checkbox)


def test_an_evaluation_jobs_progress_counts_generations_and_shows_scores_in_percent(one_slot_queue, tmp_path):
    """A job whose first pair is stored and whose second has 2 of 4 generations: the cells read 100.0% and 2/4,
    the status line 1/2 pairs and 6/8 generations (what the runner's files say, as eval_progress reads them)."""
    import json
    import time

    out = tmp_path / "eval_out"
    pairs = [{"target": t, "benchmark": "gsm8k", "file": f"pairs/{t}/gsm8k.json"} for t in ("T0", "T1")]
    (out / "pairs" / "T0").mkdir(parents=True)
    (out / "progress.json").write_text(json.dumps({"run": "r", "step": None, "pairs": pairs}))
    (out / "pairs" / "T0" / "gsm8k.json").write_text(json.dumps({"score": 1.0}))
    now = time.time()
    for target, done in (("T0", 4), ("T1", 2)):
        (out / "items" / target).mkdir(parents=True)
        (out / "items" / target / "gsm8k.json").write_text(
            json.dumps({"done": done, "total": 4, "started": now, "updated": now}))
    job_dir = one_slot_queue["dir"] / "jobs" / "e1"
    job_dir.mkdir(parents=True)
    jobs.Job(id="e1", argv=["x"], dir=str(job_dir), created=now - 5, kind="eval", name="eval r").save()
    (job_dir / "config.yaml").write_text("run: r\nbenchmarks: gsm8k\nlimit: 4\n")
    (job_dir / rl.EVAL_OUT_FILE).write_text(str(out))
    (job_dir / "exit_code").write_text("130")
    import streamlit as st

    st.cache_data.clear()
    at = AppTest.from_string("from populora.platform.jobs import jobs\nfrom populora.ui import eval_panel\n"
                             "eval_panel.job_view(jobs.list_jobs()[0], 'k')\n", default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert table.loc["T0", "gsm8k"] == "100.0%" and table.loc["T1", "gsm8k"] == "2/4"
    assert "1/2 pairs scored · 6/8 generations" in "\n".join(m.value for m in at.markdown)


def test_the_member_run_link_works_or_says_how_to_start_mlflows_ui(one_slot_queue, monkeypatch):
    """Nothing listens at POPULORA_MLFLOW_UI: no dead link, the command that starts MLflow's UI on that port; an
    HTTP server there: the link to the run's page."""
    import http.server
    import socket
    import threading

    import streamlit as st

    from populora.ui import common

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("POPULORA_MLFLOW_UI", f"http://127.0.0.1:{port}")
    st.cache_data.clear()
    text = common.mlflow_link("abc", "7")
    assert "](" not in text and f"mlflow ui --backend-store-uri {one_slot_queue['uri']} --port {port}" in text, text
    server = http.server.HTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        st.cache_data.clear()
        assert common.mlflow_link("abc", "7") == f"[`abc`](http://127.0.0.1:{port}/#/experiments/7/runs/abc) (in MLflow's UI)"
    finally:
        server.shutdown()
        server.server_close()


# ====================================================================== cosmetics (audit row 10)
def test_show_plan_says_fits_once_with_readable_times(one_slot_queue):
    """The smoke preset's plan: "Fits: <n> of <m> usable GB", not "Fits: fits:"; step times of a 135M model in
    fractions of a second, not "~0 s"; the assumed utilisation in words, not a Python dict."""
    at = app_page("launch")
    next(b for b in at.button if b.label == "Show plan").click()
    at.run()
    assert not at.exception
    verdict = next(s.value for s in at.success if s.value.startswith("Fits"))
    assert verdict.startswith("Fits: ") and "fits:" not in verdict.lower().removeprefix("fits: "), verdict
    plan = next(c.value for c in at.code if c.value.startswith("plan of"))
    assert "{'" not in plan and "~0 s" not in plan and "FITS: fits" not in plan, plan
    assert "assumed utilisation train 35%" in plan, plan  # plan.py's train utilisation, in words


def test_tasks_show_the_prefill_before_the_completion_and_each_status_once(one_slot_queue):
    """A run logged before ``Verdict.said`` (reasons "error: error: NameError..."): the Tasks page says the status
    once; an invalid task's raw completion starts with the proposal prompt's prefill (the direct format's opening
    fence: training/tasks/code_o.py, code_f.py); its solve rate reads "–", never None."""
    import synthetic_store

    ids = synthetic_store.build(one_slot_queue["uri"], runs=1, members=4, tasks=6, steps=1)
    at = app_page("tasks", run=ids[-1])
    codes = [c.value for c in at.code]
    assert not any("error: error:" in c for c in codes)
    assert any(c.startswith("error: NameError: name 'y'") for c in codes), codes
    assert "```python\ndef f(<task>...</task>" in codes or "```input\n<task>...</task>" in codes, codes
    table = next(d.value for d in at.dataframe if "task_id" in d.value.columns)
    assert not table["solve_rate"].isna().any() and "–" in set(table["solve_rate"])
    assert not any("error: error:" in str(r) for r in table["reason"])


def test_compares_training_table_shows_rates_in_percent_and_no_none(one_slot_queue):
    """Students have no teacher metrics: those cells read "–" (Streamlit draws a missing number as "None"), and
    rates read in % as on the Runs page, not 0.500."""
    import synthetic_store

    ids = synthetic_store.build(one_slot_queue["uri"], runs=1, members=4, tasks=6, steps=1)
    at = app_page("compare", run=ids[-1])
    table = next(d.value for d in at.dataframe if "rating/mu" in d.value.columns)
    cells = table.to_numpy().ravel().tolist()
    assert "–" in cells and not any(c is None or str(c) in ("None", "nan") for c in cells), table
    rates = [c for c in table["student/solve_rate"] if c != "–"]
    assert rates and all(c.endswith("%") for c in rates), rates


def test_a_resume_waiting_in_the_queue_shows_as_resuming_without_a_second_resume_button(one_slot_queue, monkeypatch):
    """The walk's finding: a resume launched from Runs that waits in the queue showed the run as "Stopped ...
    [Resume]" (a second click queued a second resume) and called its own job "resumed outside this UI"."""
    from populora.training.config import TrainConfig
    from populora.training.run.run_log import RunLog

    job_dir = one_slot_queue["dir"] / "jobs" / "j-old"
    job_dir.mkdir(parents=True)
    old = jobs.Job(id="j-old", argv=["x"], dir=str(job_dir), created=1.0)
    old.save()
    (job_dir / "exit_code").write_text("130")  # the launch, stopped
    monkeypatch.setenv(rl.ENV_JOB_ID, old.id)
    monkeypatch.setenv(rl.ENV_JOB_DIR, str(job_dir))
    log = RunLog.start(TrainConfig(name="stopped", steps=3))
    rl.record_job_run(log.run_id)
    monkeypatch.delenv(rl.ENV_JOB_ID)
    monkeypatch.delenv(rl.ENV_JOB_DIR)
    log.end(rl.STOPPED)
    holder = jobs.start([sys.executable, "-c", HOLD], name="holder", slots=1)
    wait_for(lambda: holder.status == "running", 60, "the holder to take the one slot")
    resume = jobs.launch_resume(log.run_id, name="stopped (resumed)")
    wait_for(lambda: resume.status == "queued", 60, "the resume to wait in the queue")
    at = app_page("runs", run=log.run_id)
    assert f"Resuming: job `{resume.id}` is queued" in _texts(at)
    assert [b.disabled for b in at.button if b.label == "Resume"] == [True]  # shown, greyed: nothing to click
    assert "resumed outside this UI" not in _texts(at)
