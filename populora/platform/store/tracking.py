"""MLflow tracking shared by training, evaluation and the UI.

Writes go through ``MlflowClient`` with explicit run ids (no global "active run" stack), so one process can
log a parent run and one child run per member side by side. The store is ``MLFLOW_TRACKING_URI`` if set, else
``sqlite:///mlflow.db`` in the working directory (MLflow's own default).

Several runs (and the UI) share one sqlite store, so:

- the store is created and migrated once, under a file lock (``ensure_store``): MLflow creates a fresh store's
  tables on first use, and two processes doing that at once crash (``duplicate column name: step``);
- every client call is retried with backoff while sqlite says "database is locked" (``RetryingClient``):
  sqlite takes one writer at a time, and a failed statement is rolled back whole, so a retry writes it once;
- an experiment is created race-free: whoever loses the race to create it reads the winner's id.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import tenacity

from populora.platform.store import runlayout
from populora.platform.model.cache import cache_root

# MLflow draws a tqdm bar for every artifact it downloads (a run's results.json, a config): on a terminal it lands
# in the middle of a report or a table. Ours to set for every process that reads the store, unless the user did.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# MLflow's session wrapper logs every sqlite OperationalError with its whole traceback before raising it; every
# call here goes through ``RetryingClient``, which retries a locked database and turns a full disk into one line
# (platform/diskspace.py), so those tracebacks (a heartbeat's tag write at a full disk) are noise on stderr. Only
# that record is dropped (mlflow/store/db/utils.py, make_managed_session: "SQLAlchemy database error ..."); the
# module's other warnings still print.
def _not_operational_error(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("SQLAlchemy database error")


logging.getLogger("mlflow.store.db.utils").addFilter(_not_operational_error)


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 600.0  # creating a store takes seconds; a holder stuck this long is a bug worth an error
# Retries of a locked store (tenacity): 0.1 s doubling to 8 s, jittered so writers that collided do not collide
# again, 11 attempts (~40 s in all) before the error surfaces.
RETRY_WAIT = tenacity.wait_exponential_jitter(multiplier=0.1, max=8.0, jitter=0.05)
RETRY_ATTEMPTS = 11
_READY: set[str] = set()  # stores this process has already created or checked


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, else None.

    >>> sqlite_path("sqlite:////tmp/x/mlflow.db"), sqlite_path("http://mlflow:5000")
    (PosixPath('/tmp/x/mlflow.db'), None)
    """
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0])


def ensure_store(uri: str) -> None:
    """Create and migrate a sqlite store once, holding ``<db>.lock``, before anything else uses it.

    Opening the store (MLflow's SqlAlchemyStore) creates its tables when there are none; inside the lock only
    one process does so, and the others, once they hold it, find the tables there. Other stores (a server,
    Postgres) are created by whoever runs them, so nothing is done for them."""
    path = sqlite_path(uri)
    if path is None or uri in _READY:
        return
    from filelock import FileLock
    from mlflow import MlflowClient

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S):
        if not path.exists() or path.stat().st_size == 0:
            _copy_empty_store(path)
        _retry(MlflowClient(tracking_uri=uri).search_experiments, max_results=1)
    _READY.add(uri)


def empty_store() -> Path:
    """An empty MLflow sqlite store with this MLflow's tables, built once per MLflow version in the cache dir.

    MLflow creates a store by running every one of its schema migrations (~70: about 4 s of CPU and, each one
    committed, as many disk syncs: 10-20 s on a busy disk); a copy of one built before opens in a tenth of a
    second. The template holds the tables only: its Default experiment is deleted, so MLflow creates that on
    first use with the new store's own artifact location."""
    import mlflow
    from filelock import FileLock
    from mlflow import MlflowClient

    folder = cache_root() / "mlflow"
    template = folder / f"empty-{mlflow.__version__}.db"
    if template.is_file():
        return template
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{template}.lock", timeout=LOCK_TIMEOUT_S):
        if not template.is_file():
            tmp = template.with_name(f".{template.name}.{os.getpid()}.tmp")
            tmp.unlink(missing_ok=True)
            try:
                MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)
                with contextlib.closing(sqlite3.connect(tmp)) as db, db:
                    db.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
                    db.execute("DELETE FROM experiments WHERE experiment_id = 0")
                os.replace(tmp, template)
            finally:
                tmp.unlink(missing_ok=True)
    return template


def _copy_empty_store(path: Path) -> None:
    """Put a copy of ``empty_store()`` at ``path`` (whole or not at all); if that fails, MLflow creates the
    store itself as before (slower, same result)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(empty_store(), tmp)
        os.replace(tmp, path)
    except Exception as err:  # noqa: BLE001 - a read-only cache or a changed MLflow only costs speed
        log.info("creating the MLflow store %s without the cached empty store (%s)", path, err)
        tmp.unlink(missing_ok=True)


def is_locked_error(err: BaseException) -> bool:
    """sqlite's "database is locked" / "database table is locked", however MLflow or SQLAlchemy wrapped it."""
    while err is not None:
        if "is locked" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def _retry(fn, *args, **kwargs):
    def before_sleep(state: tenacity.RetryCallState) -> None:
        log.info("MLflow store busy (%s): retrying %s in %.1fs", str(state.outcome.exception())[:80],
                 getattr(fn, "__name__", fn), state.next_action.sleep)

    retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(is_locked_error), wait=RETRY_WAIT,
                                 stop=tenacity.stop_after_attempt(RETRY_ATTEMPTS), before_sleep=before_sleep,
                                 reraise=True)
    return retrying(fn, *args, **kwargs)


class RetryingClient:
    """An ``MlflowClient`` whose every method is retried with backoff while sqlite says the database is locked."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name: str):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        return functools.wraps(attr)(functools.partial(_retry, attr))


def client(uri: str | None = None):
    import mlflow
    from mlflow import MlflowClient

    uri = uri or tracking_uri()
    ensure_store(uri)
    mlflow.set_tracking_uri(uri)
    return RetryingClient(MlflowClient(tracking_uri=uri))


class Tracker:
    """Thin, explicit wrapper: every call names the run it writes to."""

    def __init__(self, uri: str | None = None):
        self.uri = uri or tracking_uri()  # default: the store the environment names
        self.client = client(self.uri)
        # name -> id, looked up once per tracker: a run starts one child run per member in its experiment, and
        # each lookup is a store query (~6 ms of CPU on sqlite); an experiment's id never changes
        self._experiment_ids: dict[str, str] = {}

    # -------------------------------------------------------------- runs
    def experiment_id(self, name: str) -> str:
        """The experiment's id, creating it if needed; when another process creates it first, its id."""
        if name not in self._experiment_ids:
            self._experiment_ids[name] = self._find_or_create_experiment(name)
        return self._experiment_ids[name]

    def _find_or_create_experiment(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        exp = self.client.get_experiment_by_name(name)
        if exp:
            return exp.experiment_id
        try:
            return self.client.create_experiment(name)
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self.client.get_experiment_by_name(name).experiment_id

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

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int, model_id: str | None = None) -> None:
        self.log_metric_steps(run_id, {step: metrics}, {step: model_id} if model_id else None)

    def log_metric_steps(self, run_id: str, by_step: dict[int, dict[str, float]], models: dict[int, str] | None = None) -> None:
        """Metrics of several steps in as few ``log_batch`` calls as MLflow allows (1000 metrics each). A step's
        metrics never straddle two calls (unless one step alone has more than 1000), so each step is in the store
        whole or not at all: a resumed run relies on that. ``models``: step -> LoggedModel id, whose metrics that
        step's are too (MLflow 3's ``Metric.model_id``: the model's page shows them)."""
        from mlflow.entities import Metric

        now, batch = int(time.time() * 1000), []
        for step, metrics in by_step.items():
            model = (models or {}).get(step)
            items = [Metric(k, float(v), now, step, model_id=model) for k, v in metrics.items() if v is not None and v == v]
            if batch and len(batch) + len(items) > 1000:
                self.client.log_batch(run_id, metrics=batch)
                batch = []
            while len(items) > 1000:  # a step too big for one call: in pieces
                self.client.log_batch(run_id, metrics=items[:1000])
                items = items[1000:]
            batch += items
        if batch:
            self.client.log_batch(run_id, metrics=batch)

    # -------------------------------------------------------------- MLflow 3 LoggedModels
    def create_external_model(self, experiment_id: str, name: str, source_run: str, tags: dict[str, Any],
                              params: dict[str, Any], model_type: str, step: int) -> str:
        """A READY LoggedModel whose weights live outside MLflow (``mlflow.create_external_model``'s steps, through
        this client rather than the global one: the model, its MLmodel stub so the registry can register it,
        READY), recorded as an output of ``source_run`` at ``step``; returns its id."""
        from mlflow.entities import LoggedModelOutput, LoggedModelStatus
        from mlflow.models.model import MLMODEL_FILE_NAME
        from mlflow.models.utils import get_external_mlflow_model_spec
        from mlflow.utils.mlflow_tags import MLFLOW_MODEL_IS_EXTERNAL

        tags = {MLFLOW_MODEL_IS_EXTERNAL: "true", **{k: str(v)[:5000] for k, v in tags.items()}}
        model = self.client.create_logged_model(experiment_id, name=name, source_run_id=source_run, tags=tags,
                                                params={k: str(v)[:6000] for k, v in params.items()}, model_type=model_type)
        with tempfile.TemporaryDirectory() as tmp:
            get_external_mlflow_model_spec(model).save(str(Path(tmp) / MLMODEL_FILE_NAME))
            self.client.log_model_artifacts(model.model_id, tmp)
        self.client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
        self.client.log_outputs(source_run, [LoggedModelOutput(model.model_id, step)])
        return model.model_id

    def set_model_tags(self, model_id: str, tags: dict[str, Any]) -> None:
        self.client.set_logged_model_tags(model_id, {k: str(v)[:5000] for k, v in tags.items()})

    def find_models(self, experiment_id: str, tags: dict[str, str]) -> list:
        """The LoggedModels of an experiment carrying every one of ``tags`` (exact values)."""
        where = " AND ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
        out, token = [], None
        while True:
            page = self.client.search_logged_models([experiment_id], filter_string=where, max_results=1000, page_token=token)
            out += list(page)
            token = page.token
            if not token:
                return out

    def metric_steps(self, run_id: str, key: str) -> set[int]:
        return {m.step for m in self.client.get_metric_history(run_id, key)}

    # -------------------------------------------------------------- artifacts
    def log_json(self, run_id: str, data: Any, artifact_file: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            path.write_text(json.dumps(data, indent=1, default=str))
            folder = str(Path(artifact_file).parent)
            self.client.log_artifact(run_id, str(path), artifact_path=None if folder == "." else folder)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            path.write_text(text)
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
