"""The ``populora`` command line.

    populora train --config configs/smoke.yaml [--set key=value ...] [--baseline] [--resume RUN_ID]
    populora sweep --config FILE [--grid key=v1,v2 ...] [--seeds N] [--baseline] [--parallel K] [--wait]
    populora export --run RUN_ID --member M --out DIR [--merge] [--register NAME]
    populora runs
    populora jobs [--stop JOB_ID]
    populora prompts --config FILE [--kind K] [--role teacher|student] [--json]
    populora sandbox exec PROGRAM.py | sandbox check TASK.json
    populora bench lora|step|evolve|verifier|eval|threads|scale|vllm|all [--json]
    populora eval --run RUN_ID | populora report --run RUN_ID | populora data verify|fetch
    populora ui [--host H] [--port P]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import uuid
import warnings

from populora.platform.stopping import stop_code, stop_on_sigterm
from populora.platform import config as config_io
from populora.training import TrainConfig, matched_baseline

# Keep third-party chatter (gguf de-quantisation bars, HF warnings) out of the user's way.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"(peft|transformers|torch)\.")
warnings.filterwarnings("ignore", category=FutureWarning, module=r"(peft|transformers)\.")


def _train(args) -> int:
    """Train (with ``--baseline``: the population, then its compute-matched baseline, linked); a stop (Ctrl-C, SIGTERM, the UI's Stop) ends with one line saying how to resume, no traceback, and
    the stop's exit code. The run is already ended KILLED in MLflow by the trainer."""
    trainer = None
    try:
        for cfg in _configs(args):
            trainer = _start_trainer(args, cfg)
            if trainer is None:
                return 2
            trainer.train(progress=not args.quiet)
    except KeyboardInterrupt as err:
        print("\n" + (trainer.stop_line() if trainer is not None else "stopped before the first step"), flush=True)
        return stop_code(err)
    except Exception as err:
        from populora.platform.backends.data_parallel import WorkerLost

        if not isinstance(err, WorkerLost):
            raise
        # the run is already FAILED in MLflow; say which run to resume rather than a traceback of Ray internals
        where = trainer.stop_line() if trainer is not None else "lost while the run was being set up: run the same command again"
        print(f"\nerror: {err}\n{where}", file=sys.stderr, flush=True)
        return 1
    _where(trainer)
    return 0


def _configs(args) -> list:
    """The configs to train, in order: [None] for a resume; the config; with --baseline, the config and its
    compute-matched single-agent baseline (``matched_baseline``), sharing a ``pair`` id that links the two runs."""
    if args.resume:
        return [None]
    overrides = list(args.set) + ([f"ray.address={args.ray}"] if args.ray else [])
    cfg = config_io.load(TrainConfig, args.config, overrides)
    if not args.baseline:
        return [cfg]
    if cfg.population.single_agent:
        raise config_io.ConfigError("--baseline adds the single-agent baseline of a population; this config is "
                                    "already a baseline (population.single_agent=true): drop --baseline")
    cfg.pair = cfg.pair or uuid.uuid4().hex[:12]
    return [cfg, matched_baseline(cfg)]


def _start_trainer(args, cfg):
    from populora.training.loop import Trainer

    if args.resume:
        if args.config or args.set or args.baseline:
            print("error: --resume continues a run with its own config; drop --config/--set/--baseline", file=sys.stderr)
            return None
        trainer = Trainer.resume(args.resume)
        print(f"resuming run {trainer.run_id} at step {trainer.step_index}/{trainer.cfg.steps}", flush=True)
    else:
        trainer = Trainer.create(cfg)
        if trainer.seed_report is not None:
            print(trainer.seed_report.summary(), flush=True)
        print(f"run {trainer.run_id}: {cfg.name} ({'single-agent baseline' if cfg.population.single_agent else f'{cfg.population.teachers} teachers + {cfg.population.students} students'}), "
              f"{cfg.steps} steps, run dir {trainer.run_dir}", flush=True)
    return trainer


def _where(trainer) -> None:
    from populora.platform.tracking import tracking_uri

    uri = tracking_uri()
    print(f"\ndone: run {trainer.run_id} in MLflow store {uri}")
    print(f"  adapters (PEFT dirs): {trainer.run_dir / 'adapters'}")
    print(f"  look at it:  mlflow ui --backend-store-uri {uri}      (then open http://127.0.0.1:5000)")
    print("  list runs:   populora runs")


def _sweep(args) -> int:
    import json

    from populora.training import sweep

    runs = sweep.plan(args.config, args.grid, args.seeds, args.baseline, list(args.set), args.ray)
    sid = args.id or sweep.sweep_id(runs)
    if args.dry_run:
        for r in runs:
            print(f"{r.key:50} {r.name}")
        if args.json:
            print(json.dumps(sweep.dry_run_json(sid, runs)))
        return 0
    if not args.wait:  # the driver itself becomes a background job, so the sweep outlives this shell
        from populora.platform import jobs
        from populora.platform import sweep as S
        from populora.platform.tracking import tracking_uri

        argv = [sys.executable, "-m", "populora.cli", *_sweep_argv(args), "--id", sid, "--wait"]
        job = jobs.start(argv, name=f"sweep {sid}", env={"MLFLOW_TRACKING_URI": tracking_uri()},
                         root=S.sweeps_dir() / sid / "driver")
        print(f"sweep {sid}: {len(runs)} runs started in the background (driver job {job.id}, log {job.log_path}); "
              f"follow it with: populora runs, or the UI's Runs page")
        if args.json:
            print(json.dumps({"sweep": sid, "driver_job": job.id, "runs": len(runs)}))
        return 0
    code = sweep.Driver(sid, runs, args.ray, log=lambda m: print(m, flush=True)).run(args.parallel)
    if args.json:
        print(json.dumps({"sweep": sid, "failed": bool(code)}))
    return code


def _sweep_argv(args) -> list[str]:
    """The sweep's own command line again (for its background driver)."""
    out = ["sweep"] + (["--config", args.config] if args.config else [])
    out += [a for g in args.grid for a in ("--grid", g)] + [a for s in args.set for a in ("--set", s)]
    out += ["--seeds", str(args.seeds), "--parallel", str(args.parallel)] + (["--baseline"] if args.baseline else [])
    return out + (["--ray", args.ray] if args.ray else [])


def _export(args) -> int:
    from populora.evaluation import export

    return export.main(args)


def _runs(args) -> int:
    from populora.platform import runlayout
    from populora.platform.tracking import client, tracking_uri

    if args.run_id:
        from mlflow.exceptions import MlflowException

        from populora.platform.run_detail import render

        try:
            print(render(client(), args.run_id))
        except MlflowException as err:
            print(f"error: no run {args.run_id!r} in {tracking_uri()} ({err.message[:100]}); list them with: populora runs",
                  file=sys.stderr)
            return 2
        return 0
    runs = runlayout.list_runs(client(), args.limit)  # the UI's Runs page reads the same rows
    if not runs:
        print(f"no PopuLoRA runs in {tracking_uri()} (start one with: populora train --config configs/smoke.yaml)")
        return 0
    print(f"{'run id':34} {'name':18} {'kind':10} {'status':9} {'progress':9} {'solve':>6} {'valid':>6}")
    for r in runs:
        solve, valid = r["solve_rate"], r["validity_rate"]
        print(f"{r['run_id']:34} {r['name'][:18]:18} {r['kind']:10} {r['mlflow_status']:9} {r['progress'] or '?':9} "
              f"{'' if solve is None else f'{solve:.0%}':>6} {'' if valid is None else f'{valid:.0%}':>6}")
    return 0


def _jobs(args) -> int:
    """The machine's one job queue (the UI reads the same one): what holds a slot, what waits and in which place,
    then the recent jobs of the jobs dir that have ended."""
    from populora.platform import jobs, queue

    if args.stop:
        found = {e.job.id: e.job for e in queue.snapshot()} | {j.id: j for j in jobs.list_jobs()}
        if args.stop not in found:
            print(f"error: no job {args.stop!r} in the queue ({queue.queue_dir()}) or the jobs dir ({jobs.jobs_dir()}); "
                  f"list them with: populora jobs", file=sys.stderr)
            return 2
        print(f"{args.stop}: {jobs.stop(found[args.stop])}")
        return 0
    rows = queue.snapshot()
    print(f"queue {queue.queue_dir()}: {queue.max_parallel()} slot(s), {sum(e.position is None for e in rows)} running, "
          f"{sum(e.position is not None for e in rows)} waiting")
    line = "{:8} {:5} {:9} {:24} {}"
    print(line.format("place", "kind", "status", "job id", "name"))
    for e in rows:
        print(line.format(f"#{e.position}" if e.position else "slot", e.job.kind, e.status, e.job.id, e.job.name))
    queued = {e.job.id for e in rows}
    ended = [j for j in jobs.list_jobs()[: args.limit] if j.id not in queued]
    if ended:
        print(f"\nrecent jobs in {jobs.jobs_dir()}:")
        for j in ended:
            print(line.format("", j.kind, j.status, j.id, j.name))
    return 0


def _sandbox(argv: list[str]) -> int:
    from populora.training.tasks.cli import sandbox_main  # exec, plus check (which needs the task kinds)

    return sandbox_main(argv)


BENCHES = ("lora", "step", "evolve", "verifier", "eval", "threads", "vllm")  # all: every one but eval and vllm


def _bench(argv: list[str]) -> int:
    import json

    if argv[:1] == ["scale"]:  # data-parallel workers on Ray: its own options (--workers 1,2, --device, ...)
        from populora.platform.scale_bench import main as bench_scale_main

        return bench_scale_main(argv[1:])
    if argv[:1] in (["verifier"], ["eval"]):  # their own options (-n, --as-user, --targets, ...): their own parsers
        from populora.evaluation.cli import bench_eval_main
        from populora.platform.sandbox.cli import bench_verifier_main

        if argv[0] == "verifier":
            return bench_verifier_main([a for a in argv[1:] if a != "--tiny"])
        return bench_eval_main(["--tiny-random" if a == "--tiny" else a for a in argv[1:]])
    p = argparse.ArgumentParser(prog="populora bench", description="speed ratios measured side by side in one run; "
                                "`populora bench verifier|eval|scale --help` for theirs")
    p.add_argument("which", choices=[*BENCHES, "all"])
    p.add_argument("--json", action="store_true", help="last line: one JSON object of the figures")
    p.add_argument("--tiny", action="store_true", help="tiny random model instead of the embedded one (quick check)")
    args = p.parse_args(argv)
    figures = {}
    for name in ([b for b in BENCHES if b not in ("eval", "vllm")] if args.which == "all" else [args.which]):
        figures[name] = _run_bench(name, args.tiny)
        print(f"bench {name}: " + ", ".join(_figure(k, v) for k, v in figures[name].items()), flush=True)
    if args.json:
        print(json.dumps(figures[args.which] if args.which != "all" else figures))
    return 0


def _figure(key: str, value) -> str:
    """One bench figure as text, a dict of figures in braces.

    >>> _figure("operators", {"clone": 0.01234})
    'operators={clone=0.01234}'
    """
    if isinstance(value, dict):
        return f"{key}={{" + ", ".join(_figure(k, v) for k, v in value.items()) + "}"
    return f"{key}={value:.4g}"


def _run_bench(name: str, tiny: bool) -> dict:
    from populora.training import bench

    if name == "lora":
        return bench.bench_lora(tiny=tiny)
    if name == "step":
        return bench.bench_step(tiny=tiny)
    if name == "evolve":
        return bench.bench_evolve(tiny=tiny)
    if name == "vllm":  # the real engine vs batched multi-LoRA (needs vLLM: on CPU, .venv-vllm/bin/populora)
        if tiny:
            raise SystemExit("populora bench vllm: --tiny is not supported (vLLM loads the embedded model's dir)")
        return bench.bench_vllm()
    if name == "threads":
        from populora.platform.threads import bench_wait_policy

        return bench_wait_policy()
    from populora.platform.sandbox.bench import bench_verifier

    return bench_verifier()


def _plan(args) -> int:
    import json

    from populora.platform import config as config_io
    from populora.training.config import TrainConfig
    from populora.training.workload import make_plan, render

    cfg = config_io.load(TrainConfig, args.config, args.set)
    result = make_plan(cfg, args.gpu, args.gpus, args.arch_config)
    print(render(result))
    if args.json:
        print(json.dumps(result))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora", description="Population-based self-play post-training with LoRA adapters")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a population (or the single-agent baseline)")
    t.add_argument("--config", help="YAML preset, e.g. configs/smoke.yaml (default: built-in defaults)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value, e.g. --set steps=10")
    t.add_argument("--resume", metavar="RUN_ID", help="continue a killed run from its last checkpoint")
    t.add_argument("--ray", metavar="ADDRESS", help="run on Ray: 'local' (start one here), 'auto' or ray://host:port (a cluster)")
    t.add_argument("--quiet", action="store_true", help="no progress bar: one plain line per step instead (for logs)")
    t.add_argument("--baseline", action="store_true", help="then train the compute-matched single-agent baseline "
                   "(same per-adapter tokens per step, see populora.training.baseline), the two runs linked")
    t.set_defaults(func=_train)

    sw = sub.add_parser("sweep", help="grid x seeds (+ baselines) of training runs, K at a time, resumable")
    sw.add_argument("--config", help="YAML preset every run starts from, e.g. configs/smoke.yaml")
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                    help="an axis of the grid (repeatable; cartesian product); keys varied together: "
                         "population.teachers,population.students=1:1,4:4")
    sw.add_argument("--seeds", type=int, default=1, help="seeds per configuration: seed, seed+1, ... (default 1)")
    sw.add_argument("--baseline", action="store_true", help="also the compute-matched single-agent baseline of each seed")
    sw.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    sw.add_argument("--parallel", type=int, default=1, metavar="K", help="runs at a time (default 1)")
    sw.add_argument("--ray", metavar="ADDRESS", help="submit the runs as Ray Jobs to this cluster")
    sw.add_argument("--id", help="name the sweep (default: sw-<hash of the plan>, so the same command resumes it)")
    sw.add_argument("--dry-run", action="store_true", help="print the planned runs, start nothing")
    sw.add_argument("--json", action="store_true", help="last line: one JSON object (with --dry-run: the runs)")
    sw.add_argument("--wait", action="store_true", help="run here until every run ends; exit 1 if any failed")
    sw.set_defaults(func=_sweep)

    ex = sub.add_parser("export", help="a member's adapter as a PEFT dir, or merged into the base (--merge)")
    ex.add_argument("--run", required=True, help="MLflow run id of the training run")
    ex.add_argument("--member", required=True, help="member id, e.g. S0 (B0 for a baseline run)")
    ex.add_argument("--out", required=True, help="directory to write (must not exist or be empty)")
    ex.add_argument("--merge", action="store_true", help="merge the adapter into the base: a standard HF model dir")
    ex.add_argument("--register", metavar="NAME", help="also register it in the MLflow model registry as NAME")
    ex.set_defaults(func=_export)

    pl = sub.add_parser("plan", help="memory per GPU, compute per step and whether a config fits, before launching")
    pl.add_argument("--config", help="YAML preset, e.g. configs/paper-4t4s.yaml")
    pl.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    pl.add_argument("--gpu", default="h100-80gb", choices=["h100-80gb", "a100-80gb", "a100-40gb", "l40s-48gb", "rtx4090-24gb"])
    pl.add_argument("--gpus", type=int, default=1, help="GPUs (Ray model workers), each holding the base; the plan models both ray.placement values (data_parallel: every adapter on every GPU, rows dealt over all; by_member: a member never spans GPUs) and reports the config's")
    pl.add_argument("--arch-config", metavar="CONFIG_JSON", help="the base's config.json when it is not local, cached or in the shipped table")
    pl.add_argument("--json", action="store_true", help="last line: the plan as one JSON object")
    pl.set_defaults(func=_plan)

    r = sub.add_parser("runs", help="list training runs in the MLflow store, or one run's members (populora runs RUN_ID)")
    r.add_argument("run_id", nargs="?", help="show this run's members: status, rating now and at its peak, origin, compute")
    r.add_argument("--limit", type=int, default=50)
    r.set_defaults(func=_runs)

    jb = sub.add_parser("jobs", help="the job queue training, sweep and evaluation jobs share: running, waiting (with their place), recent")
    jb.add_argument("--stop", metavar="JOB_ID", help="stop this job (a queued one never starts)")
    jb.add_argument("--limit", type=int, default=10, help="recent jobs listed (default 10)")
    jb.set_defaults(func=_jobs)

    sub.add_parser("prompts", help="print the prompts a run would send (populora prompts --config FILE [--json])", add_help=False)
    sub.add_parser("data", help="benchmark data: populora data verify|fetch [--data-dir DIR]", add_help=False)
    sub.add_parser("sandbox", help="run or check a program in the sandbox (see: populora sandbox --help)", add_help=False)
    sub.add_parser("bench", help="benchmarks: populora bench lora|step|evolve|verifier|eval|threads|scale|all [--json]", add_help=False)
    sub.add_parser("eval", help="score a run's adapters on the ten benchmarks (populora eval --help)", add_help=False)
    sub.add_parser("report", help="member-vs-baseline table of an evaluated run", add_help=False)
    sub.add_parser("ui", help="serve the web UI on 127.0.0.1:8501 (populora ui --help)", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if argv and argv[0] == "sandbox":
        return _sandbox(argv[1:])
    if argv and argv[0] == "prompts":
        from populora.training.tasks.show import prompts_main

        return prompts_main(argv[1:])
    if argv and argv[0] == "bench":
        return _bench(argv[1:])
    if argv and argv[0] in ("eval", "report", "data"):
        from populora.evaluation.cli import data_main, eval_main, report_main

        if argv[0] == "eval":
            stop_on_sigterm()  # a stopped evaluation ends like a stopped training: one line, exit 143

        return {"eval": eval_main, "report": report_main, "data": data_main}[argv[0]](argv[1:])
    if argv and argv[0] == "ui":
        from populora.ui.cli import ui_main

        return ui_main(argv[1:])
    if argv and argv[0] == "train":
        stop_on_sigterm()  # before the seconds of torch imports and model loading, not after them
    args = build_parser().parse_args(argv)
    from populora.platform.config import ConfigError
    from populora.platform.models import ModelError
    from populora.platform.plan import PlanError
    from populora.training.checkpoint import CheckpointError

    try:
        return args.func(args)
    except (ConfigError, ModelError, CheckpointError, PlanError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
