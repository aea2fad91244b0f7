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


# `populora train` whose trainer, once ``Trainer.<method>`` has returned at step N, writes a marker file and waits
# there until the test signals or kills it: a stop "mid-run" is then an event the test waits for, not a race
# between its poll and a 0.6 s step (the run could otherwise end before the signal).
_PAUSED_TRAIN = """
import sys, time
from pathlib import Path
import populora.cli
from populora.training.loop import Trainer
method, at, marker = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
original = getattr(Trainer, method)
def paused(self, *args, **kwargs):
    out = original(self, *args, **kwargs)
    if self.step_index == at and not marker.exists():
        marker.write_text(str(at))
        time.sleep(3600)  # until the test's SIGINT / SIGTERM / SIGKILL
    return out
setattr(Trainer, method, paused)
sys.exit(populora.cli.main(sys.argv[4:]))
"""


def paused_train_cmd(marker: Path, step: int, *args: str, after: str = "step") -> list[str]:
    """``populora train ARGS`` that pauses after ``Trainer.<after>`` returns at ``step`` (``"step"``: the step is
    done, checkpointed and in MLflow; ``"save_checkpoint"``: on disk only), once ``marker`` is written."""
    return [sys.executable, "-c", _PAUSED_TRAIN, after, str(step), str(marker), "train", *args]


def wait_for_marker(marker: Path, proc, timeout: float = 600) -> None:
    """Wait until the paused trainer wrote ``marker``; fail with its output at once if it ended instead."""
    def reached():
        if proc.poll() is not None:
            raise AssertionError(f"the trainer ended (exit {proc.returncode}) before pausing:\n{(proc.communicate()[0] or '')[-3000:]}")
        return marker.exists()

    wait_for(reached, timeout, f"the trainer to pause ({marker.name})", interval=0.2)


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
