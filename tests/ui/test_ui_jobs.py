"""Background jobs (``populora.platform.jobs.jobs``), the ``populora ui`` entry point and the Launch form's validation."""

from __future__ import annotations

import inspect
import os
import re
import sys
import time
from pathlib import Path

import mlflow.store.db.utils as db_utils
import pytest
from conftest import trained_runs, wait_for, wait_for_status

from populora.platform.jobs import jobs
from populora.platform.store import runlayout
from populora.training.config import job_slots

ROOT = Path(__file__).resolve().parents[2]

# links itself to its job as the trainer does (runlayout.record_job_run), and prints a decoy run line: the job
# must not take its run id from the output
SLEEPER = ("import time\nfrom populora.platform.store import runlayout\n"
           "print('run ffffffffffffffffffffffffffffffff: decoy', flush=True)\n"
           "runlayout.record_job_run('0123456789abcdef0123456789abcdef')\n"
           "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('interrupted', flush=True)\n    raise\n")


pytestmark = pytest.mark.usefixtures("own_queue")  # each test its own queue (conftest)


def test_job_runs_survives_on_disk_and_reports_exit(tmp_path):
    job = jobs.start([sys.executable, "-c", "print('hello')"], name="t", root=tmp_path)
    assert wait_for_status(job, ("finished", "failed")) == "finished"
    again = jobs.get_job(job.id, tmp_path)  # a fresh UI process finds it from disk alone
    assert again.status == "finished" and again.exit_code == 0 and "hello" in again.log_tail()
    failing = jobs.start([sys.executable, "-c", "raise SystemExit(3)"], root=tmp_path)
    assert wait_for_status(failing, ("finished", "failed")) == "failed"
    assert [j.id for j in jobs.list_jobs(tmp_path)] == [failing.id, job.id]


def test_job_logs_hold_no_hugging_face_loading_bars(tmp_path, monkeypatch):
    """The walk's finding: tqdm "Loading weights" bars (transformers' model loading) filled the job logs."""
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    code = ("from transformers.utils.logging import tqdm\nlist(tqdm(range(3), desc='Loading weights'))\n"
            "print('loaded', flush=True)")
    job = jobs.start([sys.executable, "-c", code], name="bars", root=tmp_path)
    assert wait_for_status(job, ("finished", "failed")) == "finished", job.log_tail()
    assert "loaded" in job.log_tail() and "Loading weights" not in job.log_tail()


def test_stop_interrupts_the_process_group_and_reads_the_run_id_the_job_wrote(tmp_path):
    job = jobs.start([sys.executable, "-c", SLEEPER], root=tmp_path)
    deadline = time.time() + 120
    while job.run_id is None and time.time() < deadline:
        time.sleep(0.1)
    assert job.run_id == "0123456789abcdef0123456789abcdef" and job.status == "running"
    assert jobs.stop(job) == "stopped"
    assert "interrupted" in job.log_tail()  # the child saw KeyboardInterrupt: the trainer's clean-stop path


# a trainer that ignores the stop (SIGINT) and never ends its run, with one member run open
STUCK = ("import signal, time\nfrom populora.platform.store import runlayout\n"
         "from populora.platform.store.tracking import Tracker\n"
         "signal.signal(signal.SIGINT, signal.SIG_IGN)\ntracker = Tracker()\n"
         "run = tracker.start_run('stuck', 'stuck')\ntracker.start_run('stuck', 'member', parent=run)\n"
         "runlayout.record_job_run(run)\nprint('ready', flush=True)\ntime.sleep(600)\n")


def test_a_stop_that_outlasts_its_grace_kills_the_trainer_and_ends_its_run_stopped(tmp_path):
    """Killed after the grace, the trainer cannot end its run: the stop ends it stopped (KILLED) with its members,
    and the job reads stopped, not lost; before, the run stayed RUNNING and read crashed once its heartbeat aged."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    job = jobs.start([sys.executable, "-c", STUCK], root=tmp_path / "jobs", env={"MLFLOW_TRACKING_URI": uri})
    wait_for(lambda: "ready" in job.log_tail(), 120, "the stuck trainer's run", 0.1, lambda: ":\n" + job.log_tail())
    run_id = job.run_id
    assert run_id is not None and job.status == "running", job.log_tail()
    assert jobs.stop(job, timeout_s=1) == "stopped"
    assert job.process() is None and jobs.get_job(job.id, tmp_path / "jobs").status == "stopped"
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert (run.info.status, run.data.tags[runlayout.STATUS]) == ("KILLED", runlayout.STOPPED)
    assert "killed after 1 s" in run.data.tags[runlayout.NOTE] and runlayout.ERROR not in run.data.tags
    members = client.search_runs([run.info.experiment_id], f"tags.{runlayout.PARENT} = '{run_id}'")
    assert [m.info.status for m in members] == ["KILLED"]


def test_a_ray_stop_ends_the_run_its_trainer_left_running_and_no_other(tmp_path, monkeypatch):
    """Ray SIGKILLs a stopped job's trainer after its grace (RAY_JOB_STOP_WAIT_TIME_S) and then reports STOPPED: a
    run still RUNNING then is ended stopped; a run the trainer ended itself keeps its end."""
    from populora.platform.jobs import ray_jobs
    from populora.platform.store.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    states = {}
    monkeypatch.setattr(ray_jobs, "stop", lambda address, sid: states.__setitem__(sid, "stopped"))
    monkeypatch.setattr(ray_jobs, "status", lambda address, sid: states.get(sid, "running"))
    ends = {}
    for name, trainer_ended in (("killed", False), ("ended", True)):
        job_dir = tmp_path / "jobs" / name
        job_dir.mkdir(parents=True)
        job = jobs.Job(id=name, argv=["x"], dir=str(job_dir), created=1.0, env={"MLFLOW_TRACKING_URI": uri},
                       ray_address="http://127.0.0.1:1")
        run_id = tracker.start_run("ray", name, tags={runlayout.JOB_ID: name})
        if trainer_ended:
            tracker.set_tags(run_id, {runlayout.STATUS: runlayout.STOPPED, runlayout.NOTE: "the trainer's own"})
            tracker.end_run(run_id, "KILLED")
        assert jobs.stop(job, timeout_s=0) == "stopped"
        run = tracker.get_run(run_id)
        ends[name] = (run.info.status, run.data.tags[runlayout.STATUS], "Ray's grace" in run.data.tags[runlayout.NOTE])
    assert ends == {"killed": ("KILLED", "stopped", True), "ended": ("KILLED", "stopped", False)}


def test_a_stop_waits_longer_than_the_store_may_make_the_trainer_wait():
    """A stopped trainer writes to MLflow (the run stopped, its member runs ended); on a sqlite store a write that
    waits on the store's lock waits up to MLflow's busy_timeout (its source, the installed version). The stop's grace
    before SIGKILL exceeds it with room for those writes, or a stop under load leaves the run RUNNING."""
    busy_ms = [int(v) for v in re.findall(r"PRAGMA busy_timeout\s*=\s*(\d+)", inspect.getsource(db_utils))]
    assert busy_ms, "MLflow's sqlite sessions no longer set busy_timeout: read mlflow/store/db/utils.py again"
    assert jobs.STOP_GRACE_S >= 2 * max(busy_ms) / 1000, (jobs.STOP_GRACE_S, busy_ms)
    assert inspect.signature(jobs.stop).parameters["timeout_s"].default == jobs.STOP_GRACE_S


def test_a_ray_job_finds_its_run_by_the_job_id_tag(tmp_path, monkeypatch):
    """A Ray Job's trainer runs on the cluster, away from the job dir: the run carries the job's id as a tag
    (from POPULORA_JOB_ID, which the launcher sets), and the job finds it in its store, then remembers it."""
    from populora.training.config import TrainConfig
    from populora.training.run.run_log import RunLog

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    job_dir = tmp_path / "jobs" / "populora-x"
    job_dir.mkdir(parents=True)
    job = jobs.Job(id="populora-x", argv=["x"], dir=str(job_dir), created=1.0, env={"MLFLOW_TRACKING_URI": uri},
                   ray_address="http://127.0.0.1:1")
    assert job.run_id is None
    RunLog.start(TrainConfig(name="other"))  # a run of no job, in the same store
    monkeypatch.setenv(runlayout.ENV_JOB_ID, "populora-x")
    log = RunLog.start(TrainConfig(name="mine"))
    assert job.run_id == log.run_id
    assert runlayout.read_run_id(job_dir) == log.run_id  # remembered: no store query next time


def test_argv_is_never_a_shell_string(tmp_path):
    with pytest.raises(TypeError):
        jobs.start("echo hi; rm -rf /", root=tmp_path)
    bad = jobs.start(["/no/such/program"], root=tmp_path)
    assert wait_for_status(bad, ("finished", "failed")) == "failed" and "could not start" in bad.log_tail()


def test_launch_training_runs_populora_train_on_the_written_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = jobs.launch_training("name: x\nsteps: 0\n", name="x", root=tmp_path / "jobs")
    assert job.argv[1:5] == ["-m", "populora.cli", "train", "--config"]
    assert job.argv[5] == str(tmp_path / "jobs" / job.id / "config.yaml") and "steps: 0" in open(job.argv[5]).read()
    assert wait_for_status(job, ("finished", "failed"), timeout=120) == "failed"
    assert "steps" in job.log_tail() and "greater than or equal to 1" in job.log_tail()  # the trainer's own check


# ====================================================================== populora ui
def test_ui_defaults_to_localhost_headless():
    from populora.ui.cli import build_argv

    argv = build_argv()
    assert argv[1:4] == ["-m", "streamlit", "run"] and argv[4].endswith("app.py")
    opts = dict(zip(argv[5::2], argv[6::2]))
    assert opts["--server.address"] == "127.0.0.1" and opts["--server.port"] == "8501" and opts["--server.headless"] == "true"


def test_ui_main_flags(capsys):
    from populora.ui.cli import ui_main

    assert ui_main(["--dry-run", "--host", "0.0.0.0", "--port", "9000"]) == 0
    out = capsys.readouterr().out
    assert "--server.address 0.0.0.0" in out and "--server.port 9000" in out
    assert ui_main(["--port", "70000"]) == 2


# ====================================================================== form validation
def test_form_errors_name_the_field():
    from populora.ui import form

    values = form.preset_values(form.presets().get("smoke"))
    flat = {path: form.get_path(values, path) for path, _ in form.schema_fields()}
    cfg, errors = form.validate(flat)
    assert errors == {} and cfg.name == "smoke"
    bad = dict(flat, **{"model.lora_rank": 0, "matchmaking.pfsp": "nope"})
    _, errors = form.validate(bad)
    assert set(errors) == {"model.lora_rank", "matchmaking.pfsp"}
    cross = dict(flat, **{"population.teachers": 1, "matchmaking.teachers_per_student": 2})
    _, errors = form.validate(cross)
    assert "matchmaking.teachers_per_student" in errors and "population.teachers" in errors
    _, errors = form.validate(flat, "model.no_such_key=1")
    assert "overrides" in errors and "no_such_key" in errors["overrides"]


def test_every_form_value_that_costs_compute_has_an_upper_bound():
    """A typo of a few zeros must not start a run of a billion steps: the schema caps each costly value and the
    form shows the cap under the field."""
    from populora.ui import form

    values = form.preset_values(form.presets().get("smoke"))
    flat = {path: form.get_path(values, path) for path, _ in form.schema_fields()}
    costly = ["steps", "population.teachers", "population.students", "model.lora_rank", "tasks.tasks_per_teacher",
              "tasks.rollouts", "tasks.max_new_tokens_propose", "tasks.max_new_tokens_solve", "tasks.timeout_s",
              "tasks.memory_mb", "tasks.buffer_size", "optim.micro_batch", "optim.max_seq_len",
              "ray.model_workers", "ray.sandbox_workers", "matchmaking.teachers_per_student"]
    fields = dict(form.schema_fields())
    for path in costly:
        assert any(hasattr(m, "le") or hasattr(m, "lt") for m in fields[path].metadata), f"{path} has no upper bound"
        _, errors = form.validate(dict(flat, **{path: 10**9}))
        assert path in errors and "less than or equal to" in errors[path], (path, errors)


# ====================================================================== process identity and the launch queue
def test_a_job_whose_pid_is_another_process_is_lost_and_never_signalled(tmp_path):
    """job.json names a live process group that is not ours (pid reused after a reboot or a lost supervisor):
    the job shows "lost" and Stop signals nothing."""
    import subprocess

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        job_dir = tmp_path / "j"
        job_dir.mkdir()
        job = jobs.Job(id="j", argv=["x"], dir=str(job_dir), created=1.0, pid=other.pid, pid_started=12345.0)
        job.save()
        assert job.status == "lost" and job.process() is None
        assert jobs.stop(job, timeout_s=1) == "lost"
        legacy = jobs.Job(id="j", argv=["x"], dir=str(job_dir), created=1.0, pid=other.pid)  # no start time saved
        assert legacy.status == "lost" and jobs.stop(legacy, timeout_s=1) == "lost"
        time.sleep(0.5)
        assert other.poll() is None  # never signalled
    finally:
        other.kill()
        other.wait()


def test_a_job_records_its_process_start_time(tmp_path):
    job = jobs.start([sys.executable, "-c", SLEEPER], root=tmp_path)
    assert job.pid_started is not None and jobs.get_job(job.id, tmp_path).pid_started == job.pid_started
    assert wait_for_status(job, ("running",)) == "running" and job.process().pid == job.pid
    assert jobs.stop(job) == "stopped"
    assert job.process() is None and job.status == "stopped"


def test_launch_slots_queue_jobs_beyond_the_limit(tmp_path, own_queue):
    first = jobs.start([sys.executable, "-c", SLEEPER], root=tmp_path, slots=1)
    assert wait_for_status(first, ("running",)) == "running"
    second = jobs.start([sys.executable, "-c", "print('second ran', flush=True)"], root=tmp_path, slots=1)
    third = jobs.start([sys.executable, "-c", "print('third ran', flush=True)"], root=tmp_path, slots=1)
    time.sleep(2.5)  # more than a poll of the queue: they would have started by now if they could
    assert second.status == "queued" and third.status == "queued"
    assert jobs.stop(third) == "stopped" and "third ran" not in third.log_tail()  # stopped while queued: never ran
    assert jobs.stop(first) == "stopped"
    assert wait_for_status(second, ("finished", "failed")) == "finished" and "second ran" in second.log_tail()


def test_the_queue_lets_jobs_out_in_launch_order_and_tells_each_its_place(tmp_path, own_queue):
    from populora.platform.jobs import queue

    first = jobs.start([sys.executable, "-c", SLEEPER], root=tmp_path / "a", slots=1)
    assert wait_for_status(first, ("running",)) == "running"
    order = tmp_path / "order.txt"
    # three more, from two launchers with their own job dirs (a sweep keeps its jobs under its own dir)
    later = [jobs.start([sys.executable, "-c", f"open({str(order)!r}, 'a').write('{i} ')"],
                        root=tmp_path / ("a" if i % 2 else "b"), slots=1) for i in range(3)]
    for job in later:
        assert wait_for_status(job, ("queued",)) == "queued"
    rows = queue.snapshot()
    assert [(e.job.id, e.position) for e in rows] == [(first.id, None)] + [(j.id, i + 1) for i, j in enumerate(later)]
    assert [queue.position(j) for j in later] == [1, 2, 3]
    assert jobs.stop(first) == "stopped"
    for job in later:
        assert wait_for_status(job, ("finished", "failed")) == "finished"
    assert order.read_text() == "0 1 2 ", "a later job got the slot before an earlier one"
    assert queue.snapshot() == [] and not list((own_queue / "tickets").iterdir())  # tickets leave with their jobs


def test_a_job_needing_several_slots_waits_for_all_and_keeps_its_place(tmp_path, own_queue):
    """Two slots (two GPUs): a training on both (a data-parallel Ray run, need 2) launched while a one-slot job
    runs waits, holding none; a one-slot job launched after it waits behind it although a slot is free."""
    from populora.platform.jobs import queue

    order = tmp_path / "order.txt"
    first = jobs.start([sys.executable, "-c", SLEEPER], root=tmp_path, slots=2)
    assert wait_for_status(first, ("running",)) == "running"
    big = jobs.start([sys.executable, "-c", f"import time; open({str(order)!r}, 'a').write('big '); time.sleep(1.5)"],
                     root=tmp_path, slots=2, need=2)
    small = jobs.start([sys.executable, "-c", f"open({str(order)!r}, 'a').write('small ')"], root=tmp_path, slots=2)
    time.sleep(2.5)  # more than a poll: either would have started by now if it could
    assert big.status == "queued" and small.status == "queued" and not order.exists()
    assert [queue.position(j) for j in (big, small)] == [1, 2]
    assert jobs.stop(first) == "stopped"
    for job in (big, small):
        assert wait_for_status(job, ("finished", "failed")) == "finished"
    assert order.read_text() == "big small "  # the small one did not pass the big one while a slot was free


def test_a_local_gpu_training_needs_a_slot_per_gpu(tmp_path, own_queue):
    yaml_text = "ray: {address: local, model_workers: 2, gpus_per_worker: 1}\nmodel: {device: cuda}\n"
    assert job_slots(yaml_text) == 2  # the training side sizes the job; the platform only counts slots
    assert job_slots("ray: {address: local, model_workers: 2, gpus_per_worker: 0}") == 1  # CPU workers
    job = jobs.start([sys.executable, "-c", "pass"], root=tmp_path, slots=1, need=2)
    assert job.need == 1  # never more than the machine has: it takes the whole machine instead of waiting forever
    assert wait_for_status(job, ("finished", "failed")) == "finished"


def test_the_queue_runs_a_training_then_an_evaluation_with_one_slot(tmp_path, monkeypatch, own_queue):
    """One slot: a real ``populora eval`` job (tiny model, one gsm8k item) launched while a training holds the
    slot waits in line (position 1) and starts only once the training has ended. The training is a stand-in
    process in the same queue (a real one is the browser test's)."""
    from populora.evaluation.harness import benchmarks
    from populora.platform.jobs import queue

    if not (benchmarks.data_dir() / benchmarks.CHECKSUMS).is_file():
        pytest.skip("no benchmark data")
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "1")
    ended, go = tmp_path / "train_ended", tmp_path / "train_may_end"
    # the stand-in training holds its slot until the test has seen the evaluation queued behind it (a file, not
    # a 3 s sleep the evaluation's launch could outlast on a loaded machine)
    hold = f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.1)\nopen({str(ended)!r}, 'w').write('x')"
    train = jobs.start([sys.executable, "-c", hold], name="train", root=tmp_path / "jobs", slots=jobs.max_parallel())
    assert wait_for_status(train, ("running",)) == "running"
    out = tmp_path / "eval_out"
    ev = jobs.launch_eval(f"base_only: true\nmodel: {{tiny_random: true}}\nbenchmarks: gsm8k\nlimit: 1\n"
                          f"generation: {{max_new_tokens: 4}}\nout: {out}\n", name="eval", root=tmp_path / "jobs")
    assert ev.kind == "eval" and ev.argv[2:5] == ["populora.cli", "eval", "--config"]
    assert wait_for_status(ev, ("queued",)) == "queued" and queue.position(ev) == 1
    go.write_text("x")
    assert wait_for_status(ev, ("finished", "failed"), timeout=300) == "finished", ev.log_tail()
    assert (out / "results.json").stat().st_mtime > ended.stat().st_mtime and train.status == "finished"
    assert "gsm8k" in (out / "results.json").read_text()


def test_max_parallel_defaults_to_one_on_cpu_and_reads_the_env(monkeypatch):
    monkeypatch.delenv("POPULORA_MAX_PARALLEL_JOBS", raising=False)
    import torch

    assert jobs.max_parallel() == max(1, torch.cuda.device_count())
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "3")
    assert jobs.max_parallel() == 3
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "0")
    with pytest.raises(ValueError, match="POPULORA_MAX_PARALLEL_JOBS"):
        jobs.max_parallel()


# ====================================================================== Ray addresses: the operator's allowlist only
def test_ray_addresses_come_from_the_operator_allowlist_only(tmp_path, monkeypatch):
    """Ray's SDK sends the cluster token to the address it is given: an address nobody allowed is refused before
    Ray is imported or any connection made, and no job is left behind."""
    from populora.platform.jobs import ray_jobs

    monkeypatch.delenv(ray_jobs.ENV_ADDRESSES, raising=False)
    monkeypatch.delenv(ray_jobs.ENV_ADDRESSES_FILE, raising=False)
    ray_jobs.client.cache_clear()
    with pytest.raises(ray_jobs.RayJobError, match="POPULORA_RAY_ADDRESSES"):
        jobs.launch_training("name: x\n", root=tmp_path / "jobs", ray_address="http://attacker.example:8265")
    assert jobs.list_jobs(tmp_path / "jobs") == []
    listed = tmp_path / "ray_addresses"
    listed.write_text("# the lab cluster\nhttp://10.0.0.5:8265  # head node\n\n")
    monkeypatch.setenv(ray_jobs.ENV_ADDRESSES, "auto, ray://head:10001")
    monkeypatch.setenv(ray_jobs.ENV_ADDRESSES_FILE, str(listed))
    assert ray_jobs.allowed_addresses() == ["auto", "ray://head:10001", "http://10.0.0.5:8265"]
    assert ray_jobs.check_allowed("http://10.0.0.5:8265") == "http://10.0.0.5:8265"
    with pytest.raises(ray_jobs.RayJobError, match="not one of"):
        ray_jobs.check_allowed("http://10.0.0.5:8266")
    # a job.json naming another address (written by hand, or before the allowlist) is never contacted
    job = jobs.Job(id="r", argv=["x"], dir=str(tmp_path), created=1.0, ray_address="http://attacker.example:8265")
    assert job.status == "lost" and job.log_tail() == ""


# ====================================================================== populora ui: Streamlit's guards, the login
def test_ui_turns_on_xsrf_and_allowed_hosts(monkeypatch):
    from populora.ui.cli import build_argv

    monkeypatch.delenv("POPULORA_UI_ALLOWED_HOSTS", raising=False)
    argv = build_argv()
    opts = dict(zip(argv[5::2], argv[6::2]))
    assert opts["--server.enableXsrfProtection"] == "true" and opts["--server.enableCORS"] == "true"
    hosts = [argv[i + 1] for i, a in enumerate(argv) if a == "--server.allowedHosts"]
    assert hosts == ["localhost", "127.0.0.1", "::1", "[::1]"]  # never empty: empty means any Host
    monkeypatch.setenv("POPULORA_UI_ALLOWED_HOSTS", "lab.example.org, ")
    argv = build_argv("10.1.2.3")
    hosts = [argv[i + 1] for i, a in enumerate(argv) if a == "--server.allowedHosts"]
    assert {"10.1.2.3", "lab.example.org", "localhost"} <= set(hosts)


def test_ui_dry_run_lists_the_allowed_hosts_and_warns_without_a_token(capsys, monkeypatch):
    from populora.ui.cli import ui_main

    monkeypatch.delenv("POPULORA_UI_TOKEN", raising=False)
    assert ui_main(["--dry-run", "--allowed-host", "ui.example.org"]) == 0
    assert "--server.allowedHosts ui.example.org" in capsys.readouterr().out


def test_the_ui_asks_for_the_operator_token_before_any_page(monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest

    from populora.ui import cli

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_UI_TOKEN", "correct horse battery staple")
    at = AppTest.from_file(str(cli.APP), default_timeout=60).run()
    assert not at.exception
    assert "MLflow store" not in " ".join(c.value for c in at.caption)  # nothing of the app rendered
    at.text_input(key="sign_in_token").set_value("wrong")
    at.button[0].click().run()
    assert any("Wrong token" in e.value for e in at.error) and "MLflow store" not in " ".join(c.value for c in at.caption)
    at.text_input(key="sign_in_token").set_value("correct horse battery staple")
    at.button[0].click().run()
    assert not at.exception
    assert "MLflow store" in " ".join(c.value for c in at.caption)  # signed in: the app renders
    monkeypatch.delenv("POPULORA_UI_TOKEN")
    open_at = AppTest.from_file(str(cli.APP), default_timeout=60).run()  # no token set: no login
    assert "MLflow store" in " ".join(c.value for c in open_at.caption)


# ====================================================================== evaluation from the Compare page (AppTest)
def _train_tiny(tmp_path) -> str:
    """A finished tiny run (2 steps) in the store the test set, as ``populora train`` leaves it (24-token proposals
    and 8-token answers, as the other UI tests' runs: the smoke preset's 128 / 48 cost ~7 s of CPU more). Trained
    in this process: the evaluation job is under test, the run is only its input."""
    (run_id,) = trained_runs(tmp_path, os.environ["MLFLOW_TRACKING_URI"], "--config", str(ROOT / "configs/smoke.yaml"),
                                 "--set", "model.tiny_random=true", "--set", "steps=2", "--set", "tasks.max_new_tokens_propose=24",
                                 "--set", "tasks.max_new_tokens_solve=8", "--quiet")
    return run_id


def test_compare_page_launches_an_evaluation_and_shows_its_scores(tmp_path, monkeypatch):
    """A finished tiny run without scores: the Compare page's form (generated from EvalConfig) rejects an empty
    benchmark list under the form, launches ``populora eval`` as a job with what was picked, shows its progress per
    (target, benchmark), and once it ends shows the scores results.json holds."""
    import json

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from populora.evaluation.harness import benchmarks

    if not (benchmarks.data_dir() / benchmarks.CHECKSUMS).is_file():
        pytest.skip("no benchmark data")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    run_id = _train_tiny(tmp_path)
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "populora" / "ui" / "views" / "compare.py"), default_timeout=90)
    at.query_params["run"] = run_id
    at.run()
    assert not at.exception
    assert any("No benchmark scores" in i.value for i in at.info)
    assert at.selectbox(key="cmp_eval_step").options == ["final adapters", "step 1", "step 2"]  # its checkpoints
    at.multiselect(key="cmp_eval_benchmarks").set_value([])
    _submit(at)
    assert any("benchmarks" in e.value and "no benchmark selected" in e.value for e in at.error), [e.value for e in at.error]
    assert jobs.list_jobs() == []
    at.multiselect(key="cmp_eval_benchmarks").set_value(["gsm8k"])
    at.number_input(key="cmp_eval_limit").set_value(2)
    at.text_input(key="cmp_eval_generation.max_new_tokens").set_value("6")
    _submit(at)
    assert not at.exception and not at.error
    (job,) = jobs.list_jobs()
    assert job.kind == "eval" and job.argv[3:5] == ["eval", "--config"]
    cfg = __import__("yaml").safe_load(Path(job.dir, "config.yaml").read_text())
    assert (cfg["run"], cfg["benchmarks"], cfg["limit"], cfg["members"]) == (run_id, "gsm8k", 2, "alive")
    assert wait_for_status(job, ("finished", "failed"), timeout=400) == "finished", job.log_tail()
    st.cache_data.clear()
    at.run()
    assert not at.exception
    # the job's pairs: every member alive at the end and the base model, each scored
    progress = next(d.value for d in at.dataframe if list(d.value.columns) == ["gsm8k"])
    assert set(progress.index) == {"S0", "S2", "T0", "T2", "base model"} and "…" not in progress.to_numpy()
    bench = at.dataframe[0].value
    results = json.loads(Path(Path(job.dir, runlayout.EVAL_OUT_FILE).read_text(), "results.json").read_text())
    assert bench.loc["T0", "GSM8K"] == pytest.approx(100 * results["results"]["T0"]["gsm8k"]["score"])
    assert bench.loc["base model", "GSM8K"] == pytest.approx(100 * results["results"]["base model"]["gsm8k"]["score"])
    assert not any("No benchmark scores" in i.value for i in at.info)


def _submit(at) -> None:
    next(b for b in at.button if b.label == "Launch evaluation").click()
    at.run()


def test_a_stopped_evaluation_job_resumes_without_redoing_its_finished_pairs(tmp_path, own_queue):
    """Stop an evaluation job once its first (target, benchmark) pair is stored; the same config launched again
    (the UI's Resume) keeps that pair's file as it was and scores only the rest."""
    from conftest import wait_for

    from populora.evaluation.harness import benchmarks
    from populora.evaluation import eval_progress

    if not (benchmarks.data_dir() / benchmarks.CHECKSUMS).is_file():
        pytest.skip("no benchmark data")
    out = tmp_path / "eval_out"
    # one-at-a-time, so the pairs finish one by one: gsm8k then amc23 for the base model
    config = (f"base_only: true\nmodel: {{tiny_random: true}}\nbenchmarks: gsm8k,amc23\nlimit: 2\nbatched: false\n"
              f"generation: {{max_new_tokens: 200}}\nout: {out}\n")
    job = jobs.launch_eval(config, name="eval", root=tmp_path / "jobs")
    first = wait_for(lambda: next(iter(out.glob("pairs/*/*.json")), None), 300, "a first stored pair",
                     detail=lambda: job.log_tail())
    stamp = first.stat().st_mtime_ns
    assert jobs.stop(job) == "stopped"
    done = [r for r in eval_progress(out) if r["done"]]
    assert len(eval_progress(out)) == 2 and 1 <= len(done) < 2, eval_progress(out)
    again = jobs.launch_eval(Path(job.dir, "config.yaml").read_text(), name="eval (resumed)", root=tmp_path / "jobs")
    assert wait_for_status(again, ("finished", "failed"), timeout=300) == "finished", again.log_tail()
    assert first.stat().st_mtime_ns == stamp and "done earlier" in again.log_tail(80)
    assert all(r["done"] for r in eval_progress(out))
