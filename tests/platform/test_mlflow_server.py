"""The platform against a real `mlflow server` on localhost (as in docker/compose.yaml), not just a sqlite file:
a tiny training run logs through the server, and the artifacts (tables, lineage, adapters) come back from it. The
server is a process of its own; the training runs in this process (``cli_in_process``), given the server's URI as
the command is, in MLFLOW_TRACKING_URI."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from conftest import cli_in_process

from populora.platform.store import runlayout as rl


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path, monkeypatch):
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination", str(tmp_path / "artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})  # as docker/compose.yaml: no job runner
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300  # a bound for a loaded machine: the loop ends at the first healthy answer
    while time.time() < deadline:
        try:
            if requests.get(f"{url}/health", timeout=1).ok:
                break
        except requests.RequestException:
            time.sleep(0.5)
    else:
        server.kill()
        pytest.fail("mlflow server did not start within 300 s")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    monkeypatch.chdir(tmp_path)
    yield url
    server.terminate()
    server.wait(timeout=30)


def test_training_logs_through_a_tracking_server(mlflow_server, tmp_path, capsys):
    code = cli_in_process("train", "--set", "steps=1", "--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
                          "--set", "tasks.max_new_tokens_propose=16", "--set", "tasks.max_new_tokens_solve=8", "--quiet")
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert mlflow_server in out.out  # tells the user which store it wrote to
    assert not (tmp_path / "mlflow.db").exists()  # nothing went to a local sqlite file
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    runs = client.search_runs([client.get_experiment_by_name("populora").experiment_id])
    parent = next(r for r in runs if rl.PARENT not in r.data.tags)
    assert parent.info.status == "FINISHED" and len(runs) == 5
    lineage = json.loads(Path(client.download_artifacts(parent.info.run_id, rl.LINEAGE, str(tmp_path))).read_text())
    assert len(lineage["events"]) == 4
    child = next(r for r in runs if r.data.tags.get(rl.MEMBER_ID) == "S0")
    assert {a.path for a in client.list_artifacts(child.info.run_id, "adapter")} >= {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"}
