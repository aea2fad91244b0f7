"""``populora eval`` and ``populora report``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from populora.evaluation import benchmarks, report, runner

CODE_NOT_READY = ("code benchmarks (HumanEval+ via EvalPlus, MBPP+, LiveCodeBench) are not available yet; "
                  "use --benchmarks math or math benchmark names")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora eval", description="score adapters on the benchmark suite")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", help="MLflow run id of a training run: evaluates its members (and baseline, base model)")
    src.add_argument("--adapter", help="one PEFT adapter dir")
    src.add_argument("--base-only", action="store_true", help="only the bare base model")
    p.add_argument("--members", default="alive", help="alive (default), all, or ids like T0,S1")
    p.add_argument("--benchmarks", default="math", help="names, or the groups math / code / all")
    p.add_argument("--limit", type=int, help="first N items of each benchmark (smoke checks)")
    p.add_argument("--data-dir", help="default: $POPULORA_DATA_DIR, else ../shared/data/benchmarks")
    p.add_argument("--baseline", help="MLflow run id of the single-agent baseline (default: the run's populora.baseline_run tag)")
    p.add_argument("--no-base", action="store_true", help="skip the bare base model row")
    p.add_argument("--model", default="embedded", help="base model for --adapter / --base-only")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--out", help="output dir (default: <run dir>/eval, or ./eval)")
    return p


def eval_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        names = benchmarks.select(args.benchmarks)
        if any(benchmarks.BENCHMARKS[n].group == "code" for n in names):
            raise benchmarks.DataError(CODE_NOT_READY)
        root = benchmarks.data_dir(args.data_dir)
        benchmarks.verify(root, names)
        return _evaluate(args, names, root)
    except benchmarks.DataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _evaluate(args, names: list[str], root: Path) -> int:
    from populora.platform.backend import LoraSpec, PeftBackend
    from populora.platform.models import load_base, resolve_source
    from populora.platform.tracking import Tracker

    tracker, model_cfg, out = None, {"base": args.model, "gguf": None, "tiny": False}, Path(args.out or "eval")
    if args.run:
        tracker = Tracker()
        run = tracker.get_run(args.run)
        p = run.data.params
        model_cfg = {"base": p.get("model.base", "embedded"), "gguf": None if p.get("model.gguf_file") in (None, "None") else p["model.gguf_file"],
                     "tiny": p.get("model.tiny_random") == "True"}
        out = Path(args.out or Path(run.data.tags.get("populora.run_dir", ".")) / "eval")
        targets = runner.targets(tracker, args.run, args.members, args.baseline, not args.no_base)
    elif args.adapter:
        targets = [runner.Target(Path(args.adapter).name, args.adapter, None, "member")]
    else:
        targets = [runner.Target(runner.BASE, None, None, "base")]
    model, tok = load_base(resolve_source(model_cfg["base"], model_cfg["gguf"]), tiny_random=model_cfg["tiny"])
    backend = PeftBackend(model, tok, LoraSpec())
    scores = runner.evaluate_targets(backend, targets, names, root, out, args.limit, args.max_new_tokens)
    kinds = {t.label: t.kind for t in targets}
    header, rows = report.table(scores, kinds)
    print("\n" + report.markdown(header, rows))
    for line in report.deltas(header, rows):
        print(line)
    if tracker is not None:
        runner.log_scores(tracker, args.run, targets, scores)
        print(f"\nscores logged to MLflow run {args.run} (eval/<benchmark>/accuracy on each member run); results in {out}")
    return 0


def report_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="populora report", description="print the member-vs-baseline table of an evaluated run")
    p.add_argument("--run", required=True)
    p.add_argument("--out", help="where to write report.md and report.csv (default: <run dir>/eval)")
    args = p.parse_args(argv)
    from mlflow.exceptions import MlflowException

    from populora.platform.tracking import Tracker

    tracker = Tracker()
    try:
        data = tracker.load_json(args.run, "eval/results.json")
        run = tracker.get_run(args.run)
    except (MlflowException, OSError) as err:
        print(f"error: run {args.run} has no evaluation results ({str(err)[:120]}); run: populora eval --run {args.run}", file=sys.stderr)
        return 2
    scores = data["results"]
    kinds = {label: next(iter(per.values())).get("kind", "member") for label, per in scores.items() if per}
    header, rows = report.table(scores, kinds)
    text = report.markdown(header, rows) + "\n\n" + "\n".join(report.deltas(header, rows)) + "\n"
    print(text)
    out = Path(args.out or Path(run.data.tags.get("populora.run_dir", ".")) / "eval")
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(text)
    (out / "report.csv").write_text(report.csv_text(header, rows))
    tracker.client.log_artifact(args.run, str(out / "report.md"), "eval")
    tracker.client.log_artifact(args.run, str(out / "report.csv"), "eval")
    print(f"written: {out / 'report.md'}, {out / 'report.csv'}")
    return 0
