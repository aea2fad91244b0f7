import os
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """A fresh sqlite MLflow store in tmp_path, used by everything in the test (and its subprocesses)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return uri


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5, detail=lambda: ""):
    """Poll ``predicate`` until it returns something truthy and return that; else fail naming what we waited
    for (plus ``detail()``, read at that moment)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail()}")


def populora_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "populora.cli", *args]


@pytest.fixture(scope="session")
def tiny_model():
    """A tiny randomly initialised model with the embedded model's tokenizer (loaded once per session)."""
    from populora.platform.models import load_base, resolve_source

    return load_base(resolve_source("embedded"), tiny_random=True)


@pytest.fixture
def tiny_backend(tiny_model):
    from populora.platform.backends import LoraSpec, PeftBackend

    model, tok = tiny_model
    backend = PeftBackend(model, tok, LoraSpec(rank=4))
    yield backend
    if backend.model is not None:  # unwrap so the next test gets a clean base
        backend.model.unload()
