"""Does the loop learn? The planted environment (training/tasks/planted.py) run through the real loop for a few
seeds: each role's reward per step, and the rise from its start with an interval over seeds.

``start`` is a seed's mean reward over its first ``window`` steps (steps without that role's rollouts skipped; a
window without any is nan, and fails ``learned``) (step 1's rollouts are the initial policy's),
``end`` over its last ``window``; the rise is ``end - start`` per seed, and its interval a Student-t interval
over seeds (seeds are the independent units: steps within a run are not). ``populora bench learn`` prints it;
tests/training/test_learns.py asserts it, and that it fails on each planted bug.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

from populora.platform import config as config_io
from populora.training.config import TrainConfig
from populora.training.loop import Trainer

PRESET = Path(__file__).resolve().parents[2] / "configs" / "planted.yaml"
ROLES = ("student", "teacher")
# the backends `bench learn --backend` runs it on: their config overrides (vllm: generation on vLLM's engine;
# ray: two data-parallel Ray workers in a local Ray instance)
BACKENDS = {
    "multilora": ["model.backend=multilora"],
    "peft": ["model.backend=peft"],
    "vllm": ["model.generation=vllm"],
    "ray": ["ray.address=local", "ray.model_workers=2", "ray.placement=data_parallel",
            "ray.sandbox_workers=1"],
}


@dataclass
class Curve:
    """Rewards per seed and step, per role: ``rewards[role]`` is (seeds, steps)."""

    seeds: list[int]
    rewards: dict[str, np.ndarray] = field(default_factory=dict)


def rise(rewards: np.ndarray, window: int, confidence: float = 0.95) -> dict:
    """``start``, ``end`` (means over seeds of each seed's first / last ``window`` steps), ``rise`` (their
    difference), ``interval`` (two-sided ``confidence`` t-interval of the mean rise over seeds) and ``lower``
    (the one-sided ``confidence`` lower bound); rewards (seeds, steps). One seed: no interval (None).

    >>> r = rise(np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.5, 1.0, 0.5]]), 2)
    >>> r["start"], r["end"], r["rise"]
    (0.125, 0.875, 0.75)
    >>> r["interval"][0] < r["lower"] < 0.75 < r["interval"][1]
    True
    """
    rewards = np.asarray(rewards, dtype=float)
    if rewards.ndim != 2 or rewards.shape[1] < 2 * window or window < 1:
        raise ValueError(f"rewards of shape {rewards.shape} cannot give a start and an end of {window} step(s) each")
    with np.errstate(all="ignore"), warnings.catch_warnings():  # nan: a step without that role's rollouts (skipped)
        warnings.simplefilter("ignore", RuntimeWarning)
        start, end = np.nanmean(rewards[:, :window], 1), np.nanmean(rewards[:, -window:], 1)
    d = end - start
    out = {"start": float(start.mean()), "end": float(end.mean()), "rise": float(d.mean()), "seeds": len(d),
           "interval": None, "lower": None}
    if len(d) > 1:
        se = d.std(ddof=1) / np.sqrt(len(d))
        two = scipy_stats.t.ppf(0.5 + confidence / 2, len(d) - 1)
        one = scipy_stats.t.ppf(confidence, len(d) - 1)
        out["interval"] = [float(d.mean() - two * se), float(d.mean() + two * se)]
        out["lower"] = float(d.mean() - one * se)
    return out


def learned(summary: dict, margin: float) -> bool:
    """The verdict the test asserts: the reward rose by ``margin`` on average, and the one-sided lower bound of
    the rise is above 0.

    >>> learned({"rise": 0.3, "lower": 0.05}, 0.2), learned({"rise": 0.3, "lower": -0.01}, 0.2)
    (True, False)
    """
    return summary["lower"] is not None and summary["rise"] >= margin and summary["lower"] > 0


@contextlib.contextmanager
def scratch_store():
    """A throwaway MLflow store and output dir (the loop logs as any run; nothing of it is kept)."""
    with tempfile.TemporaryDirectory(prefix="populora-learn-") as tmp:
        before = os.environ.get("MLFLOW_TRACKING_URI")
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/mlflow.db"
        try:
            yield Path(tmp)
        finally:
            if before is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = before


def planted_config(overrides: list[str] = (), seed: int = 0, output_dir: str = "runs") -> TrainConfig:
    return config_io.load(TrainConfig, PRESET, [*overrides, f"seed={seed}", f"output_dir={output_dir}"])


def run_planted(seeds: list[int], steps: int, overrides: list[str] = (), on_trainer=None, progress=None) -> Curve:
    """The planted preset with ``overrides`` for ``steps`` steps per seed, through ``Trainer.step``; each role's
    mean reward per step. ``on_trainer(trainer)``: called once the trainer is built (a test's probe)."""
    curve = Curve(list(seeds), {r: np.zeros((len(seeds), steps)) for r in ROLES})
    with scratch_store() as tmp:
        for i, seed in enumerate(seeds):
            cfg = planted_config([*overrides, f"steps={steps}"], seed, str(tmp / "runs"))
            trainer = Trainer.create(cfg)
            try:
                if on_trainer is not None:
                    on_trainer(trainer)
                for s in range(steps):
                    metrics = trainer.step()["run_metrics"]
                    for role in ROLES:
                        curve.rewards[role][i, s] = metrics.get(f"{role}/reward", np.nan)
                    if progress:
                        progress(seed, s + 1, {r: curve.rewards[r][i, s] for r in ROLES})
            finally:
                trainer.close()
    return curve
