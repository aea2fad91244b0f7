"""Command lines of the evaluation module: ``populora eval``, ``populora report``, ``populora data``,
``populora bench eval``. Each ``*_main(argv) -> int`` returns 0 on success and 2 on bad input (message on stderr).

Also runnable as ``python -m populora.evaluation.cli eval|report|data|bench-eval ...``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from populora.evaluation import benchmarks
from populora.evaluation.generation import ensure_offline
from populora.evaluation.targets import TargetError
from populora.platform import runlayout
from populora.platform.config import ConfigError


class MissingDependency(RuntimeError):
    """An evaluation package is not installed; the message says which and how to install it."""


BAD_INPUT = (benchmarks.DataError, TargetError, MissingDependency, ConfigError)


def require_packages(names: list[str]) -> None:
    """EvalPlus for HumanEval+/MBPP+, lm-eval + math-verify for the math suite: say so before loading a model."""
    import importlib.util

    groups = {benchmarks.BENCHMARKS[n].group for n in names}
    need = {"evalplus": any(n in ("humaneval_plus", "mbpp_plus") for n in names),
            "lm_eval": "math" in groups, "math_verify": "math" in groups}
    missing = [pkg for pkg, used in need.items() if used and importlib.util.find_spec(pkg) is None]
    if missing:
        raise MissingDependency(f"{', '.join(missing)} not installed: pip install 'populora[eval]' "
                                f"(evalplus==0.3.1, lm-eval==0.4.13, math-verify)")


# flag -> EvalConfig field; argparse only parses, the schema holds every default, bound and help text
FLAGS = {
    # ---- what to evaluate (one of these)
    "--run": ("run", {}), "--adapter": ("adapter", {}), "--base-only": ("base_only", {"action": "store_true"}),
    "--export-tasks": ("export_tasks", {"metavar": "DIR"}),
    "--members": ("members", {}), "--baseline": ("baseline", {}),
    "--no-base": ("include_base", {"action": "store_false"}),
    "--benchmarks": ("benchmarks", {}), "--limit": ("limit", {"type": int}), "--data-dir": ("data_dir", {}),
    "--out": ("out", {}),
    # ---- model (only for --adapter / --base-only: a run's own config says which base it was trained on)
    "--model": ("model.base", {}), "--gguf-file": ("model.gguf_file", {}),
    "--tiny-random": ("model.tiny_random", {"action": "store_true"}), "--device": ("device", {}),
    "--backend": ("backend", {"choices": ["multilora", "peft"]}),
    # ---- decoding: the same for every adapter
    "--max-new-tokens": ("generation.max_new_tokens", {"type": int}), "--temperature": ("generation.temperature", {"type": float}),
    "--top-p": ("generation.top_p", {"type": float}), "--n-samples": ("generation.n_samples", {"type": int}),
    "--seed": ("generation.seed", {"type": int}), "--batch-size": ("generation.batch_size", {"type": int}),
}
EXCLUSIVE = ("--run", "--adapter", "--base-only", "--export-tasks")


def _field(dotted: str):
    """The EvalConfig field behind a dotted key (its description is the flag's help)."""
    from populora.evaluation.config import EvalConfig

    model, *parents, leaf = [EvalConfig, *dotted.split(".")]
    for part in parents:
        model = model.model_fields[part].annotation
    return model.model_fields[leaf]


def _eval_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora eval", argument_default=argparse.SUPPRESS,
                                description="score adapters on HumanEval+, MBPP+, LiveCodeBench (public tests) and the "
                                "math suite. Every flag sets one field of the evaluation config (EvalConfig); "
                                "--config / --set set any field.")
    p.add_argument("--config", help="YAML file of EvalConfig fields (flags and --set override it)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="set a config field, e.g. --set generation.top_p=0.9")
    src = p.add_mutually_exclusive_group()
    for flag, (key, kwargs) in FLAGS.items():
        info, action = _field(key), kwargs.get("action", "")
        if action:  # a switch: say which value it sets
            sets = f"{key}={str(action == 'store_true').lower()}"
        else:
            kwargs = {"metavar": flag.lstrip("-").upper().replace("-", "_"), **kwargs}
            sets = key + ("" if info.default is None else f" (default {info.default})")
        (src if flag in EXCLUSIVE else p).add_argument(flag, dest=key, help=f"{info.description} [{sets}]", **kwargs)
    return p


def eval_config(argv: list[str]):
    """Parse ``populora eval`` flags into an ``EvalConfig``: the --config file, then the flags, then --set."""
    from populora.evaluation.config import EvalConfig
    from populora.platform import config as config_io

    args = vars(_eval_parser().parse_args(argv))
    path, overrides = args.pop("config", None), args.pop("set", [])
    data = config_io.read_yaml(path) if path else {}
    for key, value in args.items():
        config_io.apply_override(data, key.split("."), value, EvalConfig)
    for text in overrides:
        config_io.apply_override(data, *config_io.parse_override(text), EvalConfig)
    return config_io.build(EvalConfig, data, source="populora eval config")


def _fail(err: Exception) -> int:
    print(f"error: {err}", file=sys.stderr)
    return 2


def eval_main(argv: list[str]) -> int:
    ensure_offline()
    try:
        cfg = eval_config(argv)
        root = benchmarks.data_dir(cfg.data_dir)
        if cfg.export_tasks:
            return _export(root, Path(cfg.export_tasks))
        names = benchmarks.select(cfg.benchmarks)
        benchmarks.verify(root, names)
        require_packages(names)
        return _evaluate(cfg, names, root)
    except BAD_INPUT as err:
        return _fail(err)


def _export(root: Path, out: Path) -> int:
    from populora.evaluation import math_suite

    benchmarks.verify(root, benchmarks.GROUPS["math"])
    math_suite.export_tasks(out, root)
    print(f"wrote lm-eval tasks to {out}; run e.g.: lm_eval --model hf --model_args pretrained=HuggingFaceTB/"
          f"SmolLM2-135M-Instruct --apply_chat_template --include_path {out} --tasks populora_math")
    return 0


def _targets(cfg, tracker):
    """(targets, base model, output dir) of what ``cfg`` asks to evaluate."""
    from populora.evaluation import targets as T

    if cfg.run:
        found, model, run = T.run_targets(tracker, cfg.run, cfg.members, cfg.baseline, cfg.include_base)
        out = Path(cfg.out or Path(run.data.tags.get(runlayout.RUN_DIR) or f"populora-eval/{cfg.run}") / "eval")
        return found, model, out, run.data.params.get("model.backend")
    found = [T.adapter_target(cfg.adapter)] if cfg.adapter else []
    if cfg.base_only or cfg.include_base:
        found.append(T.Target(T.BASE_LABEL, T.BASE, None))
    name = found[0].label if cfg.adapter else "base"
    return found, cfg.model, Path(cfg.out or Path("populora-eval") / name), None


def _backend_factory(model, device: str, kind: str = "multilora", lora=None):
    """Builds the evaluation's backend with the platform's ``make_backend``, as training does. ``lora``: the one
    LoRA shape of the adapters (multi-LoRA needs it; PEFT reads each adapter dir's own)."""
    def make():
        from populora.platform.backends import BackendConfig, LoraSpec, make_backend

        return make_backend(BackendConfig(model.base, model.gguf_file, model.tiny_random, model.dtype, device,
                                          lora or LoraSpec(), kind, slots=1))
    return make


def _evaluate(cfg, names: list[str], root: Path) -> int:
    from populora.evaluation import report, results
    from populora.evaluation import targets as T
    from populora.evaluation.runner import Runner

    tracker = None
    if cfg.run:
        from populora.platform.tracking import Tracker

        tracker = Tracker()
    found, model, out, configured = _targets(cfg, tracker)
    kind = cfg.backend or configured or "multilora"
    lora = T.lora_spec(found) if kind == "multilora" else None
    print(f"evaluating {', '.join(t.label for t in found)} on {', '.join(names)}"
          f"{f' (first {cfg.limit} items each)' if cfg.limit else ''}; results in {out}", file=sys.stderr)
    runner = Runner(_backend_factory(model, cfg.device, kind, lora), root, out, cfg.generation, cfg.limit, model.model_dump())
    scores = runner.run(found, names)
    config = {"run": cfg.run, "data_dir": str(root.resolve()), "benchmarks": names, **runner.config}
    data = results.build(found, scores, config)
    paths = results.write_local(out, data)
    print("\n" + report.text(report.build(data)))
    if tracker is not None:
        results.log_mlflow(tracker, cfg.run, found, data, paths)
        print(f"metrics eval/<benchmark>/<metric> logged on each member's MLflow run; table and results.json "
              f"on run {cfg.run} (artifacts eval/)", file=sys.stderr)
    print(f"written: {paths['results']}, {paths['md']}, {paths['csv']}", file=sys.stderr)
    return 0


def report_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="populora report", description="the member / population / baseline / base table of an evaluated run")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", help="MLflow run id that populora eval --run evaluated")
    src.add_argument("--results", help="a results.json written by populora eval (no MLflow needed)")
    p.add_argument("--out", help="where to write report.md and report.csv (default: next to the results)")
    args = p.parse_args(argv)
    import json

    from populora.evaluation import report
    from populora.evaluation.runner import write_atomic

    if args.results:
        data, default_out = json.loads(Path(args.results).read_text()), Path(args.results).parent
    else:
        from populora.platform.tracking import Tracker

        tracker = Tracker()
        try:
            from populora.evaluation import results
            data = results.load(tracker, args.run)
        except Exception as err:  # noqa: BLE001 - unknown run or not evaluated: say what to do
            return _fail(TargetError(f"run {args.run} has no evaluation results ({str(err)[:120]}); "
                                     f"run: populora eval --run {args.run}"))
        default_out = Path(data["results"] and tracker.get_run(args.run).data.tags.get(runlayout.EVAL_DIR) or ".")
    table = report.build(data)
    print(report.text(table))
    out = Path(args.out) if args.out else default_out
    write_atomic(out / "report.md", report.markdown(table))
    write_atomic(out / "report.csv", report.csv_text(table))
    print(f"written: {out / 'report.md'}, {out / 'report.csv'}", file=sys.stderr)
    return 0


def data_main(argv: list[str]) -> int:
    """``populora data verify|fetch``."""
    from populora.evaluation import fetch

    return fetch.main(argv)


def bench_eval_main(argv: list[str]) -> int:
    """``populora bench eval``: samples/s of generation and of scoring on CPU."""
    from populora.evaluation import bench

    return bench.main(argv)


COMMANDS = {"eval": eval_main, "report": report_main, "data": data_main, "bench-eval": bench_eval_main}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python -m populora.evaluation.cli {{{','.join(COMMANDS)}}} ...")
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
