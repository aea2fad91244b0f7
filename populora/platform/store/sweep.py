"""What a sweep leaves in MLflow and on disk, shared by the sweep driver (training), ``eval/report --sweep`` and
the UI: the reads of a sweep's runs. The tag names (``populora.sweep``, ``.sweep_run``, ``.sweep_config``,
``.sweep_seed``) live in ``runlayout`` with every other name of the run layout; the driver sets them with
``runlayout.sweep_tags`` as soon as a run's id is known, and links each population run to its seed's baseline
with ``populora.baseline_run`` (the link ``--set baseline_run=...`` makes for a single run). On disk, the driver's
dir of a sweep (``sweeps_dir() / <sweep id>``) holds its plan (``PLAN_FILE``), the job dir of each planned run
started so far (``JOBS_FILE``) and those jobs' dirs (``jobs/``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from populora.platform.store import runlayout as rl

BASELINE_LABEL = rl.SWEEP_BASELINE
FINISHED = rl.MLFLOW_STATUS[rl.FINISHED]  # MLflow's status of a run that ran to its end
PLAN_FILE = "plan.json"  # in a sweep's dir: its planned runs ([{key, config, seed, baseline, name, ...}])
JOBS_FILE = "jobs.json"  # in a sweep's dir: {planned run's key: the dir of the job last started for it}


def run_key(label: str, seed: int) -> str:
    """The planned run's unique key within its sweep.

    >>> run_key("population.teachers=1", 3)
    'population.teachers=1|seed=3'"""
    return f"{label}|seed={seed}"


def sweeps_dir() -> Path:
    """``POPULORA_SWEEPS_DIR`` or ``.populora/sweeps`` in the working dir: one folder per sweep (plan, jobs)."""
    return Path(os.environ.get("POPULORA_SWEEPS_DIR") or Path.cwd() / ".populora" / "sweeps")


def read_plan(sweep_dir: str | Path) -> list[dict]:
    """The planned runs in a sweep's dir (``PLAN_FILE``); [] if it has none (or it cannot be read)."""
    plan = _read_json(Path(sweep_dir) / PLAN_FILE)
    return [r for r in plan if isinstance(r, dict)] if isinstance(plan, list) else []


def read_jobs(sweep_dir: str | Path) -> dict[str, str]:
    """{planned run's key: its job dir} in a sweep's dir (``JOBS_FILE``); {} before the driver started any."""
    jobs = _read_json(Path(sweep_dir) / JOBS_FILE)
    return jobs if isinstance(jobs, dict) else {}


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _parent_runs(client, filter_string: str, order_by: list[str] | None = None) -> list:
    exps = [e.experiment_id for e in client.search_experiments()]
    if not exps:
        return []
    runs = client.search_runs(exps, filter_string=filter_string, max_results=5000, order_by=order_by)
    return [r for r in runs if rl.PARENT not in r.data.tags]


def find_runs(client, sweep_id: str) -> list:
    """Every parent run tagged with ``sweep_id``, oldest first (a key can have several: a failed run, then its retry)."""
    return _parent_runs(client, f"tags.`{rl.SWEEP}` = '{sweep_id}'", ["attributes.start_time ASC"])


def latest_by_key(runs: list) -> dict[str, object]:
    """One run per planned key: a FINISHED one if any, else the newest."""
    out: dict[str, object] = {}
    for r in runs:
        key = r.data.tags.get(rl.SWEEP_RUN)
        if key and (key not in out or out[key].info.status != FINISHED):
            out[key] = r
    return out


def config_and_seed(run) -> tuple[str, int]:
    """(configuration label, seed) of a sweep's run, from its tags."""
    tags = run.data.tags
    return tags.get(rl.SWEEP_CONFIG, "default"), int(tags.get(rl.SWEEP_SEED, 0))


def list_sweeps(client) -> dict[str, list]:
    """{sweep id: its parent runs} over the whole store (for the Runs page and ``eval --sweep``)."""
    out: dict[str, list] = {}
    for r in _parent_runs(client, f"tags.`{rl.SWEEP}` != ''"):
        out.setdefault(r.data.tags[rl.SWEEP], []).append(r)
    return out
