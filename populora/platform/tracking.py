"""MLflow tracking shared by training, evaluation and the UI.

Writes go through ``MlflowClient`` with explicit run ids (no global "active run" stack), so one process can
log a parent run and one child run per member side by side. The store is ``MLFLOW_TRACKING_URI`` if set, else
``sqlite:///mlflow.db`` in the working directory (MLflow's own default).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from populora.platform import runlayout


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def client(uri: str | None = None):
    import mlflow
    from mlflow import MlflowClient

    uri = uri or tracking_uri()
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri)


class Tracker:
    """Thin, explicit wrapper: every call names the run it writes to."""

    def __init__(self, uri: str | None = None):
        self.client = client(uri)  # default: the store the environment names (tracking_uri())

    # -------------------------------------------------------------- runs
    def experiment_id(self, name: str) -> str:
        exp = self.client.get_experiment_by_name(name)
        return exp.experiment_id if exp else self.client.create_experiment(name)

    def start_run(self, experiment: str, name: str, tags: dict[str, str] | None = None, parent: str | None = None) -> str:
        tags = {k: str(v) for k, v in (tags or {}).items()}  # the REST store (mlflow server) takes strings only
        if parent:
            tags[runlayout.PARENT] = parent
        run = self.client.create_run(self.experiment_id(experiment), run_name=name, tags=tags)
        return run.info.run_id

    def reopen(self, run_id: str) -> None:
        self.client.update_run(run_id, status="RUNNING")

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def get_run(self, run_id: str):
        return self.client.get_run(run_id)

    # -------------------------------------------------------------- values
    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow caps a batch at 100 params
            self.client.log_batch(run_id, params=items[i:i + 100])

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)[:5000]) for k, v in tags.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, tags=items[i:i + 100])

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        self.log_metric_steps(run_id, {step: metrics})

    def log_metric_steps(self, run_id: str, by_step: dict[int, dict[str, float]]) -> None:
        """Metrics of several steps in as few ``log_batch`` calls as MLflow allows (1000 metrics each). A step's
        metrics never straddle two calls (unless one step alone has more than 1000), so each step is in the store
        whole or not at all: a resumed run relies on that."""
        from mlflow.entities import Metric

        now, batch = int(time.time() * 1000), []
        for step, metrics in by_step.items():
            items = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None and v == v]
            if batch and len(batch) + len(items) > 1000:
                self.client.log_batch(run_id, metrics=batch)
                batch = []
            while len(items) > 1000:  # a step too big for one call: in pieces
                self.client.log_batch(run_id, metrics=items[:1000])
                items = items[1000:]
            batch += items
        if batch:
            self.client.log_batch(run_id, metrics=batch)

    def metric_steps(self, run_id: str, key: str) -> set[int]:
        return {m.step for m in self.client.get_metric_history(run_id, key)}

    # -------------------------------------------------------------- artifacts
    def log_json(self, run_id: str, data: Any, artifact_file: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            path.write_text(json.dumps(data, indent=1, default=str))
            folder = str(Path(artifact_file).parent)
            self.client.log_artifact(run_id, str(path), artifact_path=None if folder == "." else folder)

    def log_table(self, run_id: str, rows: list[dict], artifact_file: str) -> None:
        """A JSON artifact in MLflow's table layout ({"columns": [...], "data": [[...]]}; pandas:
        ``pd.DataFrame(d["data"], columns=d["columns"])``). Written with log_artifact, not
        ``MlflowClient.log_table``: that one appends to the run's ``mlflow.loggedArtifacts`` tag on every call and
        overflows MLflow's 8000-character tag limit after about 160 tables (a run of 80 steps)."""
        if not rows:
            return
        columns = list(dict.fromkeys(k for row in rows for k in row))
        table = {"columns": columns, "data": [[_cell(row.get(c)) for c in columns] for row in rows]}
        self.log_json(run_id, table, artifact_file)

    def log_dir(self, run_id: str, local_dir: str | Path, artifact_path: str) -> None:
        self.client.log_artifacts(run_id, str(local_dir), artifact_path=artifact_path)

    def load_json(self, run_id: str, artifact_file: str) -> Any:
        import mlflow

        with tempfile.TemporaryDirectory() as tmp:
            path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact_file, dst_path=tmp)
            return json.loads(Path(path).read_text())

    def children(self, run_id: str) -> list:
        return runlayout.member_runs(self.client, run_id)


def _cell(value: Any) -> Any:
    """MLflow tables hold scalars; lists and dicts become JSON text."""
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value, default=str)
    return value
