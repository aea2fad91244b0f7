"""``populora train``, ``sweep``, ``plan``, ``export`` and ``prompts``: the commands that read a training config or
a trained run. Imported only when one of them runs (``populora.cli`` dispatches here): the training
package loads torch at import (its operators), so ``populora --help`` must not import this module."""

from __future__ import annotations

import json
import sys
import uuid

from populora.cli import restarts
from populora.evaluation import export as export_adapter
from populora.evaluation.statistics import power
from populora.platform import config as config_io
from populora.platform.jobs import jobs, terminal
from populora.platform.store import runlayout as rl
from populora.platform.store import sweep as S
from populora.platform.config import ConfigError
from populora.platform.diskspace import DiskFull
from populora.platform.model.models import ModelError
from populora.platform.plan import PlanError
from populora.platform.jobs.stopping import stop_code
from populora.platform.store.tracking import tracking_uri
from populora.training import TrainConfig, matched_baseline
from populora.training.run import oom, sweep as sweeps
from populora.training.compute.baseline import too_small
from populora.training.compute import budget
from populora.training.compute.budget import BudgetError
from populora.training.run.checkpoint import CheckpointError
from populora.training.loop import Trainer
from populora.training.run.run_log import refuse_resume
from populora.training.tasks.show import prompts_main
from populora.training.compute.workload import make_plan, render

# bad input of these commands: one line on stderr, exit 2 (no traceback)
BAD_INPUT = (ConfigError, ModelError, CheckpointError, PlanError)


def train(args) -> int:
    """Train (with ``--baseline``: the population, then its compute-matched baseline, linked); a stop (Ctrl-C, SIGTERM, the UI's Stop) ends with one line saying how to resume, no traceback, and
    the stop's exit code. The run is already ended KILLED in MLflow by the trainer. A transient failure (a lost
    worker, the store unreachable) ends with one line and exit 75 (``restart.TEMPFAIL``: a supervisor with restarts
    left resumes it); a CUDA out-of-memory with the setting to lower (training/run/oom.py). ``--max-restarts N``: run
    under a supervisor here that does the restarts (``restarts.train_supervised``)."""
    if getattr(args, "force", False) and not args.resume:
        print("error: --force takes a run from a trainer on another machine known dead: it goes with --resume RUN_ID",
              file=sys.stderr)
        return 2
    if args.max_restarts:
        return restarts.train_supervised(args)
    trainer = None
    try:
        configs = _configs(args)
        if args.resume:  # refused at once while its trainer lives, not after a wait in the queue (lease.py)
            refuse_resume(args.resume, getattr(args, "force", False))
        if args.fork and args.step is not None:  # a step its live trainer has not written: said now, not after the wait
            Trainer.refuse_fork(args.fork, args.step)
        need = max([c.ray.job_slots() for c in configs if c is not None] or [1])  # a resume or fork: one slot
        argv = ["train", *restarts.own_argv(args)] + (["--baseline"] if args.baseline else [])
        with terminal.in_line(argv, terminal.name_of(argv), need, say=lambda m: print(m, flush=True)):
            trainer = _train_all(args, configs)
        if trainer is None:
            return 2
    except KeyboardInterrupt as err:
        trainer = getattr(err, "trainer", trainer)
        print("\n" + (trainer.stop_line() if trainer is not None else "stopped before the first step"), flush=True)
        return stop_code(err)
    except (DiskFull, BudgetError) as err:  # the run is already FAILED in MLflow with this line as its error; not transient
        print(f"\nerror: {err}", file=sys.stderr, flush=True)
        return 1
    except _Failed as failed:  # the run is already FAILED in MLflow (or, store unreachable, shown crashed)
        code = restarts.failure_code(failed.err, failed.trainer)
        if code is None:  # any other error: its traceback (the run's error.txt has it too)
            raise failed.err from None
        return code
    _where(trainer)
    return 0


class _Failed(Exception):
    """A training's error with the trainer it happened in (the exit code and line are read from both)."""

    def __init__(self, err: Exception, trainer):
        super().__init__(str(err))
        self.err, self.trainer = err, trainer


def _train_all(args, configs: list):
    """Train each config in order (a population, then its baseline), then the linked baseline a resumed population
    extends; the last trainer (None: refused, the line printed)."""
    trainer = None
    try:
        for cfg in configs:
            trainer = _start_trainer(args, cfg)
            if trainer is None:
                return None
            oom.write_advice(rl.job_dir_from_env(), trainer.cfg)  # for the supervisor, if the OOM killer strikes
            try:
                trainer.train(progress=not args.quiet)
            finally:  # finished, stopped or failed: its vLLM engine and Ray workers end with it
                trainer.close()
        if args.resume and (extend := budget.baseline_to_extend(trainer.log.tracker, trainer.run_id)):
            print(f"the linked baseline {extend} was matched to this population's spend while it was stopped: "
                  f"resuming it to the population's final spend", flush=True)
            trainer = Trainer.resume(extend)
            try:
                trainer.train(progress=not args.quiet)
            finally:
                trainer.close()
    except KeyboardInterrupt as err:
        err.trainer = trainer  # the stop line is the trainer's
        raise
    except (DiskFull, BudgetError):
        raise
    except Exception as err:
        raise _Failed(err, trainer) from err
    return trainer


def _configs(args) -> list:
    """The configs to train, in order: [None] for a resume; the config; with --baseline, the config and its
    compute-matched single-agent baseline (``matched_baseline``), sharing a ``pair`` id that links the two runs."""
    if args.resume or args.fork:
        return [None]
    if args.step is not None:
        raise config_io.ConfigError("--step names the checkpoint of --fork RUN_ID or --resume RUN_ID; add one of them")
    overrides = list(args.set) + ([f"ray.address={args.ray}"] if args.ray else [])
    cfg = config_io.load(TrainConfig, args.config, overrides)
    if not args.baseline:
        return [cfg]
    if cfg.population.single_agent:
        raise config_io.ConfigError("--baseline adds the single-agent baseline of a population; this config is "
                                    "already a baseline (population.single_agent=true): drop --baseline")
    cfg.pair = cfg.pair or uuid.uuid4().hex[:12]
    small = too_small(cfg)
    if small:  # at launch: a design too small to compute-match says so now, not as a silent 2.0x at the end
        print(f"warning: population {cfg.name} {small}", file=sys.stderr, flush=True)
    return [cfg, matched_baseline(cfg)]


def _start_trainer(args, cfg):
    if args.resume:
        if args.config or args.set or args.baseline or args.fork:
            print("error: --resume continues a run with its own config; drop --config/--set/--baseline/--fork", file=sys.stderr)
            return None
        trainer = Trainer.resume(args.resume, args.step, force=getattr(args, "force", False))
        for note in trainer.resume_notes:  # newer checkpoints found damaged, and the one it resumes from
            print(f"warning: {note}", file=sys.stderr, flush=True)
        print(f"resuming run {trainer.run_id} at step {trainer.step_index}/{trainer.cfg.steps}", flush=True)
    elif args.fork:
        if args.config or args.baseline or args.step is None:
            print("error: --fork RUN_ID --step N starts from that run's checkpoint and config: give --step, change "
                  "settings with --set, drop --config/--baseline", file=sys.stderr)
            return None
        trainer = Trainer.fork(args.fork, args.step, list(args.set) + ([f"ray.address={args.ray}"] if args.ray else []))
        print(f"run {trainer.run_id}: {trainer.log.note}, trains steps {trainer.step_index + 1}-{trainer.cfg.steps}, "
              f"run dir {trainer.run_dir}", flush=True)
    else:
        trainer = Trainer.create(cfg)
        if trainer.seed_report is not None:
            print(trainer.seed_report.summary(), flush=True)
        print(f"run {trainer.run_id}: {cfg.name} ({'single-agent baseline' if cfg.population.single_agent else f'{cfg.population.teachers} teachers + {cfg.population.students} students'}), "
              f"{cfg.steps} steps, run dir {trainer.run_dir}", flush=True)
    return trainer


def _where(trainer) -> None:
    uri = tracking_uri()
    print(f"\ndone: run {trainer.run_id} in MLflow store {uri}")
    print(f"  adapters (PEFT dirs): {trainer.run_dir / 'adapters'}")
    print(f"  look at it:  mlflow ui --backend-store-uri {uri}      (then open http://127.0.0.1:5000)")
    print("  list runs:   populora runs")


def sweep(args) -> int:
    if args.fork or args.step is not None:
        if not args.fork or args.step is None or args.config or args.baseline or args.ray:
            raise ConfigError("a fork sweep is --fork RUN_ID --step N (every run continues that checkpoint with its "
                              "config): give both, drop --config/--baseline/--ray")
        runs = sweeps.plan_fork(args.fork, args.step, args.grid, args.seeds, list(args.set))
    else:
        runs = sweeps.plan(args.config, args.grid, args.seeds, args.baseline, list(args.set), args.ray)
    sid = args.id or sweeps.sweep_id(runs)
    for line in sweeps.match_warnings(runs):  # at launch: a design too small to compute-match says so now
        print(line, file=sys.stderr, flush=True)
    if args.dry_run:
        for r in runs:
            print(f"{r.key:50} {r.name}")
        mde = power.planned(args.seeds)
        print(f"power: {mde['words']} (before launch: assumed base scores; docs/evaluation.md)")
        if args.json:
            print(json.dumps({**sweeps.dry_run_json(sid, runs), "mde": mde}))
        return 0
    if not args.wait:  # the driver itself becomes a background job, so the sweep outlives this shell
        argv = [sys.executable, "-m", "populora.cli", *_sweep_argv(args), "--id", sid, "--wait"]
        job = jobs.start(argv, name=f"sweep {sid}", env={"MLFLOW_TRACKING_URI": tracking_uri()},
                         root=S.sweeps_dir() / sid / "driver")
        print(f"sweep {sid}: {len(runs)} runs started in the background (driver job {job.id}, log {job.log_path}); "
              f"follow it with: populora runs, or the UI's Runs page")
        if args.json:
            print(json.dumps({"sweep": sid, "driver_job": job.id, "runs": len(runs)}))
        return 0
    code = sweeps.Driver(sid, runs, args.ray, log=lambda m: print(m, flush=True),
                         max_restarts=args.max_restarts).run(args.parallel)
    if args.json:
        print(json.dumps({"sweep": sid, "failed": bool(code)}))
    return code


def _sweep_argv(args) -> list[str]:
    """The sweep's own command line again (for its background driver)."""
    out = ["sweep"] + (["--config", args.config] if args.config else [])
    out += ["--fork", args.fork, "--step", str(args.step)] if args.fork else []
    out += [a for g in args.grid for a in ("--grid", g)] + [a for s in args.set for a in ("--set", s)]
    out += ["--seeds", str(args.seeds), "--parallel", str(args.parallel)] + (["--baseline"] if args.baseline else [])
    out += ["--max-restarts", str(args.max_restarts)] if args.max_restarts else []
    return out + (["--ray", args.ray] if args.ray else [])


def plan(args) -> int:
    cfg = config_io.load(TrainConfig, args.config, args.set)
    result = make_plan(cfg, args.gpu, args.gpus, args.arch_config)
    print(render(result))
    result["mde"] = {"one_seed": power.planned(1), "three_seeds": power.planned(3)}
    print(f"power (vs the baseline, all ten benchmarks): {result['mde']['one_seed']['words']}; "
          f"{result['mde']['three_seeds']['words']} (`populora sweep --seeds 3 --baseline`)")
    if args.json:
        print(json.dumps(result))
    return 0


def export(args) -> int:
    return export_adapter.main(args)


# fn(args) parsed by ``populora.cli.build_parser``; prompts: fn(argv), parsing its own
COMMANDS = {"train": train, "sweep": sweep, "plan": plan, "export": export, "prompts": prompts_main}
