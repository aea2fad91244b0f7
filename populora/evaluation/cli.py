"""Command lines of the evaluation module: ``populora eval``, ``populora report``, ``populora data``,
``populora bench eval``. Each ``*_main(argv) -> int`` returns 0 on success and 2 on bad input (message on stderr).

Also runnable as ``python -m populora.evaluation.cli eval|report|data|bench-eval ...``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from populora.evaluation import benchmarks
from populora.evaluation.generation import GenConfig, ensure_offline
from populora.evaluation.targets import TargetError



class MissingDependency(RuntimeError):
    """An evaluation package is not installed; the message says which and how to install it."""


BAD_INPUT = (benchmarks.DataError, TargetError, MissingDependency)


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


def _eval_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora eval", description="score adapters on HumanEval+, MBPP+, "
                                "LiveCodeBench (public tests) and the math suite")
    # ---- what to evaluate
    src = p.add_mutually_exclusive_group()
    src.add_argument("--run", help="MLflow run id of a training run: its members, its baseline and the base model")
    src.add_argument("--adapter", help="one PEFT adapter dir (base model from --model)")
    src.add_argument("--base-only", action="store_true", help="only the bare base model (from --model)")
    src.add_argument("--export-tasks", metavar="DIR", help="write the lm-eval math task YAMLs for --data-dir into DIR and exit")
    p.add_argument("--members", default="all", help="all (default: every member with a saved adapter), alive, or ids like T0,S1")
    p.add_argument("--baseline", help="run id of the single-agent baseline (default: the run's populora.baseline_run tag)")
    p.add_argument("--no-base", action="store_true", help="skip the bare base model row")
    p.add_argument("--benchmarks", default="all", help="names (humaneval_plus, ..., olympiadbench) or the groups code, math, all")
    p.add_argument("--limit", type=int, help="first N items of each benchmark (smoke checks; not comparable to full scores)")
    p.add_argument("--data-dir", help="benchmark files + SHA256SUMS (default: $POPULORA_DATA_DIR, else ../shared/data/benchmarks)")
    p.add_argument("--out", help="eval output dir, resumable (default: <run dir>/eval, or ./populora-eval/<name>)")
    # ---- model (only for --adapter / --base-only: a run's own config says which base it was trained on)
    p.add_argument("--model", default="embedded", help="base model: embedded, an HF id, a local dir or a .gguf file")
    p.add_argument("--gguf-file", help="GGUF file inside --model when it is a dir or HF id")
    p.add_argument("--tiny-random", action="store_true", help="tiny random base model (tests)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    # ---- decoding: the same for every adapter
    d = GenConfig()
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="token budget per completion")
    p.add_argument("--temperature", type=float, default=d.temperature, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=d.top_p, help="nucleus sampling when temperature > 0")
    p.add_argument("--n-samples", type=int, default=d.n_samples, help="samples per code problem (pass@k over n; needs temperature > 0)")
    p.add_argument("--seed", type=int, default=d.seed, help="sampling seed, the same for every adapter")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="prompts per generation batch")
    return p


def _fail(err: Exception) -> int:
    print(f"error: {err}", file=sys.stderr)
    return 2


def eval_main(argv: list[str]) -> int:
    args = _eval_parser().parse_args(argv)
    ensure_offline()
    try:
        root = benchmarks.data_dir(args.data_dir)
        if args.export_tasks:
            return _export(root, Path(args.export_tasks))
        if not (args.run or args.adapter or args.base_only):
            raise TargetError("say what to evaluate: --run RUN_ID, --adapter PATH or --base-only")
        names = benchmarks.select(args.benchmarks)
        benchmarks.verify(root, names)
        require_packages(names)
        gen = GenConfig(args.max_new_tokens, args.temperature, args.top_p, args.n_samples, args.seed, args.batch_size)
        return _evaluate(args, names, root, gen)
    except BAD_INPUT as err:
        return _fail(err)


def _export(root: Path, out: Path) -> int:
    from populora.evaluation import math_suite

    benchmarks.verify(root, benchmarks.GROUPS["math"])
    math_suite.export_tasks(out, root)
    print(f"wrote lm-eval tasks to {out}; run e.g.: lm_eval --model hf --model_args pretrained=HuggingFaceTB/"
          f"SmolLM2-135M-Instruct --apply_chat_template --include_path {out} --tasks populora_math")
    return 0


def _targets(args, tracker):
    from populora.evaluation import targets as T

    if args.run:
        found, spec, run = T.run_targets(tracker, args.run, args.members, args.baseline, not args.no_base)
        out = Path(args.out or Path(run.data.tags.get("populora.run_dir") or f"populora-eval/{args.run}") / "eval")
        return found, spec, out
    spec = T.ModelSpec(args.model, args.gguf_file, args.tiny_random)
    found = [T.adapter_target(args.adapter)] if args.adapter else []
    if args.base_only or not args.no_base:
        found.append(T.Target(T.BASE_LABEL, T.BASE, None))
    name = found[0].label if args.adapter else "base"
    return found, spec, Path(args.out or Path("populora-eval") / name)


def _backend_factory(spec, device: str):
    def make():
        from populora.platform.backend import LoraSpec, PeftBackend
        from populora.platform.models import load_base, resolve_source

        model, tok = load_base(resolve_source(spec.base, spec.gguf_file), spec.dtype, device, spec.tiny_random)
        return PeftBackend(model, tok, LoraSpec())  # adapters come from their dirs, with their own LoRA config
    return make


def _evaluate(args, names: list[str], root: Path, gen: GenConfig) -> int:
    from dataclasses import asdict

    from populora.evaluation import report, results
    from populora.evaluation.runner import Runner

    tracker = None
    if args.run:
        from populora.platform.tracking import Tracker

        tracker = Tracker()
    found, spec, out = _targets(args, tracker)
    print(f"evaluating {', '.join(t.label for t in found)} on {', '.join(names)}"
          f"{f' (first {args.limit} items each)' if args.limit else ''}; results in {out}", file=sys.stderr)
    runner = Runner(_backend_factory(spec, args.device), root, out, gen, args.limit, asdict(spec))
    scores = runner.run(found, names)
    config = {"run": args.run, "data_dir": str(root.resolve()), "benchmarks": names, **runner.config}
    data = results.build(found, scores, config)
    paths = results.write_local(out, data)
    print("\n" + report.text(report.build(data)))
    if tracker is not None:
        results.log_mlflow(tracker, args.run, found, data, paths)
        print(f"metrics eval/<benchmark>/<metric> logged on each member's MLflow run; table and results.json "
              f"on run {args.run} (artifacts eval/)", file=sys.stderr)
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
        default_out = Path(data["results"] and tracker.get_run(args.run).data.tags.get("populora.eval_dir") or ".")
    table = report.build(data)
    note = _format_note(tracker.get_run(args.run).data.tags) if args.run else ""
    print(note + report.text(table))
    out = Path(args.out) if args.out else default_out
    write_atomic(out / "report.md", note + report.markdown(table))
    write_atomic(out / "report.csv", report.csv_text(table))
    print(f"written: {out / 'report.md'}, {out / 'report.csv'}", file=sys.stderr)
    return 0


def _format_note(tags: dict) -> str:
    """The run's tasks format above the table; the direct format is named as the reduction it is."""
    fmt = tags.get("populora.tasks_format")
    if fmt == "direct":
        return ("tasks format: direct (a reduction of AZR's method: answer-only prefilled prompts, no <think> "
                "reasoning trained)\n\n")
    return f"tasks format: {fmt}\n\n" if fmt else ""


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
