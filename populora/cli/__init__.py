"""The ``populora`` command line: every command's parser and the one dispatch (this module), and the commands
that belong to no layer below: training and sweeps (``training``), the store and the job queue (``store``,
``experiments``), benches, figures, the league and supervised restarts. The top of the layers: nothing imports it.

    populora train --config configs/smoke.yaml [--set key=value ...] [--baseline] [--resume RUN_ID]
    populora train --resume RUN_ID [--step N]
    populora train --fork RUN_ID --step N [--set key=value ...]
    populora diff RUN_A[/MEMBER] RUN_B[/MEMBER]
    populora sweep --config FILE [--grid key=v1,v2 ...] [--seeds N] [--baseline] [--parallel K] [--wait]
    populora sweep --fork RUN_ID --step N --grid key=v1,v2 [--seeds N] [--parallel K] [--wait]
    populora export --run RUN_ID --member M --out DIR [--merge] [--register NAME]
    populora runs [RUN_ID] [--reap] [--json]
    populora jobs [--stop JOB_ID]
    populora prompts --config FILE [--kind K] [--role teacher|student] [--json]
    populora sandbox exec PROGRAM.py | sandbox check TASK.json
    populora bench lora|step|evolve|verifier|eval|threads|scale|vllm|stats|all [--json]
    populora eval --run RUN_ID | populora report --run RUN_ID | populora data verify|fetch
    populora figures --run RUN_ID | --sweep SWEEP_ID [--out DIR]
    populora league --runs A,B [--steps 1,2] [--members ...] [--wait]
    populora ui [--host H] [--port P]

This module holds the parser of every command and the one dispatch: ``_command`` imports the module that runs
the chosen command, and only that one (most of them load torch, for seconds). So ``populora --help`` and
``populora <command> --help`` load argparse and little else. The commands: ``cli/training.py`` (train, sweep,
plan, export, prompts), ``cli/store.py`` (runs, jobs), ``cli/bench.py``, and each layer's own cli module
(``evaluation/cli.py``: eval, report, data; ``training/tasks/cli.py``: sandbox; ``platform/sandbox/cli.py``: bench
verifier; ``ui/cli.py``: ui).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import warnings

import populora
from populora.cli.bench_names import BENCHES
from populora.platform.diskspace import DiskFull
from populora.platform.jobs.stopping import stop_code, stop_on_sigterm
from populora.ui.cli import ui_main  # argparse and the standard library only: Streamlit starts in a child process

# Keep third-party chatter (gguf de-quantisation bars, HF warnings) out of the user's way.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"(peft|transformers|torch)\.")
warnings.filterwarnings("ignore", category=FutureWarning, module=r"(peft|transformers)\.")

# commands that parse their own argv (their --help included) in the module that runs them
OWN_PARSER = ("prompts", "data", "sandbox", "bench", "eval", "report", "ui", "league")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora", description="Population-based self-play post-training with LoRA adapters")
    p.add_argument("--version", action="version", version=f"{populora.__distribution__} {populora.__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a population (or the single-agent baseline)")
    t.add_argument("--config", help="YAML preset, e.g. configs/smoke.yaml (default: built-in defaults)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value, e.g. --set steps=10")
    t.add_argument("--resume", metavar="RUN_ID", help="continue a stopped or failed run from its newest intact checkpoint "
                   "(or --step N's)")
    t.add_argument("--fork", metavar="RUN_ID", help="a new run continuing this run's checkpoint --step (its full state) "
                   "with the --set changes; settings the checkpoint was built with (base, rank, model) are refused; "
                   "its run name is 'NAME · fork of RUN @N' unless --set name=... gives another")
    t.add_argument("--step", type=int, metavar="N", help="with --fork or --resume: the checkpoint's step (see populora runs RUN_ID)")
    t.add_argument("--force", action="store_true", help="with --resume: take the run from a trainer on another machine "
                   "you know is dead (a resume is refused while the run's trainer may be alive; one on this machine "
                   "is checked, never forced)")
    t.add_argument("--ray", metavar="ADDRESS", help="run on Ray: 'local' (start one here), 'auto' or ray://host:port (a cluster)")
    t.add_argument("--quiet", action="store_true", help="no progress bar: one plain line per step instead (for logs)")
    t.add_argument("--baseline", action="store_true", help="then train the compute-matched single-agent baseline "
                   "(the population's per-step shape, trained until its per-adapter ledger equals the population's "
                   "within 5%%: budget.population, see populora.training.compute.budget), the two runs linked")
    t.add_argument("--max-restarts", type=int, default=0, metavar="N", help="resume the run from its last checkpoint "
                   "after a transient failure (a lost worker, a killed process, the store unreachable), with backoff, "
                   "up to N times; never after a stop or the same failure at the same step twice (default 0)")

    sw = sub.add_parser("sweep", help="grid x seeds (+ baselines) of training runs, K at a time, resumable")
    sw.add_argument("--config", help="YAML preset every run starts from, e.g. configs/smoke.yaml")
    sw.add_argument("--fork", metavar="RUN_ID", help="every run is a fork of this run's checkpoint --step (populora "
                    "train --fork) with its grid values and seed, instead of a run from scratch")
    sw.add_argument("--step", type=int, metavar="N", help="with --fork: the checkpoint's step (see populora runs RUN_ID)")
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                    help="an axis of the grid (repeatable; cartesian product); keys varied together: "
                         "population.teachers,population.students=1:1,4:4")
    sw.add_argument("--seeds", type=int, default=1, help="seeds per configuration: seed, seed+1, ... (default 1)")
    sw.add_argument("--baseline", action="store_true", help="also the compute-matched single-agent baseline of each seed "
                    "(trained to its seed's population's per-adapter ledger)")
    sw.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    sw.add_argument("--parallel", type=int, default=1, metavar="K", help="runs at a time (default 1)")
    sw.add_argument("--ray", metavar="ADDRESS", help="submit the runs as Ray Jobs to this cluster")
    sw.add_argument("--max-restarts", type=int, default=0, metavar="N", help="each run: resumed after a transient "
                    "failure up to N times, as populora train --max-restarts (default 0)")
    sw.add_argument("--id", help="name the sweep (default: sw-<hash of the plan>, so the same command resumes it)")
    sw.add_argument("--dry-run", action="store_true", help="print the planned runs, start nothing")
    sw.add_argument("--json", action="store_true", help="last line: one JSON object (with --dry-run: the runs)")
    sw.add_argument("--wait", action="store_true", help="run here until every run ends; exit 1 if any failed")

    ex = sub.add_parser("export", help="a member's adapter as a PEFT dir, or merged into the base (--merge)")
    ex.add_argument("--run", required=True, help="MLflow run id of the training run")
    ex.add_argument("--member", required=True, help="member id, e.g. S0 (B0 for a baseline run)")
    ex.add_argument("--out", required=True, help="directory to write (must not exist or be empty)")
    ex.add_argument("--merge", action="store_true", help="merge the adapter into the base: a standard HF model dir")
    ex.add_argument("--register", metavar="NAME", help="also register it in the MLflow model registry as NAME")

    pl = sub.add_parser("plan", help="memory per GPU, compute per step and whether a config fits, before launching")
    pl.add_argument("--config", help="YAML preset, e.g. configs/paper-4t4s.yaml")
    pl.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    pl.add_argument("--gpu", default="h100-80gb", choices=["h100-80gb", "a100-80gb", "a100-40gb", "l40s-48gb", "rtx4090-24gb"])
    pl.add_argument("--gpus", type=int, default=1, help="GPUs (Ray model workers), each holding the base; the plan models both ray.placement values (data_parallel: every adapter on every GPU, rows dealt over all; by_member: a member never spans GPUs) and reports the config's")
    pl.add_argument("--arch-config", metavar="CONFIG_JSON", help="the base's config.json when it is not local, cached or in the shipped table")
    pl.add_argument("--json", action="store_true", help="last line: the plan as one JSON object")

    d = sub.add_parser("diff", help="only the settings that differ between two runs, or two members (RUN/MEMBER)")
    d.add_argument("a", metavar="RUN_A[/MEMBER]", help="a run id, or run id/member id (e.g. abc123/S2)")
    d.add_argument("b", metavar="RUN_B[/MEMBER]", help="the other run, or member (RUN/MEMBER; /MEMBER alone: of RUN_A)")
    d.add_argument("--json", action="store_true", help="the differences as one JSON list of {setting, a, b}")

    r = sub.add_parser("runs", help="list training runs in the MLflow store, or one run's members (populora runs RUN_ID)")
    r.add_argument("run_id", nargs="?", help="show this run's members: status, rating now and at its peak, origin, compute")
    r.add_argument("--limit", type=int, default=50)
    r.add_argument("--ancestry", metavar="MEMBER", help="with RUN_ID: the member's ancestry record, every ancestor up to "
                   "the base (parents, operator, strength, step, ratings at birth and death, settings, paths, scores)")
    r.add_argument("--json", action="store_true", help="one JSON document instead of text: the runs listed, RUN_ID's "
                   "members, or --ancestry's record (YAML without it)")
    r.add_argument("--format", choices=["json", "yaml"], default="yaml", help=argparse.SUPPRESS)  # deprecated: --json
    r.add_argument("--out", metavar="FILE", help="write --ancestry's record to FILE instead of printing it")
    r.add_argument("--reap", action="store_true", help="end FAILED the runs shown crashed (running, but no heartbeat "
                   "for POPULORA_HEARTBEAT_LIMIT_S, default 120 s) whose trainer is not alive on this machine")

    jb = sub.add_parser("jobs", help="the job queue training, sweep and evaluation jobs share: running, waiting (with their place), recent")
    jb.add_argument("--stop", metavar="JOB_ID", help="stop this job (a queued one never starts)")
    jb.add_argument("--limit", type=int, default=10, help="recent jobs listed (default 10)")

    sub.add_parser("prompts", help="print the prompts a run would send (populora prompts --config FILE [--json])", add_help=False)
    sub.add_parser("data", help="benchmark data: populora data verify|fetch [--data-dir DIR]", add_help=False)
    sub.add_parser("sandbox", help="run or check a program in the sandbox (see: populora sandbox --help)", add_help=False)
    sub.add_parser("bench", help=f"benchmarks: populora bench {'|'.join(BENCHES)}|all [--json]", add_help=False)
    sub.add_parser("eval", help="score a run's adapters on the ten benchmarks (populora eval --help)", add_help=False)
    sub.add_parser("report", help="member-vs-baseline table of an evaluated run", add_help=False)
    sub.add_parser("ui", help="serve the web UI on 127.0.0.1:8501 (populora ui --help)", add_help=False)

    fg = sub.add_parser("figures", help="the paper's figure set of a run or a sweep: PNG, SVG, PDF, CSV, captions")
    which = fg.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", help="a training run id (drawn with its baseline: --baseline, else its linked one)")
    which.add_argument("--sweep", help="a sweep id: each configuration's mean over seeds with a band, and the baseline")
    fg.add_argument("--baseline", help="with --run: the baseline run to compare with")
    fg.add_argument("--out", help="folder the files go to (default: figures/<run or sweep id>)")
    fg.add_argument("--uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else ./mlflow.db)")
    fg.add_argument("--formats", default="png,svg,pdf", help="comma-separated, among png, svg, pdf (default: all three)")
    fg.add_argument("--x", default="step", choices=["step", "compute"], help="the per-step curves against the step "
                    "(default) or per-adapter compute, the runs' ledgers (arms compared at equal spend)")
    sub.add_parser("league", help="runs' members, baseline and base model on one scale of ability and task "
                   "difficulty, on a fixed task panel (populora league --help)", add_help=False)
    return p


def _command(name: str, argv: list[str]):
    """(the function that runs command ``name``, the errors it reports as bad input: one line, exit 2). The one
    place our command modules are imported inside a function: each only when its command runs, since most load
    torch (seconds) and ``populora --help`` needs none of them."""
    if name == "bench" and argv[:1] == ["verifier"]:  # the sandbox's own bench, its own options: no torch
        from populora.platform.sandbox.cli import bench_verifier_main

        return lambda rest: bench_verifier_main([a for a in rest[1:] if a != "--tiny"]), ()
    if name == "bench" and argv[:1] == ["stats"]:  # the verdict's calibration: numpy and scipy, no torch
        from populora.evaluation.statistics.calibration import main as bench_stats_main

        return lambda rest: bench_stats_main(rest[1:]), ()
    if name in ("eval", "report", "data"):  # they report their own bad input
        from populora.evaluation.cli import COMMANDS

        return COMMANDS[name], ()
    if name == "ui":
        return ui_main, ()
    if name == "league":  # reports its own bad input
        from populora.cli.league import league_main

        return league_main, ()
    if name == "sandbox":  # exec needs no task kind: kept apart from the training commands' imports
        from populora.training.tasks.cli import sandbox_main

        return sandbox_main, ()
    if name in ("runs", "jobs", "diff"):
        from populora.cli import store as module
    elif name == "bench":
        from populora.cli import bench as module
    elif name == "figures":
        from populora.cli import figures as module
    else:  # train, sweep, plan, export, prompts
        from populora.cli import training as module
    return module.COMMANDS[name], module.BAD_INPUT


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if argv and argv[0] in OWN_PARSER:
        run, _ = _command(argv[0], argv[1:])
        if argv[0] in ("eval", "league"):
            stop_on_sigterm()  # a stopped evaluation ends like a stopped training: one line, exit 143
        try:
            return run(argv[1:])
        except DiskFull as err:  # eval, league, report: one line, what was written where, then run it again
            print(f"error: {err}", file=sys.stderr)
            return 1
    if argv and argv[0] == "train":
        stop_on_sigterm()  # before the seconds of torch imports and model loading, not after them
    args = build_parser().parse_args(argv)
    try:
        run, bad_input = _command(args.command, [])
    except KeyboardInterrupt as err:
        if args.command != "train":
            raise
        print("\nstopped before the first step", flush=True)  # while torch loads: as a stop during the set-up
        return stop_code(err)
    try:
        return run(args)
    except bad_input as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except DiskFull as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def entry() -> None:
    """The process's entry point (the ``populora`` script, ``python -m populora.cli``): ``main``, then exit.

    Before exiting, ``gc.freeze()``: the interpreter's shutdown runs one last full garbage collection over every
    object still alive, and a command that loaded torch, transformers and MLflow holds millions; measured 3.9 s
    of CPU between a run's "done" and its exit on a quiet machine (80 s under load), paid by every job, sweep and
    test that waits for a ``populora`` process. Frozen objects are out of that collection's reach, and the
    memory goes back with the process; the atexit handlers (MLflow's flush, the sandbox pool's shutdown) run as
    before. Not in ``main``: the tests call it in their own long-lived process."""
    code = main()
    gc.freeze()
    sys.exit(code)
