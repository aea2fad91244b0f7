"""Runs submitted as Ray Jobs (what the UI's Launch page does when the config names a Ray cluster), against a
real single-node Ray cluster started by the test (`ray start --head` with its dashboard, 2 CPUs)."""

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import yaml

pytest.importorskip("ray.job_submission", reason="Ray Jobs need the optional extra: pip install 'populora-platform[ray]'")

from conftest import wait_for  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from populora.platform.jobs import jobs, ray_jobs, reaper
from populora.platform.store import runlayout

pytestmark = pytest.mark.timeout(900)
# Ray starts its workers at niceness 15 (ray_config_def.h worker_niceness); the platform's local instance starts them
# at 0 (backends/ray.py LOCAL_SYSTEM_CONFIG: a data-parallel test beside two busy nice-0 processes took 277 s at 15,
# 98 s at 0), and so does this module's `ray start` cluster, through its environment
RAY_START_ENV = {"RAY_worker_niceness": "0"}

# 1000 steps: many minutes, so the run is still going when the test stops it after its first step (50 steps could
# all finish between two polls on a fast machine); step-0 seeding of one round of 2 proposals per kind (the default
# costs ~7 s of CPU more, and the tiny model proposes nothing valid either way)
TINY = {"name": "ray-job", "steps": 1000, "model": {"tiny_random": True, "lora_rank": 4},
        "tasks": {"max_new_tokens_propose": 24, "max_new_tokens_solve": 8, "tasks_per_teacher": 2, "seed_buffer": 2,
                  "seed_rounds": 1},
        "population": {"teachers": 1, "students": 1},
        "ray": {"address": "auto", "cpus_per_model_worker": 0.5, "cpus_per_sandbox_worker": 0.5, "sandbox_workers": 1}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_cluster(ray_tmp: Path, gcs_port: int) -> None:
    """End this cluster's processes only: those naming its temp dir or its GCS port, and all they started (the
    raylet's workers, the job supervisors and their drivers). Not ``ray stop``, which ends every Ray process on the
    machine: the paper path's trainer beside this suite in `make test` (tests/vllm_real) lost its GCS so."""
    def ours(p: psutil.Process) -> bool:
        try:
            return any(str(ray_tmp) in a or a.endswith(f":{gcs_port}") or a == f"--gcs_server_port={gcs_port}"
                       for a in p.cmdline())
        except psutil.Error:
            return False

    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    roots = [p for p in psutil.process_iter() if p.pid not in me and ours(p)]
    procs = {}
    for root in roots:
        try:
            procs.update({p.pid: p for p in (root, *root.children(recursive=True))})
        except psutil.Error:
            continue
    # 2 s, then SIGKILL: after SIGTERM the raylet, the GCS and the runtime-env agent were seen still up 13-16 s later
    # (the 15 s this waited were all spent so), and this cluster's state is thrown away with its temp dir
    reaper.end(list(procs.values()), grace=2)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A head node with the Jobs API; its processes get this venv's python first on PATH, as a cluster's image
    would have populora installed. Ray turns token auth on when ~/.ray/auth_token exists (any earlier local
    ray.init writes one): then the client must find and send it, as the UI's would."""
    tmp = tmp_path_factory.mktemp("ray")
    # Ray's session dir holds AF_UNIX sockets (at most 107 bytes of path): pytest's tmp path under an xdist worker
    # (.../pytest-N/popen-gwK/ray0/r/session_<date>_<pid>/sockets/plasma_store) is longer, so a short dir of its own
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    ray_bin = Path(sys.executable).parent / "ray"
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", ray_jobs.ENV_ADDRESSES)}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "RAY_USAGE_STATS_ENABLED": "0",
           **RAY_START_ENV}
    # every port a head takes by default is its own here: left at Ray's 52365, the job agent's HTTP port can be held
    # first by a local ray.init of another test on the other xdist worker, and then this head's agent never
    # registers (CI, 2026-12-07: "No available agent to submit job" for 120 s, both tests of this module); the Ray
    # client server's 10001 by a cluster the developer runs on this machine
    gcs, dash, agent, client_port = _free_port(), _free_port(), _free_port(), _free_port()
    start = [str(ray_bin), "start", "--head", f"--port={gcs}", "--num-cpus=2", "--include-dashboard=true",
             "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--dashboard-agent-listen-port={agent}",
             f"--ray-client-server-port={client_port}", f"--temp-dir={ray_tmp}", "--disable-usage-stats"]
    started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=180, cwd=tmp)
    assert started.returncode == 0, f"ray start failed ({started.returncode}):\n{started.stdout[-3000:]}\n{started.stderr[-3000:]}"
    address = f"http://127.0.0.1:{dash}"
    os.environ[ray_jobs.ENV_ADDRESSES] = address  # as the operator allows this cluster
    try:
        deadline = time.time() + 60
        while True:  # the Jobs API comes up a little after `ray start` returns
            try:
                ray_jobs.client.cache_clear()
                ray_jobs.client(address).list_jobs()
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(1)
        yield address
    finally:
        ray_jobs.client.cache_clear()
        stop_cluster(ray_tmp, gcs)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _supervisor_log(submission_id: str) -> str:
    """Ray's job supervisor log (how it stopped the entrypoint: gracefully, or SIGKILL after its grace), read before
    the module's cluster and its temp dir go."""
    logs = glob.glob(f"/tmp/ray*/session_*/logs/jobs/supervisor-{submission_id}.log")
    return "\n".join(Path(f).read_text()[-3000:] for f in logs) or "(not found)"


def test_run_submitted_as_a_ray_job_trains_logs_to_mlflow_and_stops_cleanly(ray_cluster, tmp_path):
    store = f"sqlite:///{tmp_path}/mlflow.db"
    job = jobs.launch_training(yaml.safe_dump(TINY), name="ray-job", env={"MLFLOW_TRACKING_URI": store},
                               root=tmp_path / "jobs", ray_address=ray_cluster)
    assert job.ray_address == ray_cluster
    assert (Path(job.dir) / "ray_workdir" / "config.yaml").is_file()
    # found again from disk, as the UI does on every refresh
    assert [j.id for j in jobs.list_jobs(tmp_path / "jobs")] == [job.id]
    run_id = wait_for(lambda: job.run_id, 400, "the run id in the Ray job's log", 1, lambda: ":\n" + job.log_tail())
    client = MlflowClient(store)
    wait_for(lambda: client.get_run(run_id).data.metrics.get(runlayout.STEP_SENTINEL, 0) >= 1, 400, "a finished step", 1)
    assert job.status == "running"
    assert jobs.stop(job) == "stopped"
    run = client.get_run(run_id)
    supervisor = _supervisor_log(job.id)
    why = f"the job's log:\n{job.log_tail(200)}\nRay's supervisor (did its grace run out?):\n{supervisor}"
    # ended stopped: by the trainer, which caught Ray's SIGTERM, or, where Ray's grace ran out first (a fresh clone
    # under load once left the run RUNNING so), by jobs.stop, which says so in the run's note
    assert (run.info.status, run.data.tags.get(runlayout.STATUS)) == ("KILLED", "stopped"), why
    killed_by_ray = "force-killed with SIGKILL" in supervisor  # its warning (dashboard/modules/job/job_supervisor.py, ray 2.60)
    assert ("Ray's grace" in run.data.tags[runlayout.NOTE]) == killed_by_ray, why
    assert "run " + run_id in job.log_tail(200)


def test_evaluation_submitted_as_a_ray_job_writes_its_results(ray_cluster, tmp_path):
    """``populora eval`` as a Ray Job (jobs.launch_eval with a cluster address): the cluster runs the evaluation
    entry point on the uploaded config and the results land where the config says."""
    import json

    config = {"base_only": True, "model": {"tiny_random": True}, "benchmarks": "gsm8k", "limit": 1,
              "out": str(tmp_path / "eval"), "generation": {"max_new_tokens": 4}}
    job = jobs.launch_eval(yaml.safe_dump(config), name="ray-eval", root=tmp_path / "jobs", ray_address=ray_cluster)
    assert job.kind == "eval" and (Path(job.dir) / "ray_workdir" / "config.yaml").is_file()
    # not "lost": status reads lost while the head cannot answer for a moment (ray_jobs.status), then recovers
    wait_for(lambda: job.status in ("finished", "failed", "stopped"), 400, "the evaluation job to end", 2,
             lambda: ":\n" + (job.log_tail() or ""))
    assert job.status == "finished", job.log_tail()
    data = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert data["results"]["base model"]["gsm8k"]["n"] == 1


def test_unreachable_cluster_is_a_clear_error_and_leaves_no_job(tmp_path, monkeypatch):
    dead = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv(ray_jobs.ENV_ADDRESSES, dead)
    ray_jobs.client.cache_clear()
    with pytest.raises(ray_jobs.RayJobError, match="Ray"):
        jobs.launch_training(yaml.safe_dump(TINY), env={}, root=tmp_path / "jobs", ray_address=dead)
    assert jobs.list_jobs(tmp_path / "jobs") == []
    assert list((tmp_path / "jobs").iterdir()) == []


def test_local_ray_has_no_cluster_to_submit_to(tmp_path):
    with pytest.raises(ray_jobs.RayJobError, match="ray.address=local"):
        jobs.launch_training(yaml.safe_dump(TINY), env={}, root=tmp_path / "jobs", ray_address="local")


class _HeadWithoutAgentYet:
    """Ray 2.60's JobSubmissionClient against a head whose job agent has not registered: ``submit_job`` raises
    RuntimeError("Request failed with status code 500: No available agent to submit job, please try again
    later.") (dashboard/modules/job/job_head.py answers 500 with that text; the SDK's _raise_error wraps it)."""

    def __init__(self, not_ready: int, other: str | None = None):
        self.not_ready, self.other, self.calls = not_ready, other, []

    def submit_job(self, **kwargs):
        self.calls.append(kwargs["submission_id"])
        if self.other:
            raise RuntimeError(f"Request failed with status code 400: {self.other}.")
        if len(self.calls) <= self.not_ready:
            raise RuntimeError("Request failed with status code 500: No available agent to submit job, please try again later..")
        return kwargs["submission_id"]


def test_submit_waits_for_a_job_agent_and_gives_up_on_other_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_jobs, "AGENT_WAIT_S", 20.0)
    head = _HeadWithoutAgentYet(not_ready=2)
    monkeypatch.setattr(ray_jobs, "client", lambda address: head)
    assert ray_jobs.submit("http://head:8265", str(tmp_path), "sub-1", {}) == "sub-1"
    assert head.calls == ["sub-1"] * 3  # same submission id each time: the job was never created before

    head = _HeadWithoutAgentYet(not_ready=0, other="entrypoint must be a string")
    monkeypatch.setattr(ray_jobs, "client", lambda address: head)
    with pytest.raises(ray_jobs.RayJobError, match="Ray rejected the job: .*entrypoint must be a string"):
        ray_jobs.submit("http://head:8265", str(tmp_path), "sub-2", {})
    assert head.calls == ["sub-2"]  # not retried

    monkeypatch.setattr(ray_jobs, "AGENT_WAIT_S", 1.0)
    head = _HeadWithoutAgentYet(not_ready=100)
    monkeypatch.setattr(ray_jobs, "client", lambda address: head)
    with pytest.raises(ray_jobs.RayJobError, match="No available agent") as raised:
        ray_jobs.submit("http://head:8265", str(tmp_path), "sub-3", {})
    # names the likely cause (another Ray holding the agent's port) and the fix
    assert "52365" in str(raised.value) and "--dashboard-agent-listen-port" in str(raised.value)
