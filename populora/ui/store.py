"""Every MLflow read of the UI, in one place, cached for a few seconds.

Pages call these functions with the tracking URI as first argument, so the cache key changes with the store
(tests point several stores at one process). Results are DataFrames or plain dicts: picklable, cheap to cache.
The short TTL keeps a training run's page live without hammering the store; reads load only what a page
shows (one step's task table, the metrics a chart plots), because MLflow's own UI slows down badly when it
loads everything (mlflow#21841, #1571).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from populora.platform.store import runlayout as rl
from populora.platform.store import tracking

# downloads of small JSON artifacts would otherwise print a tqdm bar into the server log for every read
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

TTL = 5  # seconds: live enough for a run that logs every step, light enough for 50 runs
RUN_COLUMNS = ["run_id", "name", "kind", "status", "mlflow_status", "progress", "step", "steps", "started", "ended",
               "base_model", "teachers", "students", "population", "note", "forked_from", "sweep", "settings", "step_s", "training_s",
               "solve_rate", "validity_rate", "baseline_run", "run_dir", "experiment", "monitors", "budget"]


class StoreError(RuntimeError):
    """The MLflow store cannot be read (bad URI, server down); the message says which store."""


def uri() -> str:
    return tracking.tracking_uri()


def _client(store: str):
    from mlflow import MlflowClient

    tracking.ensure_store(store)  # created and migrated once, under its lock, even when runs start beside us
    return tracking.RetryingClient(MlflowClient(tracking_uri=store))


def prepare(store: str) -> None:
    """Create a fresh sqlite store before any page reads it, saying so on the page: MLflow builds its tables by
    running every schema migration (the first time on a machine, up to a minute), which the first page load
    showed as a bare spinner."""
    path = tracking.sqlite_path(store)
    if path is None or (path.is_file() and path.stat().st_size > 0):
        return
    with st.spinner(f"Preparing the MLflow store `{store}`: creating its tables (the first start on this machine "
                    "takes up to a minute; later ones a moment)…", show_time=True):
        tracking.ensure_store(store)


def client(store: str):
    """An MLflow client of the store (for the package functions a page calls, e.g. the paper's figure set)."""
    return _client(store)


# ====================================================================== runs
@st.cache_data(ttl=TTL, show_spinner=False)
def list_runs(store: str, limit: int = 500) -> pd.DataFrame:
    """Parent runs of every experiment (member runs excluded), newest first (the query ``populora runs`` uses)."""
    try:
        rows = rl.list_runs(_client(store), limit)
    except Exception as err:  # noqa: BLE001 - any store failure becomes one readable message
        raise StoreError(f"cannot read the MLflow store {store}: {type(err).__name__}: {str(err)[:300]}") from None
    rows = [dict(r, budget=r.get("tags", {}).get(rl.BUDGET, ""), started=pd.to_datetime(r["start_time"], unit="ms"),
                 ended=pd.to_datetime(r.get("end_time"), unit="ms") if r.get("end_time") else pd.NaT) for r in rows]
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


@st.cache_data(ttl=TTL, show_spinner=False)
def run_info(store: str, run_id: str) -> dict | None:
    """Tags, params, latest metrics and status of one run; None if the id is unknown."""
    from mlflow.exceptions import MlflowException

    try:
        r = _client(store).get_run(run_id)
    except MlflowException:
        return None
    return {"run_id": run_id, "name": r.info.run_name, "status": rl.status(r),
            "mlflow_status": r.info.status, "tags": dict(r.data.tags), "params": dict(r.data.params),
            "metrics": dict(r.data.metrics), "experiment_id": r.info.experiment_id,
            "start_time": r.info.start_time, "end_time": r.info.end_time}


@st.cache_data(ttl=TTL, show_spinner=False)
def members(store: str, run_id: str) -> pd.DataFrame:
    """One row per member (child run): identity tags, then the latest value of every metric as a column.

    Ratings are the trainer's own record (``recorded``): a replaced member's are those it had when it was replaced,
    also in stores written before the trainer logged that step on the member's run. ``replaced_by`` and
    ``replaced_at`` say by whom and at which step ("" and None for a living member)."""
    try:
        runs = rl.member_runs(_client(store), run_id, max_results=5000)
    except Exception:  # noqa: BLE001 - unknown run: no members
        return pd.DataFrame(columns=["member", "role"])
    df = pd.DataFrame([rl.member_row(r) for r in runs])
    if df.empty:
        return pd.DataFrame(columns=["member", "role"])
    df = _with_recorded(df, recorded(store, run_id), conservative_k(store, run_id))
    order = df["member"].map(rl.member_order)
    return df.assign(_order=order).sort_values(["role", "_order"]).drop(columns="_order").reset_index(drop=True)


def conservative_k(store: str, run_id: str) -> float:
    """The k of the run's ``rating/conservative`` = mu - k * sigma (``evolution.conservative_k``)."""
    info = run_info(store, run_id) or {}
    try:
        return float(info.get("params", {}).get("evolution.conservative_k", 0.0))
    except ValueError:
        return 0.0


def recorded(store: str, run_id: str) -> dict[str, dict]:
    """{member: {mu, sigma, alive, replaced_by, replaced_at}}: population.json (the trainer's state at its last
    checkpoint: a replaced member's rating is frozen at its replacement) and lineage.json (who replaced whom,
    when). Empty before the first checkpoint."""
    out = {m["id"]: {"mu": m.get("mu"), "sigma": m.get("sigma"), "alive": m.get("alive", True), "replaced_by": "",
                     "replaced_at": None} for m in population(store, run_id) if "id" in m}
    for e in lineage(store, run_id).get("events", []):
        if e.get("replaced") in out:
            out[e["replaced"]].update(replaced_by=e["child"], replaced_at=e.get("step"))
    return out


def _with_recorded(df: pd.DataFrame, rec: dict[str, dict], k: float) -> pd.DataFrame:
    """Member rows with the recorded ratings and replacement facts (rows of members not in ``rec`` unchanged)."""
    df = df.copy()
    for col in ("rating/mu", "rating/sigma", "rating/conservative"):
        if col not in df.columns:
            df[col] = float("nan")
    df["replaced_by"] = [rec.get(m, {}).get("replaced_by", "") for m in df["member"]]
    df["replaced_at"] = [rec.get(m, {}).get("replaced_at") for m in df["member"]]
    for i, m in zip(df.index, df["member"]):
        r = rec.get(m)
        if r and r["mu"] is not None and r["sigma"] is not None:
            df.loc[i, ["rating/mu", "rating/sigma", "rating/conservative"]] = [r["mu"], r["sigma"], r["mu"] - k * r["sigma"]]
        if r and not r["alive"]:
            df.loc[i, "alive"] = False
    return df


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


def member_history(store: str, row: dict, key: str) -> pd.DataFrame:
    """(step, value) of one member's metric (``row``: its row of ``members``); a replaced member's rating ends at
    its replacement step with the rating it had then, also in stores written before the trainer logged that point
    (read from population.json)."""
    h = history(store, row["member_run_id"], key)
    died, value = row.get("replaced_at"), row.get(key)
    if key.startswith(rl.RATING_PREFIX) and _known(died) and _known(value) and (h.empty or h["step"].max() < died):
        h = pd.concat([h, pd.DataFrame({"step": [int(died)], "value": [float(value)]})], ignore_index=True)
    return h


def _known(value) -> bool:
    return value is not None and not pd.isna(value)


def member_histories(store: str, run_id: str, key: str, member_ids: list[str] | None = None) -> pd.DataFrame:
    """Long frame (member, role, step, value) of one metric over every (or the chosen) member."""
    mdf = members(store, run_id)
    if mdf.empty:
        return pd.DataFrame(columns=["member", "role", "step", "value"])
    frames = []
    for row in mdf.to_dict("records"):
        if member_ids is None or row["member"] in member_ids:
            h = member_history(store, row, key)
            if not h.empty:
                frames.append(h.assign(member=row["member"], role=row["role"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["member", "role", "step", "value"])


@st.cache_data(ttl=TTL, show_spinner=False)
def league_runs(store: str) -> list[dict]:
    """League runs, newest first (``runlayout.league_runs``); [] when the store cannot be read."""
    try:
        return rl.league_runs(_client(store))
    except Exception:  # noqa: BLE001 - the page shows an empty state
        return []


# ====================================================================== artifacts
@st.cache_data(ttl=TTL, show_spinner=False)
def artifact_json(store: str, run_id: str, path: str) -> Any:
    """A JSON artifact of a run, or None if it is not there (yet)."""
    try:
        return rl.read_json(store, run_id, path)
    except Exception:  # noqa: BLE001 - missing or half-written artifact: the page shows an empty state
        return None


@st.cache_data(ttl=TTL, show_spinner=False)
def artifact_files(store: str, run_id: str, folder: str) -> list[str]:
    try:
        return sorted(f.path for f in _client(store).list_artifacts(run_id, folder) if not f.is_dir)
    except Exception:  # noqa: BLE001
        return []


@st.cache_data(ttl=60, show_spinner=False)
def artifact_text(store: str, run_id: str, path: str) -> str | None:
    """A text artifact of a run (the run's config.yaml), or None if it is not there."""
    try:
        return rl.read_text(store, run_id, path)
    except Exception:  # noqa: BLE001
        return None


def table_steps(store: str, run_id: str, folder: str = rl.TASKS) -> list[int]:
    """Steps that have a ``<folder>/step_NNNNNN.json`` table."""
    steps = (rl.table_step(path) for path in artifact_files(store, run_id, folder))
    return sorted(s for s in steps if s is not None)


def table(store: str, run_id: str, folder: str, step: int) -> pd.DataFrame:
    """One step's MLflow table (``{"columns": [...], "data": [[...], ...]}``) as a DataFrame."""
    columns, rows = rl.table_rows(artifact_json(store, run_id, rl.step_table(folder, step)))
    return pd.DataFrame(rows, columns=columns) if columns else pd.DataFrame()


def tables(store: str, run_id: str, folder: str, steps: list[int]) -> pd.DataFrame:
    frames = [table(store, run_id, folder, s) for s in steps]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def lineage(store: str, run_id: str) -> dict:
    return rl.lineage_of(artifact_json(store, run_id, rl.LINEAGE))


def population(store: str, run_id: str) -> list[dict]:
    return rl.population_of(artifact_json(store, run_id, rl.POPULATION_FILE))


# ====================================================================== evaluation
@st.cache_data(ttl=TTL, show_spinner=False)
def eval_results(store: str, run_id: str, step: int | None = None) -> dict | None:
    """The results.json ``populora eval`` logged on a run: of its final adapters, or (``step``) of its checkpoint
    at that step; None if that evaluation has not been logged."""
    return artifact_json(store, run_id, rl.eval_results_path(step))


@st.cache_data(ttl=TTL, show_spinner=False)
def eval_steps(store: str, run_id: str) -> list[int]:
    """Checkpoint steps with an evaluation logged on the run (artifact folders ``eval/step_NNNNNN``)."""
    try:
        found = (rl.folder_step(Path(f.path).name) for f in _client(store).list_artifacts(run_id, rl.EVAL_FOLDER) if f.is_dir)
    except Exception:  # noqa: BLE001 - no eval folder yet
        return []
    return sorted(s for s in found if s is not None)
