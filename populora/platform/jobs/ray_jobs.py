"""Training runs (and evaluations) submitted as Ray Jobs: the UI uses this when the config names a Ray cluster.

A Ray Job runs its entrypoint on the cluster's head node, so the trainer (the Ray driver) keeps running when the
UI's machine goes away, and Ray's own dashboard shows it. What travels with it:

- the validated config, as ``config.yaml`` in a working dir Ray uploads (``runtime_env.working_dir``); the
  entrypoint is a fixed string (``python -m populora.cli train --config config.yaml --quiet``): no user-typed
  value is ever part of the shell command Ray runs;
- environment variables (``MLFLOW_TRACKING_URI``: the run must write where the UI reads, so on a real cluster
  that is an MLflow server, not a sqlite file on the UI's disk).

The cluster's Python must have populora installed (the docker images do). A cluster using token auth needs its
token here too (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token), as for ``ray job submit``. ``stop`` asks Ray to stop the job:
Ray sends SIGTERM, which the trainer turns into a clean stop (run tagged ``stopped``, ended KILLED in MLflow).

Ray's SDK sends that token to whatever address it is given, so the addresses come from the operator, never from
a form: ``POPULORA_RAY_ADDRESSES`` (comma separated) and/or the file ``POPULORA_RAY_ADDRESSES_FILE`` (one per
line, ``#`` comments). Every client is made through ``client()``, which refuses any other address.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from populora.platform.store import runlayout

ENTRYPOINT = "python -m populora.cli train --config config.yaml --quiet"
# what a job of each kind runs (``jobs.launch_training`` / ``jobs.launch_eval``): fixed strings, the config in the file
ENTRYPOINTS = {"train": ENTRYPOINT, "eval": "python -m populora.cli eval --config config.yaml"}
# Ray's job statuses -> ours (populora.platform.jobs.jobs.Job.status)
STATUSES = {"PENDING": "starting", "RUNNING": "running", "SUCCEEDED": "finished", "FAILED": "failed",
            "STOPPED": "stopped"}


class RayJobError(RuntimeError):
    pass


ENV_ADDRESSES = "POPULORA_RAY_ADDRESSES"
ENV_ADDRESSES_FILE = "POPULORA_RAY_ADDRESSES_FILE"


def allowed_addresses() -> list[str]:
    """The Ray clusters the operator lets this UI submit to (and send the cluster token to), in their order."""
    found = [a.strip() for a in os.environ.get(ENV_ADDRESSES, "").split(",")]
    path = os.environ.get(ENV_ADDRESSES_FILE)
    if path:
        try:
            found += [line.split("#", 1)[0].strip() for line in Path(path).read_text().splitlines()]
        except OSError as err:
            raise RayJobError(f"{ENV_ADDRESSES_FILE}={path!r} cannot be read: {err}") from err
    return list(dict.fromkeys(a for a in found if a))


def check_allowed(ray_address: str) -> str:
    """``ray_address`` if the operator allowed it, else RayJobError saying how to allow it."""
    allowed = allowed_addresses()
    if ray_address not in allowed:
        raise RayJobError(f"ray.address={ray_address!r} is not one of the Ray clusters this UI may submit to "
                          f"({', '.join(allowed) or 'none set'}): the operator lists them in {ENV_ADDRESSES} "
                          f"(comma separated) or in the file {ENV_ADDRESSES_FILE}")
    return ray_address


def jobs_address(ray_address: str) -> str:
    """Where the Jobs API of the cluster ``ray.address`` names is: Ray resolves ``auto``, ``host:port``,
    ``ray://host:10001`` and ``http://host:8265`` itself; ``local`` has no cluster to submit to."""
    if ray_address == "local":
        raise RayJobError("ray.address=local starts Ray inside the trainer: there is no cluster to submit a Ray Job to "
                          "(use auto, ray://HOST:10001 or http://HOST:8265)")
    return ray_address


def _use_token_if_available() -> None:
    """Clusters started with a token (Ray's default for ``ray start`` when one exists) reject requests without
    it. Like ``ray start``, turn token auth on when RAY_AUTH_MODE is unset and a token is at hand (RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token auth
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


@functools.lru_cache(maxsize=8)
def client(address: str):
    """A JobSubmissionClient for ``address`` (cached: creating one is an HTTP round trip); only for an address
    the operator allowed, since the client may send the cluster's token to it."""
    check_allowed(jobs_address(address))  # before Ray is imported or any connection is made
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as err:
        raise RayJobError("Ray Jobs need Ray with its dashboard: pip install 'populora-platform[ray]'") from err
    _use_token_if_available()
    try:
        return JobSubmissionClient(jobs_address(address))
    except Exception as err:  # ConnectionError, AuthenticationError, RuntimeError from its version check
        raise RayJobError(f"cannot reach the Ray Jobs API for ray.address={address!r}: {err}. Is the cluster "
                          "running with its dashboard (ray start --head --dashboard-host=0.0.0.0)?") from err


def submit(address: str, working_dir: str, submission_id: str, env: dict[str, str], name: str = "",
           kind: str = "train") -> str:
    """Submit the trainer (``kind`` eval: the evaluation) on ``working_dir/config.yaml``; returns Ray's
    submission id."""
    runtime_env = {"working_dir": working_dir,
                   # the trainer needs time to tag and end its MLflow run after Ray's SIGTERM
                   "env_vars": {**env, "RAY_JOB_STOP_WAIT_TIME_S": str(STOP_WAIT_S)}}
    import tenacity

    # Ray's job head answers 500 "No available agent to submit job, please try again later." while no job agent
    # has registered yet (ray 2.60, dashboard/modules/job/job_head.py submit_job: get_target_agent timed out),
    # e.g. on a cluster that just started on a loaded machine. The job was not created, so trying again with the
    # same submission id is safe; any other error is final.
    retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(lambda e: AGENT_NOT_READY in str(e)),
                                 wait=tenacity.wait_fixed(2.0), stop=tenacity.stop_after_delay(AGENT_WAIT_S),
                                 reraise=True)
    try:
        return retrying(client(address).submit_job, entrypoint=ENTRYPOINTS[kind], runtime_env=runtime_env,
                        submission_id=submission_id, metadata={runlayout.RAY_JOB_NAME: name})
    except RayJobError:
        raise
    except Exception as err:  # the SDK raises plain RuntimeError for HTTP errors
        if AGENT_NOT_READY in str(err):
            raise RayJobError(
                f"Ray rejected the job: no job agent registered on the head within {AGENT_WAIT_S:.0f} s ({err}). "
                "A head's agent registers only once its HTTP server is listening, on port "
                f"{DEFAULT_AGENT_PORT} unless `ray start --dashboard-agent-listen-port` says otherwise; any other "
                "Ray on that machine (a local ray.init included) holds that port first. Restart the head with "
                "--dashboard-agent-listen-port=<a free port>, or see the head's "
                "session_latest/logs/dashboard_agent.log") from err
        raise RayJobError(f"Ray rejected the job: {err}") from err


AGENT_NOT_READY = "No available agent to submit job"
STOP_WAIT_S = 30  # Ray's grace between its SIGTERM and SIGKILL of a stopped job (job_supervisor.py, ray 2.60)
AGENT_WAIT_S = 120.0
# ray/_private/ray_constants.py DEFAULT_DASHBOARD_AGENT_LISTEN_PORT (ray 2.60); when the agent cannot bind it, the
# agent stays alive without HTTP and never writes its address to the GCS (dashboard/agent.py run), so the job head
# finds no agent for as long as the cluster lives
DEFAULT_AGENT_PORT = 52365


def status(address: str, submission_id: str) -> str:
    try:
        return STATUSES.get(str(client(address).get_job_status(submission_id).value), "lost")
    except Exception:  # cluster gone or job unknown: say so rather than crash a UI page
        return "lost"


def logs(address: str, submission_id: str) -> str | None:
    try:
        return client(address).get_job_logs(submission_id)
    except Exception:
        return None


def stop(address: str, submission_id: str) -> None:
    try:
        client(address).stop_job(submission_id)
    except Exception as err:
        raise RayJobError(f"could not stop Ray job {submission_id}: {err}") from err
