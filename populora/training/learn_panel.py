"""What a preset's students learn in K steps, on a fixed held-out task panel scored with the league's machinery.

In order, in one process and one backend (``bench learn --model embedded`` runs it):

1. the preset's trainer is built (its base model, its seeded buffers) and checkpointed at step 0;
2. the **panel** is written by the bare base model as the league's teacher (``league.make_panel``: the run's
   propose prompts and references from the step-0 buffers, the sandbox's validation), under the panel's own
   seed, before any update: it depends on the base model and the seeds only, never on what the students learn,
   and no student ever trains on it (the run's tasks are proposed by its teachers under the run's seed);
3. the base model answers it (``league.answer_panel``: training's own solve phase);
4. K training steps (``Trainer.step``), each role's mean reward per step kept (the learning curve);
5. the students alive at step K answer the same panel with the same answer seeds;
6. the league's fit (``league.results``, the base model the anchor at ability 0) and the change base -> trained
   (``evaluation.statistics.panel_change``: solve rates and abilities with intervals, the paired difference).

Everything (MLflow store, run dir with its checkpoints, ``panel.json``, ``answers.jsonl``, ``league.json``) is
kept under ``out``, so the panel and every answer behind a figure can be read again.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from populora.evaluation.statistics import panel_change
from populora.platform import config as config_io
from populora.platform.files import write_atomic
from populora.platform.store import runlayout as rl
from populora.training import league
from populora.training.config import TrainConfig
from populora.training.league_plan import BASE_ID, Entrant, LeagueSpec, Plan
from populora.training.learn_check import ROLES
from populora.training.loop import Trainer
from populora.training.member import BOTH, STUDENT

RESULT_FILE = "learn.json"
# per step, beside the rewards: why a curve is flat (no task solved, every answer's reward alike: no gradient)
DIAGNOSTICS = ("student/solve_rate", "student/format_rate", "tasks/validity_rate", "learn/no_signal_share",
               "learn/flat_task_share")


@dataclass
class PanelSettings:
    """The held-out panel: how many tasks the base model writes, how often each entrant answers each."""

    tasks_per_kind: int = 8        # valid panel tasks per kind (fewer if the base model wrote fewer in ``rounds``)
    proposals_per_round: int = 8   # base-model proposals per kind and round
    rounds: int = 4                # proposal rounds at most
    answers: int = 4               # answers per (entrant, task), sampled as in training
    seed: int = 20_251             # the panel's and the answers' seed (apart from the run's seed)
    n_boot: int = 200              # bootstrap replicates of the league fit
    chunk: int = 8                 # panel tasks per batched generation of the answers


@dataclass
class LearnRun:
    """What ``run`` measured: the curve per role (mean reward per step), the league's results and the change."""

    rewards: dict[str, list[float]] = field(default_factory=dict)
    diagnostics: dict[str, list[float | None]] = field(default_factory=lambda: {k: [] for k in DIAGNOSTICS})
    seconds: dict[str, float] = field(default_factory=dict)
    league: dict = field(default_factory=dict)
    change: dict = field(default_factory=dict)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def store_in(folder: Path):
    """MLflow's store in ``folder`` (``mlflow.db``) while the run lasts: the measurement's run is kept beside its
    panel, apart from the user's store."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder.resolve()}/mlflow.db"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before


def config(preset: str | Path, steps: int, overrides: list[str], out: Path) -> TrainConfig:
    """The preset with ``overrides``, ``steps`` steps, its runs under ``out/runs``."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1 (got {steps}): the students must train before the panel sees them")
    return config_io.load(TrainConfig, config_io.preset_path(preset),
                          [*overrides, f"steps={steps}", f"output_dir={out / 'runs'}"])


def run(cfg: TrainConfig, out: Path, panel: PanelSettings = PanelSettings(),
        log: Callable[[str], None] = _say) -> LearnRun:
    """Panel, base answers, ``cfg.steps`` training steps, students' answers, fit (see the module doc)."""
    out.mkdir(parents=True, exist_ok=True)
    result, t0 = LearnRun({r: [] for r in ROLES}), time.perf_counter()
    with store_in(out):
        trainer = Trainer.create(cfg)
        try:
            step0 = trainer.save_checkpoint()
            spec = LeagueSpec(runs=[trainer.run_id], tasks_per_kind=panel.tasks_per_kind,
                              proposals_per_round=panel.proposals_per_round, rounds=panel.rounds, seed_tasks=0,
                              answers=panel.answers, seed=panel.seed, n_boot=panel.n_boot, chunk=panel.chunk,
                              out=str(out / "panel"))
            base = Entrant(BASE_ID, "base", "", 0, BASE_ID, BOTH, None)
            configs, checkpoints = {trainer.run_id: cfg}, {(trainer.run_id, 0): step0}
            before = Plan(spec, [base], configs, checkpoints, out / "panel")
            before.out.mkdir(parents=True, exist_ok=True)
            adapters = {BASE_ID: None}
            tasks = league.make_panel(before, trainer.backend, adapters, trainer.verifier, log)
            if not tasks["tasks"]:
                raise RuntimeError(f"the base model wrote no valid panel task in {panel.rounds} round(s); raise the "
                                   "panel's rounds or proposals per round")
            league.answer_panel(before, tasks, trainer.backend, adapters, trainer.verifier, log)
            result.seconds["panel_before"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            for s in range(cfg.steps):
                metrics = trainer.step()["run_metrics"]
                for role in ROLES:
                    result.rewards[role].append(float(metrics.get(f"{role}/reward", np.nan)))
                for k in DIAGNOSTICS:
                    result.diagnostics[k].append(metrics.get(k))
                log(f"step {s + 1}/{cfg.steps} ({time.perf_counter() - t1:.0f} s): " + ", ".join(
                    f"{r} reward {result.rewards[r][-1]:+.3f}" for r in ROLES) +
                    f", solve rate {metrics.get('student/solve_rate', float('nan')):.3f}")
            result.seconds["train"] = time.perf_counter() - t1
            t2 = time.perf_counter()
            students = [m for m in trainer.population.students]
            ckpt = rl.checkpoint_dir(trainer.run_dir, cfg.steps)
            entrants = [base] + [Entrant(f"s{cfg.steps}.{m.id}", "population", trainer.run_id, cfg.steps, m.id, STUDENT,
                                         str(ckpt / "adapters" / m.id)) for m in students]
            after = Plan(spec, entrants, configs, checkpoints, before.out)
            adapters.update({e.id: e.member for e in entrants[1:]})
            done = league.answer_panel(after, tasks, trainer.backend, adapters, trainer.verifier, log)
            result.league = league.results(after, tasks, done)
            result.seconds["panel_after"] = time.perf_counter() - t2
            write_atomic(before.out / league.RESULTS_FILE, json.dumps(result.league, indent=1))
        finally:
            trainer.close()
    k, n = _counts(result.league, done)
    result.change = panel_change.panel_change(k, n, 0, range(1, len(k)), result.league["model"], panel.n_boot, panel.seed)
    result.seconds["total"] = time.perf_counter() - t0
    return result


def _counts(data: dict, done: dict) -> tuple[np.ndarray, np.ndarray]:
    """The league's count matrices (students x tasks) from its finished pairs, rows in its students' order."""
    students, tasks = [s["id"] for s in data["students"]], [t["id"] for t in data["tasks"]]
    k, n = np.zeros((len(students), len(tasks))), np.zeros((len(students), len(tasks)))
    for i, s in enumerate(students):
        for j, t in enumerate(tasks):
            answers = done.get((s, t), [])
            k[i, j], n[i, j] = sum(answers), len(answers)
    return k, n


def figures(result: LearnRun, preset: str, cfg: TrainConfig, overrides: list[str], window: int) -> dict:
    """The JSON ``bench learn --model embedded`` prints: ``start`` / ``end`` (base / trained panel solve rate),
    ``rise`` and ``interval`` (the paired difference's 95% interval) at the top, as ``bench learn``'s planted
    figures; the abilities, each role's reward curve and its start -> end (mean of the first / last ``window``
    steps; one run: no interval), the settings and the seconds."""
    ch = result.change
    out = {"model": cfg.model.base, "backend": cfg.model.backend, "preset": preset, "overrides": list(overrides),
           "steps": cfg.steps, "window": window, **{k: ch[k] for k in ("start", "end", "rise", "interval", "p", "tasks")},
           "solve_rate": ch["solve_rate"], "ability": ch["ability"],
           "settings": {"lr": cfg.optim.lr, "temperature": cfg.tasks.temperature, "rollouts": cfg.tasks.rollouts,
                        "tasks_per_teacher": cfg.tasks.tasks_per_teacher, "teachers": cfg.population.teachers,
                        "students": cfg.population.students, "lora_rank": cfg.model.lora_rank,
                        "threads": os.environ.get("OMP_NUM_THREADS")},
           "seconds": {k: round(v, 1) for k, v in result.seconds.items()},
           "league_students": [{k: s[k] for k in ("id", "solve_rate", "solved", "answers", "ability")}
                               for s in result.league["students"]],
           "diagnostics": {k: [None if v is None else round(float(v), 4) for v in vs] for k, vs in result.diagnostics.items()}}
    for role, curve in result.rewards.items():
        c = np.asarray(curve, dtype=float)
        w = min(window, len(c))
        with np.errstate(all="ignore"):
            start, end = (float(np.nanmean(c[:w])), float(np.nanmean(c[-w:]))) if w else (np.nan, np.nan)
        out[role] = {"start": start, "end": end, "rise": end - start, "interval": None,
                     "curve": [round(float(x), 4) for x in c]}
    return out


def save(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=1))
