import contextlib
import functools
import io
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read when huggingface_hub is imported: before populora is
ROOT = Path(__file__).resolve().parents[1]

from populora.cli import main as cli_main  # noqa: E402
from populora.platform.backends.ray import init_ray  # noqa: E402


# sqlite stores commit without waiting for the disk, here and in every Python process the tests start (their
# sitecustomize): tests/subprocess_site/scratch_sqlite.py says why that is safe and what it saves
SUBPROCESS_SITE = ROOT / "tests" / "subprocess_site"
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SUBPROCESS_SITE), os.environ.get("PYTHONPATH")) if p)
sys.path.insert(0, str(SUBPROCESS_SITE))
import scratch_sqlite  # noqa: E402  (from the folder just put on the path)

scratch_sqlite.install()

# no test may depend on load: hypothesis's per-example deadline and its too-slow health check are wall-clock limits
# (a sampled_from draw took 2.7 s on the loaded two-core box and failed test_lease's verdict test)
settings.register_profile("populora", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("populora")


@pytest.fixture(scope="session", autouse=True)
def session_working_dir(tmp_path_factory):
    """Each test process works in a directory of its own, not in the one pytest was started from: what a command
    writes next to the working dir by default (MLflow's ``./mlruns`` artifacts of a store made without one, the
    jobs and the one-slot queue under ``.populora/``, ``./mlflow.db``) then never lands in the checkout, never finds
    a user's own store, jobs or queue there (`make demo` leaves them), and is never shared by the two xdist workers
    (whose jobs would otherwise wait in one queue). Tests name the checkout's files by ``ROOT``; a test that needs
    a particular directory still chdirs there itself (``mlflow_store``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path_factory.mktemp("cwd"))
        yield


@pytest.fixture(autouse=True)
def stop_handlers_kept():
    """The test process's SIGINT and SIGTERM handlers as they were before the test: a command run in this process
    (``train``, ``eval``, ``league``) installs its stop handler, SIGINT's only where Python's own was there, so a
    later test would otherwise depend on the tests before it and on how the session was started (a terminal, or in
    the background with SIGINT ignored)."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in handlers.items():
        if signal.getsignal(s) is not handler:
            signal.signal(s, handler)


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """A fresh sqlite MLflow store in tmp_path, used by everything in the test (and its subprocesses)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return uri


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5, detail=lambda: ""):
    """Poll ``predicate`` until it returns something truthy and return that; else fail naming what we waited
    for (plus ``detail()``, read at that moment)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail()}")


def wait_for_status(job, statuses, timeout: float = 120.0) -> str:
    """A job's status once it is one of ``statuses`` (or, after ``timeout``, whatever it is: the test's assert
    names it); a bound for a loaded machine, not a timing: it returns at the event."""
    deadline = time.time() + timeout
    while time.time() < deadline and job.status not in statuses:
        time.sleep(0.1)
    return job.status


@pytest.fixture
def own_queue(tmp_path, monkeypatch):
    """The test's own launch queue (the machine's is shared by every job launched from this working dir)."""
    monkeypatch.setenv("POPULORA_QUEUE_DIR", str(tmp_path / "queue"))
    return tmp_path / "queue"


def cli_in_dir(cwd: Path, env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    """``cli_in_process(ARGV)`` in ``cwd`` with ``env`` set, as the command run there would be: (exit code, stdout,
    stderr). For a fixture wider than one test (no capsys); the working directory and environment are restored."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.chdir(cwd)
        for name, value in env.items():
            mp.setenv(name, value)
        code = cli_in_process(*argv)
    return code, out.getvalue(), err.getvalue()


def trained_runs(cwd: Path, uri: str, *args: str) -> list[str]:
    """``populora train ARGS`` in this process (``cli_in_dir``), in ``cwd`` (its run dirs go there) on the store at
    ``uri``; returns the ids of the runs it trained, in order (its ``run <id>: ...`` lines). For tests that only need
    a store a real run leaves."""
    code, out, err = cli_in_dir(cwd, {"MLFLOW_TRACKING_URI": uri}, "train", *args)
    assert code == 0, f"populora train exited {code}:\n{out[-3000:]}\n{err[-3000:]}"
    return [line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("run ")]


def populora_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "populora.cli", *args]


# `populora train` whose trainer, once ``Trainer.<method>`` has returned at step N, writes a marker file and waits
# there until the test signals or kills it: a stop "mid-run" is then an event the test waits for, not a race
# between its poll and a 0.6 s step (the run could otherwise end before the signal).
_PAUSED_TRAIN = """
import signal, sys, time
from pathlib import Path
import populora.cli
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal, even if started in the background
from populora.training.loop import Trainer
method, at, marker = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
original = getattr(Trainer, method)
def paused(self, *args, **kwargs):
    out = original(self, *args, **kwargs)
    if self.step_index == at and not marker.exists():
        marker.write_text(str(at))
        time.sleep(3600)  # until the test's SIGINT / SIGTERM / SIGKILL
    return out
setattr(Trainer, method, paused)
sys.exit(populora.cli.main(sys.argv[4:]))
"""


def cli_in_process(*argv: str) -> int:
    """``populora ARGV`` in the test's process, for a command whose process boundary is not the subject (~10 s of
    CPU less than a subprocess: torch, transformers and mlflow are imported once); the stop handlers ``train`` and
    ``eval`` install are undone (SIGTERM's, and SIGINT's where this process had Python's own: a test process started
    from a terminal and one started in the background, SIGINT ignored, end each command the same); the exit code is
    ``main``'s. Where the process is the subject (kill -9, a stop, a job, a server, processes at once), use a
    subprocess."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return cli_main(list(argv))
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)


def train_in_process(*argv: str) -> int:
    """``populora train ARGV`` in the test's process (``cli_in_process``), for a run that only produces a store."""
    return cli_in_process("train", *argv)


def paused_train_cmd(marker: Path, step: int, *args: str, after: str = "step") -> list[str]:
    """``populora train ARGS`` that pauses after ``Trainer.<after>`` returns at ``step`` (``"step"``: the step is
    done, checkpointed and in MLflow; ``"save_checkpoint"``: on disk only), once ``marker`` is written."""
    return [sys.executable, "-c", _PAUSED_TRAIN, after, str(step), str(marker), "train", *args]


def wait_for_marker(marker: Path, proc, timeout: float = 600) -> None:
    """Wait until the paused trainer wrote ``marker``; fail with its output at once if it ended instead."""
    def reached():
        if proc.poll() is not None:
            raise AssertionError(f"the trainer ended (exit {proc.returncode}) before pausing:\n{(proc.communicate()[0] or '')[-3000:]}")
        return marker.exists()

    wait_for(reached, timeout, f"the trainer to pause ({marker.name})", interval=0.2)


# ====================================================================== Streamlit's AppTest (tests/ui)
# A stand-in job that holds a slot of the queue until it is stopped (SIGINT, exit 130 as a stopped job's): what
# waits behind it stays queued for as long as the test needs, whatever the machine's speed. The fixtures that
# start it stop every job at the end (one_slot_queue, tests/ui/headless.ui_server); the hour is only a backstop.
HOLD = "import time\ntry:\n    time.sleep(3600)\nexcept KeyboardInterrupt:\n    raise SystemExit(130)\n"
VIEWS = ROOT / "populora" / "ui" / "views"


@pytest.fixture()
def one_slot_queue(tmp_path, monkeypatch):
    """A fresh store, jobs dir and one-slot queue in ``tmp_path`` (the pages and the jobs they start read the same
    ones); {"uri", "dir"}. No progress reporter made in the test outlives it; every job it started is stopped."""
    import streamlit as st

    from populora.platform.jobs import jobs
    from populora.platform import progress

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_QUEUE_DIR", str(tmp_path / "queue"))
    monkeypatch.setenv("POPULORA_MAX_PARALLEL_JOBS", "1")
    monkeypatch.setattr(progress, "_active", None)
    st.cache_data.clear()
    yield {"uri": uri, "dir": tmp_path}
    for job in jobs.list_jobs(tmp_path / "jobs"):  # never leave a process behind
        jobs.stop(job, timeout_s=10)


def app_page(name: str, timeout: float = 90, **query):
    """The page ``populora/ui/views/<name>.py`` run once in Streamlit's ``AppTest`` with ``query`` as its address's
    query (e.g. ``run=ID``), Streamlit's caches cleared first (each page reads the store anew); fails on any
    exception the page raised."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / f"{name}.py"), default_timeout=timeout)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def store_page(monkeypatch, uri: str, name: str, jobs_dir: Path | None = None, **query):
    """``app_page`` on the MLflow store ``uri`` (and the jobs dir ``jobs_dir``), the env set for the test only: the
    one page runner of the pages' tests over a made store (test_ui_cockpit, test_ui_ratings, test_related_baselines)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    if jobs_dir is not None:
        monkeypatch.setenv("POPULORA_JOBS_DIR", str(jobs_dir))
    return app_page(name, **query)


@pytest.fixture(scope="session", autouse=True)
def streamlit_component_scan_once():
    """Every ``AppTest`` scans the metadata of every installed distribution for Streamlit v2 components (a new
    ``BidiComponentManager`` per AppTest: streamlit 1.67 testing/v1/app_test.py ``_run``, components/v2/
    manifest_scanner.py): ~0.5 s of CPU each, a fifth of test_ui_pages' CPU (py-spy). What is installed does not
    change during a test session, so the scan runs once per session here; the result is the same list."""
    if "streamlit" not in sys.modules:  # only sessions that imported Streamlit (the UI tests do at collection) build AppTests
        yield
        return
    from streamlit.components.v2 import manifest_scanner as scanner

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scanner, "scan_component_manifests", functools.cache(scanner.scan_component_manifests))
        yield


@pytest.fixture(scope="session")
def tiny_model():
    """A tiny randomly initialised model with the embedded model's tokenizer (loaded once per session)."""
    from populora.platform.model.models import load_base, resolve_source

    return load_base(resolve_source("embedded"), tiny_random=True)


@pytest.fixture
def tiny_backend(tiny_model):
    from populora.platform.backends import LoraSpec, PeftBackend

    model, tok = tiny_model
    backend = PeftBackend(model, tok, LoraSpec(rank=4))
    yield backend
    if backend.model is not None:  # unwrap so the next test gets a clean base
        backend.model.unload()


# ====================================================================== one local Ray instance for the Ray tests
# Starting Ray costs ~10-15 s of CPU (GCS, raylet, agents, idle workers) and each actor process ~9 s more (torch and
# transformers imported anew): consecutive tests that use a local Ray share one instance, started by the first and
# shut down once the next test is outside the Ray unit (or brings its own cluster, test_ray_jobs), see
# pytest_runtest_teardown below. Each test must end the actors it started (backend.shutdown(), trainer.close()).


def start_local_ray():
    """The shared local Ray instance (2 CPUs), started if this process has none."""
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'populora-platform[ray]'")
    return init_ray("local", num_cpus=2)  # the platform's own start: its retries and health checks on a loaded machine


@pytest.fixture
def local_ray():
    """The shared local Ray; after the test, waits until the CPUs its actors reserved are free again (a test that
    left actors running fails here, and the next test gets a fresh instance)."""
    ray = start_local_ray()
    free = ray.available_resources().get("CPU", 0)
    yield ray
    try:
        wait_for(lambda: ray.available_resources().get("CPU", 0) >= free, 60, "the test's Ray actors to end",
                 interval=0.2, detail=lambda: f": {ray.available_resources().get('CPU', 0)} of {free} CPUs free")
    except AssertionError:
        ray.shutdown()
        raise


@pytest.hookimpl(trylast=True)  # after the test's fixtures are torn down (its actors ended)
def pytest_runtest_teardown(item, nextitem):
    if "ray" not in sys.modules or not sys.modules["ray"].is_initialized():
        return
    if nextitem is None or work_unit(nextitem.nodeid) != "ray" or "ray_cluster" in nextitem.fixturenames:
        sys.modules["ray"].shutdown()


# ====================================================================== parallel workers (pytest-xdist)
# `make test` runs `-n 2 --dist loadgroup`. The unit of work a worker gets is a test file, so a module-scoped
# fixture (a trained store, a sandbox pool, a local Ray) is built once, except:
# - every test that starts Ray is one unit: a bare ray.init() joins the newest cluster on the machine
#   (/tmp/ray), so two workers' Ray tests must never overlap;
# - the tests of SPLIT files (long, independent, no module-scoped fixture) go one by one, to either worker.
# (xdist's own loadgroup reads xdist_group marks by renaming node ids, which pytest 9 no longer allows: the
# units are made here, from the node ids, by pytest_xdist_make_scheduler.)
RAY_JOBS = "tests/platform/test_ray_jobs.py"  # a Ray cluster of its own (ray start), not the shared local instance
RAY_TESTS = ("tests/platform/test_ray.py", RAY_JOBS, "tests/platform/test_data_parallel.py",
             "tests/training/test_periodic_eval.py::test_members_on_ray_workers_are_scored_as_on_the_local_path",
             "tests/evaluation/test_eval_math_suite.py::test_grading_in_a_ray_actor_gives_the_main_threads_verdicts",
             "tests/training/test_learns.py::test_planted_environment_learns_on_ray_data_parallel")
SPLIT = ("tests/training/test_training_loop.py", "tests/training/test_run_lifecycle.py", "tests/ui/test_ui_jobs.py",
         "tests/training/test_sweep.py", "tests/training/test_periodic_eval.py", "tests/platform/test_concurrent_writers.py",
         "tests/evaluation/test_eval_code.py", "tests/evaluation/test_eval_fetch_report.py", "tests/evaluation/test_eval_data.py",
         # the fault suite: each test a run of its own (a full disk, a damaged checkpoint), either worker
         "tests/faults/test_disk_full.py", "tests/faults/test_checkpoint_damage.py", "tests/faults/test_ui_resume_step.py",
         "tests/faults/test_liveness.py", "tests/faults/test_restart.py", "tests/faults/test_oom.py",
         "tests/training/test_learns.py")  # a planted-environment training per backend: each its own unit
# The units workers take first, in this order (node-id prefixes; a unit is placed at its first match): the longest
# by the --durations=0 profile of a full -n 2 run, so that no long unit starts late while the other worker idles.
# (The 2026-12-01 wave's long ones, compute budget, run life, the kill -9 fault tests, were left to the end: the
# last ~40 s unit started when the other worker had only doctests left.)
# The other units follow, the most tests first. Update it when a test becomes one of the long ones.
LONGEST_FIRST = ("tests/platform/test_ray_jobs.py",  # the Ray unit
                 "tests/training/test_embedded_model.py", "tests/ui/test_ui_run_walk.py",  # ~140 s in CI (2026-12-07)
                 "tests/training/test_learns.py::test_planted_environment_learns_on_multilora",  # ~120 s
                 "tests/ui/test_ui_run_life.py",
                 "tests/training/test_compute_budget.py",  # one unit (a file): ~105 s with two matched pairs, one since #64
                 "tests/training/test_fork.py",
                 "tests/evaluation/test_eval_cli.py",
                 "tests/ui/test_ui_league.py",
                 "tests/training/test_sweep.py::test_sweep_of_two_mixes_two_seeds_with_baselines_end_to_end",
                 "tests/ui/test_ui_baseline_flow.py", "tests/evaluation/test_oracle_eval.py", "tests/ui/test_ui_pages.py",
                 "tests/training/test_periodic_eval.py::test_a_run_with_eval_every_1", "tests/ui/test_ui_job_lifecycle.py",
                 "tests/ui/test_ui_scale.py",
                 "tests/evaluation/test_eval_math_suite.py",  # lm-eval's CLI ~35 s
                 "tests/evaluation/test_export.py", "tests/platform/test_mlflow_server.py",
                 "tests/platform/test_concurrent_writers.py::test_four_trainings_at_once",
                 "tests/ui/test_ui_jobs.py::test_compare_page_launches_an_evaluation",
                 "tests/training/test_run_lifecycle.py::test_ctrl_c_mid_run",
                 "tests/faults/test_restart.py::test_a_trainer_killed_once",
                 "tests/evaluation/test_eval_fetch_report.py::test_embedded_model_evaluates_an_adapter",
                 "tests/training/test_training_loop.py::test_kill_9_then_resume",
                 "tests/platform/test_sandbox_unprivileged.py",
                 "tests/faults/test_liveness.py::test_a_kill_9_train", "tests/platform/test_docker_files.py",
                 "tests/test_wheel.py",  # build, a fresh venv, then train, eval and ui from it: one after the other
                 "tests/evaluation/test_eval_code.py::test_our_pass_at_1_equals_evalplus_evaluate",
                 "tests/training/test_operator_stats.py", "tests/ui/test_ui_ratings.py", "tests/ui/test_ui_eval_curves_browser.py",
                 "tests/ui/test_ui_jobs.py::test_a_stopped_evaluation_job_resumes",
                 "tests/training/test_azr_differential.py",
                 "tests/training/test_paper_figures.py",  # a synthetic 2-seed sweep, figures in 3 formats
                 "tests/platform/test_gpu_shapes.py",
                 "tests/evaluation/test_eval_code.py::test_canonical_solutions_pass_through_our_pipeline")


def work_unit(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to (tests of one unit run in order on one worker).

    >>> work_unit("tests/platform/test_ray.py::test_x"), work_unit("tests/ui/test_ui_jobs.py::test_y")
    ('ray', 'tests/ui/test_ui_jobs.py::test_y')
    >>> work_unit("tests/ui/test_ui_pages.py::test_z[runs]")
    'tests/ui/test_ui_pages.py'
    """
    if nodeid.startswith(RAY_TESTS):
        return "ray"
    path = nodeid.split("::")[0]
    return nodeid if path in SPLIT else path


def unit_order(nodeids: list[str]) -> list[str]:
    """``nodeids`` grouped by work unit, the units in the order the workers take them: those with a LONGEST_FIRST
    prefix in its order, then the others, the most tests first; tests keep their order within a unit.

    >>> unit_order(["tests/a.py::x", "tests/b.py::y", "tests/b.py::z", "tests/ui/test_ui_run_life.py::t"])
    ['tests/ui/test_ui_run_life.py::t', 'tests/b.py::y', 'tests/b.py::z', 'tests/a.py::x']
    """
    units: dict[str, list[str]] = {}
    for nodeid in nodeids:
        units.setdefault(work_unit(nodeid), []).append(nodeid)
    if "ray" in units:  # the Ray-jobs cluster last, so the shared local Ray of the others starts once
        units["ray"].sort(key=lambda n: n.startswith(RAY_JOBS))

    def rank(unit: str) -> tuple[int, int]:
        listed = [i for i, prefix in enumerate(LONGEST_FIRST) if any(n.startswith(prefix) for n in units[unit])]
        return min(listed, default=len(LONGEST_FIRST)), -len(units[unit])

    return [nodeid for unit in sorted(units, key=rank) for nodeid in units[unit]]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown (and fine) without xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # only with xdist, which calls this hook

    config.option.loadscopereorder = False  # the queue keeps the workers' order (unit_order), not "most tests first"

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _reschedule(self, node) -> None:
            # A worker takes its next unit only when down to its last test (which it runs once it knows the next
            # one). xdist's own rule (at most 2 left) queues up to two units behind a long test, where they wait
            # while the other worker idles.
            if self.workqueue and not node.shutting_down and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return Units(config, log)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # only where workers share the load; a plain run keeps file order
        rank = {nodeid: i for i, nodeid in enumerate(unit_order([item.nodeid for item in items]))}
        items.sort(key=lambda item: rank[item.nodeid])
