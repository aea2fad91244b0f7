"""``populora bench lora|step|evolve|verifier|eval|threads|scale|vllm|all``: speed ratios measured side by side in
one run; ``populora bench learn --backend B``: the planted environment's reward rise (not a speed); ``bench learn --model embedded``: a preset's students against the base model on a held-out panel (``training/learn_panel.py``). Imported only when ``populora bench`` runs (its benches build model backends: torch); ``bench verifier``
loads no torch and is dispatched to the sandbox's own command by ``populora.cli``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from populora.cli.bench_names import BENCHES as NAMES
from populora.evaluation import bench as eval_bench
from populora.platform.sandbox.bench import bench_verifier
from populora.platform.scale_bench import main as bench_scale_main
from populora.platform.threads import bench_wait_policy
from populora.training import bench
from populora.training import learn_check as learning
from populora.training import learn_panel

ALL = ("lora", "step", "evolve", "verifier", "threads")  # what `all` runs: every bench of NAMES but eval, vllm, scale,
# stats and learn (slow or their own options)
OWN_OPTIONS = ("scale", "eval", "stats")  # dispatched before this parser when named first, with their options


def bench_main(argv: list[str]) -> int:
    if argv[:1] == ["scale"]:  # data-parallel workers on Ray: its own options (--workers 1,2, --device, ...)
        return bench_scale_main(argv[1:])
    if argv[:1] == ["eval"]:  # its own options (-n, --targets, ...): its own parser (verifier's: populora.cli)
        return eval_bench.main(["--tiny-random" if a == "--tiny" else a for a in argv[1:]])
    p = argparse.ArgumentParser(prog="populora bench", description="speed ratios measured side by side in one run; "
                                "`populora bench verifier|eval|scale|stats --help` for theirs")
    p.add_argument("which", choices=[*NAMES, "all"])
    p.add_argument("--json", action="store_true", help="last line: one JSON object of the figures")
    p.add_argument("--tiny", action="store_true", help="tiny random model instead of the embedded one (quick check)")
    p.add_argument("--backend", choices=list(learning.BACKENDS), default="multilora",
                   help="learn: the training backend the planted environment runs on")
    p.add_argument("--seeds", type=int, default=3, help="learn: seeds (runs); the interval is over them")
    p.add_argument("--steps", type=int, default=18, help="learn: steps per seed (--model embedded: the K steps the "
                   "students train before they answer the panel)")
    # ---- bench learn --model embedded: a preset's students on a held-out panel, before and after K steps
    p.add_argument("--model", choices=("planted", "embedded"), default="planted",
                   help="learn: planted (the planted environment over seeds) or embedded (a preset's students on a "
                   "held-out panel the base model wrote: base vs after --steps steps)")
    p.add_argument("--preset", default="embedded-learn", help="learn --model embedded: the training preset "
                   "(configs/NAME.yaml or a path)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="learn: a config override (repeatable) of configs/planted.yaml, or with --model embedded of the "
                   "preset, e.g. --set optim.lr=0.008")
    p.add_argument("--panel-tasks", type=int, default=8, help="learn --model embedded: valid panel tasks per kind")
    p.add_argument("--panel-rounds", type=int, default=4, help="learn --model embedded: base-model proposal rounds at most")
    p.add_argument("--answers", type=int, default=4, help="learn --model embedded: answers per (entrant, panel task)")
    p.add_argument("--window", type=int, default=5, help="learn --model embedded: steps averaged for the reward's start and end")
    p.add_argument("--out", default="runs/learn-embedded", help="learn --model embedded: where the run, the panel, "
                   "its answers and learn.json are kept")
    args = p.parse_args(argv)
    if args.which == "learn" and args.model == "embedded":
        return _learn_embedded(p, args)
    if args.which == "learn":
        if args.seeds < 2 or args.steps < 8:
            p.error("bench learn needs --seeds >= 2 (an interval over seeds) and --steps >= 8 (a start and an end of 4 steps)")
        figures = bench.bench_learn(args.backend, args.seeds, args.steps, overrides=args.set)
        print(f"bench learn ({args.backend}): " + ", ".join(
            f"{role} {figures[role]['start']:+.3f} -> {figures[role]['end']:+.3f}, rise {figures[role]['rise']:+.3f} "
            f"95% [{figures[role]['interval'][0]:+.3f}, {figures[role]['interval'][1]:+.3f}]" for role in ("student", "teacher")), flush=True)
        if args.json:
            print(json.dumps(figures))
        return 0
    if args.which in OWN_OPTIONS:  # reached here only with an option before its name
        p.error(f"put the bench's name first: populora bench {args.which} [its options] "
                f"(`populora bench {args.which} --help`)")
    figures = {}
    for name in (ALL if args.which == "all" else [args.which]):
        figures[name] = _run_bench(name, args.tiny)
        print(f"bench {name}: " + ", ".join(_figure(k, v) for k, v in figures[name].items()), flush=True)
    if args.json:
        print(json.dumps(figures[args.which] if args.which != "all" else figures))
    return 0


def _learn_embedded(p: argparse.ArgumentParser, args) -> int:
    """``bench learn --model embedded``: the panel's solve rate and ability, base vs trained (learn_panel)."""
    if args.backend != "multilora":
        p.error("bench learn --model embedded runs on --backend multilora (the embedded model's CPU backend)")
    if args.steps < 1 or args.panel_tasks < 1 or args.answers < 1 or args.panel_rounds < 1 or args.window < 1:
        p.error("--steps, --panel-tasks, --panel-rounds, --answers and --window must each be at least 1")
    out = Path(args.out)
    cfg = learn_panel.config(args.preset, args.steps, args.set, out)
    panel = learn_panel.PanelSettings(tasks_per_kind=args.panel_tasks, proposals_per_round=args.panel_tasks,
                                      rounds=args.panel_rounds, answers=args.answers)
    result = learn_panel.run(cfg, out, panel)
    figures = learn_panel.figures(result, args.preset, cfg, args.set, args.window)
    learn_panel.save(out / learn_panel.RESULT_FILE, figures)
    sr, ab = figures["solve_rate"], figures["ability"]["trained"]
    print(f"bench learn (embedded, {args.preset}, {args.steps} steps): panel of {figures['tasks']} tasks; solve rate "
          f"base {_ci(sr['base'])} -> trained {_ci(sr['trained'])}, difference {_ci(sr['difference'])}; "
          f"ability (base 0) trained {_ci(ab)}; student reward {figures['student']['start']:+.3f} -> "
          f"{figures['student']['end']:+.3f} (first / last {args.window} steps); {figures['seconds']['total']:.0f} s",
          flush=True)
    if args.json:
        print(json.dumps(figures))
    return 0


def _ci(x: dict) -> str:
    """A value and its 95% interval.

    >>> _ci({"value": 0.25, "ci95": [0.1, 0.5]})
    '+0.250 [+0.100, +0.500]'
    """
    return f"{x['value']:+.3f} [{x['ci95'][0]:+.3f}, {x['ci95'][1]:+.3f}]"


def _figure(key: str, value) -> str:
    """One bench figure as text, a dict of figures in braces.

    >>> _figure("operators", {"clone": 0.01234})
    'operators={clone=0.01234}'
    """
    if isinstance(value, dict):
        return f"{key}={{" + ", ".join(_figure(k, v) for k, v in value.items()) + "}"
    return f"{key}={value:.4g}"


def _run_bench(name: str, tiny: bool) -> dict:
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
        return bench_wait_policy()
    return bench_verifier()


COMMANDS = {"bench": bench_main}  # parses its own argv: fn(argv)
BAD_INPUT = ()
