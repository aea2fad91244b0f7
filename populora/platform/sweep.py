"""What a sweep leaves in MLflow, shared by the sweep driver (training), ``eval/report --sweep`` and the UI.

Every run of a sweep carries these tags (set by the driver as soon as the run's id is known):

    populora.sweep         the sweep id (``sw-<hash of the plan>`` unless named with --id)
    populora.sweep_run     the planned run's key: "<config label>|seed=<s>" (unique within the sweep)
    populora.sweep_config  the config label: the grid overrides, e.g. "population.students=1 population.teachers=1",
                           or "baseline" for the compute-matched single-agent baseline of each seed
    populora.sweep_seed    the run's seed

and a population run's ``populora.baseline_run`` names the baseline run of its seed (the link ``--set
baseline_run=...`` makes for a single run).
"""

from __future__ import annotations

import os
from pathlib import Path

SWEEP_TAG = "populora.sweep"
SWEEP_RUN_TAG = "populora.sweep_run"
SWEEP_CONFIG_TAG = "populora.sweep_config"
SWEEP_SEED_TAG = "populora.sweep_seed"
BASELINE_LABEL = "baseline"


def run_key(label: str, seed: int) -> str:
    """The planned run's unique key within its sweep.

    >>> run_key("population.teachers=1", 3)
    'population.teachers=1|seed=3'"""
    return f"{label}|seed={seed}"


def sweeps_dir() -> Path:
    """``POPULORA_SWEEPS_DIR`` or ``.populora/sweeps`` in the working dir: one folder per sweep (plan, jobs)."""
    return Path(os.environ.get("POPULORA_SWEEPS_DIR") or Path.cwd() / ".populora" / "sweeps")


def find_runs(client, sweep_id: str) -> list:
    """Every parent run tagged with ``sweep_id``, oldest first (a key can have several: a failed run, then its retry)."""
    exps = [e.experiment_id for e in client.search_experiments()]
    if not exps:
        return []
    runs = client.search_runs(exps, filter_string=f"tags.`{SWEEP_TAG}` = '{sweep_id}'", max_results=5000,
                              order_by=["attributes.start_time ASC"])
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags]


def latest_by_key(runs: list) -> dict[str, object]:
    """One run per planned key: a FINISHED one if any, else the newest."""
    out: dict[str, object] = {}
    for r in runs:
        key = r.data.tags.get(SWEEP_RUN_TAG)
        if key and (key not in out or out[key].info.status != "FINISHED"):
            out[key] = r
    return out


def list_sweeps(client) -> dict[str, list]:
    """{sweep id: its parent runs} over the whole store (for the Runs page and ``eval --sweep``)."""
    exps = [e.experiment_id for e in client.search_experiments()]
    if not exps:
        return {}
    runs = client.search_runs(exps, filter_string=f"tags.`{SWEEP_TAG}` != ''", max_results=5000)
    out: dict[str, list] = {}
    for r in runs:
        if "mlflow.parentRunId" not in r.data.tags:
            out.setdefault(r.data.tags[SWEEP_TAG], []).append(r)
    return out
