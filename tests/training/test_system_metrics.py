"""MLflow's own system metrics on the parent run: on where a GPU is (forced on here), off on a CPU by default."""

from conftest import wait_for

from populora.platform import config as config_io
from populora.training.config import TrainConfig
from populora.training.run.run_log import RunLog


def test_parent_run_gets_mlflows_system_metrics(mlflow_store, monkeypatch):
    monkeypatch.setenv("POPULORA_SYSTEM_METRICS", "1")
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
    log = RunLog.start(config_io.load(TrainConfig, None, []))
    assert log.system_metrics is not None
    # MLflow's monitor thread samples every second: wait until it has logged once (an event, not a fixed sleep)
    wait_for(lambda: "system/cpu_utilization_percentage" in log.tracker.get_run(log.run_id).data.metrics, 120,
             "MLflow's first system metrics sample")
    log.end("finished")
    metrics = log.tracker.get_run(log.run_id).data.metrics
    assert "system/cpu_utilization_percentage" in metrics and "system/system_memory_usage_megabytes" in metrics


def test_off_on_a_cpu_unless_asked(mlflow_store, monkeypatch):
    import torch

    monkeypatch.delenv("POPULORA_SYSTEM_METRICS", raising=False)
    log = RunLog.start(config_io.load(TrainConfig, None, []))
    assert (log.system_metrics is not None) == torch.cuda.is_available()
    log.end("finished")
