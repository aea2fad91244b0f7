"""Every MLflow read of the UI, in one place, cached for a few seconds.

Pages call these functions with the tracking URI as first argument, so the cache key changes with the store
(tests point several stores at one process). Results are DataFrames or plain dicts: picklable, cheap to cache.
The short TTL keeps a training run's page live without hammering the store; reads load only what a page
shows (one step's task table, the metrics a chart plots), because MLflow's own UI slows down badly when it
loads everything (mlflow#21841, #1571).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from populora.platform import tracking

# downloads of small JSON artifacts would otherwise print a tqdm bar into the server log for every read
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

TTL = 5  # seconds: live enough for a run that logs every step, light enough for 50 runs
PARENT_TAG = tracking.PARENT_TAG
RUN_COLUMNS = ["run_id", "name", "kind", "status", "mlflow_status", "progress", "step", "steps", "started",
               "base_model", "teachers", "students", "solve_rate", "validity_rate", "baseline_run", "run_dir", "experiment"]


class StoreError(RuntimeError):
    """The MLflow store cannot be read (bad URI, server down); the message says which store."""


def uri() -> str:
    return tracking.tracking_uri()


def _client(store: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=store)


# ====================================================================== runs
@st.cache_data(ttl=TTL, show_spinner=False)
def list_runs(store: str, limit: int = 500) -> pd.DataFrame:
    """Parent runs of every experiment (member runs excluded), newest first."""
    try:
        client = _client(store)
        exps = {e.experiment_id: e.name for e in client.search_experiments()}
        runs = client.search_runs(list(exps), filter_string="tags.`populora.kind` != ''",
                                  order_by=["attributes.start_time DESC"], max_results=limit) if exps else []
    except Exception as err:  # noqa: BLE001 - any store failure becomes one readable message
        raise StoreError(f"cannot read the MLflow store {store}: {type(err).__name__}: {str(err)[:300]}") from None
    rows = [_run_row(r, exps) for r in runs]
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def _run_row(r, exps: dict) -> dict:
    t, m, p = r.data.tags, r.data.metrics, r.data.params
    progress = t.get("populora.progress", "")
    step, _, steps = progress.partition("/")
    return {"run_id": r.info.run_id, "name": r.info.run_name, "kind": t.get("populora.kind", "?"),
            "status": t.get("populora.status", r.info.status.lower()), "mlflow_status": r.info.status,
            "progress": progress, "step": _int(step), "steps": _int(steps) or _int(p.get("steps")),
            "started": pd.to_datetime(r.info.start_time, unit="ms"), "base_model": t.get("populora.base_model", p.get("model.base", "")),
            "teachers": _int(p.get("population.teachers")), "students": _int(p.get("population.students")),
            "solve_rate": m.get("student/solve_rate"), "validity_rate": m.get("tasks/validity_rate"),
            "baseline_run": t.get("populora.baseline_run", ""), "run_dir": t.get("populora.run_dir", ""),
            "experiment": exps.get(r.info.experiment_id, r.info.experiment_id)}


def _int(text) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


@st.cache_data(ttl=TTL, show_spinner=False)
def run_info(store: str, run_id: str) -> dict | None:
    """Tags, params, latest metrics and status of one run; None if the id is unknown."""
    from mlflow.exceptions import MlflowException

    try:
        r = _client(store).get_run(run_id)
    except MlflowException:
        return None
    return {"run_id": run_id, "name": r.info.run_name, "status": r.data.tags.get("populora.status", r.info.status.lower()),
            "mlflow_status": r.info.status, "tags": dict(r.data.tags), "params": dict(r.data.params),
            "metrics": dict(r.data.metrics), "experiment_id": r.info.experiment_id,
            "start_time": r.info.start_time, "end_time": r.info.end_time}


@st.cache_data(ttl=TTL, show_spinner=False)
def members(store: str, run_id: str) -> pd.DataFrame:
    """One row per member (child run): identity tags, then the latest value of every metric as a column."""
    client = _client(store)
    try:
        exp_id = client.get_run(run_id).info.experiment_id
    except Exception:  # noqa: BLE001 - unknown run: no members
        return pd.DataFrame(columns=["member", "role"])
    runs = client.search_runs([exp_id], filter_string=f"tags.`{PARENT_TAG}` = '{run_id}'", max_results=5000)
    rows = []
    for r in runs:
        t = r.data.tags
        parents = t.get("populora.parents", "-")
        rows.append({"member": t.get("populora.member_id", r.info.run_name), "role": t.get("populora.role", "?"),
                     "generation": _int(t.get("populora.generation")) or 0,
                     "parents": [] if parents in ("", "-") else parents.split(","), "operator": t.get("populora.operator", "init"),
                     "born_step": _int(r.data.params.get("born_step")) or 0,
                     "alive": t.get("populora.alive", "true") == "true", "adapter_dir": t.get("populora.adapter_dir", ""),
                     "member_run_id": r.info.run_id, **r.data.metrics})
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["member", "role"])
    order = df["member"].map(_member_order)
    return df.assign(_order=order).sort_values(["role", "_order"]).drop(columns="_order").reset_index(drop=True)


def _member_order(member_id: str) -> tuple:
    """T2 < T10: the prefix, then the number."""
    head = member_id.rstrip("0123456789")
    return (head, int(member_id[len(head):] or 0))


# ====================================================================== metric histories
@st.cache_data(ttl=TTL, show_spinner=False)
def history(store: str, run_id: str, key: str) -> pd.DataFrame:
    """(step, value) of one metric of one run, sorted by step; the last value wins for a repeated step."""
    points = _client(store).get_metric_history(run_id, key)
    df = pd.DataFrame([(p.step, p.value) for p in points], columns=["step", "value"])
    return df.drop_duplicates("step", keep="last").sort_values("step").reset_index(drop=True)


def histories(store: str, run_id: str, keys: list[str]) -> pd.DataFrame:
    """Long frame (metric, step, value) of several metrics of one run."""
    frames = [history(store, run_id, k).assign(metric=k) for k in keys]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["step", "value", "metric"])


def member_histories(store: str, run_id: str, key: str, member_ids: list[str] | None = None) -> pd.DataFrame:
    """Long frame (member, role, step, value) of one metric over every (or the chosen) member."""
    mdf = members(store, run_id)
    if mdf.empty:
        return pd.DataFrame(columns=["member", "role", "step", "value"])
    frames = []
    for row in mdf.itertuples():
        if member_ids is None or row.member in member_ids:
            h = history(store, row.member_run_id, key)
            if not h.empty:
                frames.append(h.assign(member=row.member, role=row.role))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["member", "role", "step", "value"])


# ====================================================================== artifacts
@st.cache_data(ttl=TTL, show_spinner=False)
def artifact_json(store: str, run_id: str, path: str) -> Any:
    """A JSON artifact of a run, or None if it is not there (yet)."""
    import mlflow

    try:
        with tempfile.TemporaryDirectory() as tmp:
            mlflow.set_tracking_uri(store)
            local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=tmp, tracking_uri=store)
            return json.loads(Path(local).read_text())
    except Exception:  # noqa: BLE001 - missing or half-written artifact: the page shows an empty state
        return None


@st.cache_data(ttl=TTL, show_spinner=False)
def artifact_files(store: str, run_id: str, folder: str) -> list[str]:
    try:
        return sorted(f.path for f in _client(store).list_artifacts(run_id, folder) if not f.is_dir)
    except Exception:  # noqa: BLE001
        return []


def table_steps(store: str, run_id: str, folder: str = "tasks") -> list[int]:
    """Steps that have a ``<folder>/step_NNNNNN.json`` table."""
    steps = []
    for path in artifact_files(store, run_id, folder):
        stem = Path(path).stem
        if stem.startswith("step_") and stem[5:].isdigit():
            steps.append(int(stem[5:]))
    return sorted(steps)


def table(store: str, run_id: str, folder: str, step: int) -> pd.DataFrame:
    """One step's MLflow table (``{"columns": [...], "data": [[...], ...]}``) as a DataFrame."""
    data = artifact_json(store, run_id, f"{folder}/step_{step:06d}.json")
    if not data or "columns" not in data:
        return pd.DataFrame()
    return pd.DataFrame(data.get("data", []), columns=data["columns"])


def tables(store: str, run_id: str, folder: str, steps: list[int]) -> pd.DataFrame:
    frames = [table(store, run_id, folder, s) for s in steps]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def lineage(store: str, run_id: str) -> dict:
    data = artifact_json(store, run_id, "lineage.json")
    return data if isinstance(data, dict) else {"events": [], "nodes": [], "edges": []}


def population(store: str, run_id: str) -> list[dict]:
    data = artifact_json(store, run_id, "population.json")
    return data.get("members", []) if isinstance(data, dict) else []


# ====================================================================== evaluation
def eval_scores(store: str, run_id: str) -> pd.DataFrame:
    """Latest ``eval/<benchmark>/<metric>`` of each member run: rows = members, columns = metric keys."""
    mdf = members(store, run_id)
    if mdf.empty:
        return pd.DataFrame()
    cols = [c for c in mdf.columns if isinstance(c, str) and c.startswith("eval/")]
    if not cols:
        return pd.DataFrame()
    return mdf[["member", "role", "alive"] + cols].set_index("member")
