"""Command lines of the evaluation module: ``populora eval``, ``populora report``, ``populora data``,
``populora bench eval``. Each ``*_main(argv) -> int`` returns 0 on success and 2 on bad input (message on stderr).

Also runnable as ``python -m populora.evaluation.cli eval|report|data|bench-eval ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from populora.evaluation.harness import benchmarks, fetch, math_suite
from populora.evaluation import figures, report, results
from populora.evaluation.statistics import sweep_report, verdict
from populora.evaluation import compute as compute_figure
from populora.evaluation.config import EvalConfig, ReportConfig
from populora.evaluation.evaluate import MissingDependency, evaluate, require_packages  # noqa: F401 - part of this module's API
from populora.evaluation.harness.generation import ensure_offline
from populora.evaluation.summary import Results
from populora.evaluation.targets import TargetError
from populora.platform import config as config_io
from populora.platform.store import operator_table, runlayout
from populora.platform.store import sweep as S
from populora.platform.config import ConfigError
from populora.platform.files import write_atomic
from populora.platform.jobs import terminal
from populora.platform.jobs.stopping import stop_code
from populora.platform.store.tracking import Tracker


BAD_INPUT = (benchmarks.DataError, TargetError, MissingDependency, ConfigError)


# flag -> EvalConfig field; argparse only parses, the schema holds every default, bound and help text
FLAGS = {
    # ---- what to evaluate (one of these)
    "--run": ("run", {}), "--sweep": ("sweep", {}), "--adapter": ("adapter", {}), "--step": ("step", {"type": int}),
    "--base-only": ("base_only", {"action": "store_true"}), "--export-tasks": ("export_tasks", {"metavar": "DIR"}),
    "--members": ("members", {}), "--baseline": ("baseline", {}),
    "--no-base": ("include_base", {"action": "store_false"}), "--base": ("sweep_base", {"action": "store_true"}),
    "--benchmarks": ("benchmarks", {}), "--limit": ("limit", {"type": int}), "--data-dir": ("data_dir", {}),
    "--out": ("out", {}),
    # ---- model (only for --adapter / --base-only: a run's own config says which base it was trained on)
    "--model": ("model.base", {}), "--gguf-file": ("model.gguf_file", {}),
    "--tiny-random": ("model.tiny_random", {"action": "store_true"}), "--device": ("device", {}),
    "--backend": ("backend", {"choices": ["multilora", "peft"]}),
    "--one-at-a-time": ("batched", {"action": "store_false"}),
    "--protocol": ("protocol", {"choices": ["azr", "quick"]}), "--regrade": ("regrade", {"action": "store_true"}),
    # ---- decoding: the same for every adapter
    "--max-new-tokens": ("generation.max_new_tokens", {"type": int}), "--temperature": ("generation.temperature", {"type": float}),
    "--top-p": ("generation.top_p", {"type": float}), "--n-samples": ("generation.n_samples", {"type": int}),
    "--seed": ("generation.seed", {"type": int}), "--batch-size": ("generation.batch_size", {"type": int}),
}
EXCLUSIVE = ("--run", "--sweep", "--adapter", "--base-only", "--export-tasks")

# flag -> ReportConfig field, the same pattern
REPORT_FLAGS = {
    "--run": ("run", {}), "--results": ("results", {}), "--sweep": ("sweep", {}),  # one of these
    "--step": ("step", {"type": int}),
    "--out": ("out", {}), "--json": ("as_json", {"action": "store_true"}),
    "--between": ("between", {"nargs": 2, "action": "append", "metavar": ("CONFIG_A", "CONFIG_B")}),
}
REPORT_EXCLUSIVE = ("--run", "--results", "--sweep")


def _field(schema, dotted: str):
    """The schema field behind a dotted key (its description is the flag's help)."""
    model, *parents, leaf = [schema, *dotted.split(".")]
    for part in parents:
        model = model.model_fields[part].annotation
    return model.model_fields[leaf]


def _parser(prog: str, description: str, schema, flags: dict, exclusive: tuple, example: str) -> argparse.ArgumentParser:
    """A parser whose every flag sets one field of ``schema`` (plus --config FILE and --set KEY=VALUE)."""
    p = argparse.ArgumentParser(prog=prog, argument_default=argparse.SUPPRESS, description=description)
    p.add_argument("--config", help=f"YAML file of {schema.__name__} fields (flags and --set override it)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help=f"set a config field, e.g. --set {example}")
    src = p.add_mutually_exclusive_group()
    for flag, (key, kwargs) in flags.items():
        info, action = _field(schema, key), kwargs.get("action", "")
        if action == "store_false":  # a switch that turns a field off: say so first, the field's text describes "on"
            help_text = f"sets {key}=false; {key}: {info.description}"
        elif action == "store_true":  # a switch: say which value it sets
            help_text = f"{info.description} [{key}=true]"
        else:
            kwargs = {"metavar": flag.lstrip("-").upper().replace("-", "_"), **kwargs}
            default = info.get_default(call_default_factory=True)
            sets = key + ("" if default in (None, []) else f" (default {default})")
            help_text = f"{info.description} [{sets}]"
        (src if flag in exclusive else p).add_argument(flag, dest=key, help=help_text, **kwargs)
    return p


def _eval_parser() -> argparse.ArgumentParser:
    return _parser("populora eval", "score adapters on HumanEval+, MBPP+, LiveCodeBench 2408-2501 (public tests) and the math "
                   "suite. Every flag sets one field of the evaluation config (EvalConfig); --config / --set set any "
                   "field.", EvalConfig, FLAGS, EXCLUSIVE, "generation.top_p=0.9")


def _report_parser() -> argparse.ArgumentParser:
    return _parser("populora report", "the member / population / baseline / base table of an evaluated run, or the "
                   "intervals and paired tests of a sweep. Every flag sets one field of ReportConfig.",
                   ReportConfig, REPORT_FLAGS, REPORT_EXCLUSIVE, "as_json=true")


def _parse(parser: argparse.ArgumentParser, schema, argv: list[str], source: str):
    """Flags into ``schema``: the --config file, then the flags, then --set."""
    args = vars(parser.parse_args(argv))
    path, overrides = args.pop("config", None), args.pop("set", [])
    data = config_io.read_yaml(path) if path else {}
    for key, value in args.items():
        config_io.apply_override(data, key.split("."), value, schema)
    for text in overrides:
        config_io.apply_override(data, *config_io.parse_override(text), schema)
    return config_io.build(schema, data, source=source)


def eval_config(argv: list[str]):
    """Parse ``populora eval`` flags into an ``EvalConfig``."""
    return _parse(_eval_parser(), EvalConfig, argv, "populora eval config")


def report_config(argv: list[str]):
    """Parse ``populora report`` flags into a ``ReportConfig``."""
    return _parse(_report_parser(), ReportConfig, argv, "populora report config")


def _fail(err: Exception) -> int:
    print(f"error: {err}", file=sys.stderr)
    return 2


def eval_main(argv: list[str]) -> int:
    """Parse, call ``evaluate``, print each run's table (stdout) and where everything went (stderr)."""
    ensure_offline()
    try:
        cfg = eval_config(argv)
        if cfg.export_tasks:
            return _export(benchmarks.data_dir(cfg.data_dir), Path(cfg.export_tasks), cfg.resolved_protocol(cfg.model))
        # the machine's one queue, as a terminal's populora train (platform/jobs/terminal.py): an evaluation loads
        # the model and generates, so it waits while a training or a league holds the slot, and populora jobs lists it
        command = ["eval", *argv]
        with terminal.in_line(command, terminal.name_of(command), 1, say=lambda m: print(m, file=sys.stderr, flush=True),
                              kind="eval"):
            done = evaluate(cfg)
    except BAD_INPUT as err:
        return _fail(err)
    except KeyboardInterrupt as err:  # Ctrl-C, the UI's Stop (SIGINT), SIGTERM (Ray's stop_job, docker stop)
        print("\nstopped: the (target, benchmark) pairs already scored are kept in the out dir; run the same "
              "command again (or Resume on the job) to score only the rest", file=sys.stderr, flush=True)
        return stop_code(err)
    for res in done:
        print("\n" + report.text(report.build(res.data)), flush=True)
        if res.plan.run and res.plan.step is not None:
            print(f"results of checkpoint step {res.plan.step} logged on run {res.plan.run} as artifacts "
                  f"eval/{runlayout.step_folder(res.plan.step)}/ (member runs' eval/ metrics are left to "
                  f"in-training evaluation)", file=sys.stderr)
        elif res.plan.run:
            print(f"metrics eval/<benchmark>/<metric> logged on each member's MLflow run; table and results.json "
                  f"on run {res.plan.run} (artifacts eval/)", file=sys.stderr)
        print(f"written: {res.paths['results']}, {res.paths['md']}, {res.paths['csv']}", file=sys.stderr)
    if cfg.sweep:
        print(f"evaluated {len(done)} finished run(s) of sweep {cfg.sweep}; next: populora report --sweep {cfg.sweep}",
              file=sys.stderr)
        return 0 if len(done) == len(S.latest_by_key(S.find_runs(Tracker().client, cfg.sweep))) else 1
    return 0


def _export(root: Path, out: Path, protocol=None) -> int:
    benchmarks.verify(root, benchmarks.GROUPS["math"])
    math_suite.export_tasks(out, root, protocol)
    print(f"wrote lm-eval tasks to {out}; run e.g.: lm_eval --model hf --model_args pretrained=HuggingFaceTB/"
          f"SmolLM2-135M-Instruct --apply_chat_template --include_path {out} --tasks populora_math")
    return 0


def report_main(argv: list[str]) -> int:
    try:
        args = report_config(argv)
    except ConfigError as err:
        return _fail(err)
    if args.sweep:
        return _report_sweep(args)

    if args.results:
        data, default_out = json.loads(Path(args.results).read_text()), Path(args.results).parent
    else:
        tracker = Tracker()
        _print_operators(tracker, args.run)
        try:
            data = results.load(tracker, args.run, args.step)
        except Exception as err:  # noqa: BLE001 - unknown run or not evaluated: say what to do
            at = f" --step {args.step}" if args.step is not None else ""
            return _fail(TargetError(f"run {args.run} has no evaluation results{at.replace(' --step', ' at step')} "
                                     f"({str(err)[:120]}); run: populora eval --run {args.run}{at}"))
        default_out = Path(data["results"] and tracker.get_run(args.run).data.tags.get(runlayout.EVAL_DIR) or ".")
        if args.step is not None:  # next to that checkpoint's results (populora eval --step writes them there)
            run_dir = tracker.get_run(args.run).data.tags.get(runlayout.RUN_DIR) or "."
            default_out = Path(run_dir) / runlayout.EVAL_FOLDER / runlayout.step_folder(args.step)
    compute = title = None
    if args.run:
        data, compute = _with_linked_baseline(tracker, args.run, args.step, data)
        title = _title(tracker, args.run, args.step)
    typed = Results.from_dict(data)  # one read of the samples files for the table, the intervals and the verdict
    table = report.build(typed)
    note = _format_note(tracker.get_run(args.run).data.tags) if args.run else ""
    try:
        stats = sweep_report.single_run(sweep_report.run_arms(typed))  # paired intervals over problems
        judged = verdict.build(typed)
    except sweep_report.ReportError as err:
        return _fail(err)
    if judged and compute:  # the verdict names the arms' realised compute beside its claim
        judged["compute"] = compute["words"]
    printed = report.text(table, judged, compute, title=title or "", verdict=True)
    print(note + printed)
    out = Path(args.out) if args.out else default_out
    write_atomic(out / "report.md", note + report.markdown(table) + "\n```\n" + printed + "```\n")
    write_atomic(out / "report.csv", report.csv_text(table))
    print(f"written: {out / 'report.md'}, {out / 'report.csv'}", file=sys.stderr)
    if args.as_json:
        stats["verdict"] = judged
        stats["compute"] = compute
        print(json.dumps(stats))
    return 0


LEDGER_PARTS = ("generated tokens per adapter", "trained tokens per adapter")  # the compute line has their sum


def _title(tracker, run_id: str, step: int | None) -> str:
    """What the report compares: the population run and its linked baseline run (and the checkpoint step)."""
    linked = tracker.get_run(run_id).data.tags.get(runlayout.BASELINE_RUN)
    at = f", checkpoint step {step}" if step is not None else ""
    return f"population run {run_id[:8]}" + (f" vs baseline run {linked[:8]}" if linked else " (no linked baseline)") + at


def _with_linked_baseline(tracker, run_id: str, step: int | None, data: dict) -> tuple[dict, dict | None]:
    """(results with the linked baseline's scores, read from the baseline run's own evaluation when this one
    scored none; the two runs' per-adapter training compute: {"words": the one compute figure's line, "detail":
    the ledger's quantities side by side and what to do when not matched, "rows": the side-by-side rows}, None
    without a linked baseline)."""
    linked = tracker.get_run(run_id).data.tags.get(runlayout.BASELINE_RUN) or None
    if not linked:
        return data, None
    try:
        data = verdict.with_baseline(data, results.load(tracker, linked, step))
    except Exception:  # noqa: BLE001 - the baseline is not evaluated: the table says "no baseline scored"
        pass
    pop, base = tracker.get_run(run_id).data, tracker.get_run(linked).data
    kl = compute_figure.kl_forward_of(pop.params)
    note = compute_figure.matched_note(base.tags)
    models = (pop.params, base.params)
    rows, warning = verdict.compute_side_by_side(pop.metrics, base.metrics, runlayout.matched_by_rule(pop.tags, base.tags), kl, note,
                                                 models)
    figure = compute_figure.figure(pop.metrics, base.metrics, kl, note, models)
    if not figure and not warning:
        return data, None
    fmt = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    parts = [f"{r['quantity']} {fmt(r['population'])} vs {fmt(r['baseline'])}" for r in rows
             if r["population"] is not None and r["quantity"] in LEDGER_PARTS]
    words = figure["words"] if figure else warning
    fix = verdict.matching_advice(figure, runlayout.matched_by_rule(pop.tags, base.tags), note)
    detail = ("the training runs' compute ledgers, population vs baseline: " + "; ".join(parts)
              + (f"; {fix}" if fix else ""))
    return data, {"words": words, "detail": detail, "rows": rows}


def _compute_words(tracker, run_id: str) -> str | None:
    """The one compute figure's words of a population run and its linked baseline (None without both ledgers)."""
    linked = tracker.get_run(run_id).data.tags.get(runlayout.BASELINE_RUN)
    figure = compute_figure.of_runs(tracker.get_run(run_id), tracker.get_run(linked)) if linked else None
    return figure["words"] if figure else None


def _print_operators(tracker, run_id: str) -> None:
    """The run's per-operator evolution table (``operator_table``), before the evaluation report: it needs no
    evaluation, so it is printed whether or not one exists."""
    try:
        ops = operator_table.section(tracker.client, run_id)
    except Exception:  # noqa: BLE001 - an unknown run: the evaluation part below says so
        return
    if ops:
        print(ops, flush=True)


def _report_sweep(args) -> int:
    tracker = Tracker()
    try:
        configs, missing = sweep_report.gather(tracker, args.sweep)
    except sweep_report.ReportError as err:
        return _fail(err)
    for key in missing:
        print(f"not evaluated (left out): {key}", file=sys.stderr)
    data = {"sweep": args.sweep, **sweep_report.build(configs, [tuple(b) for b in args.between]),
            "compute": sweep_report.compute_lines(tracker, args.sweep)}
    print(sweep_report.text(data))
    out = Path(args.out) if args.out else S.sweeps_dir() / args.sweep / "report"
    write_atomic(out / "report.md", sweep_report.markdown(data))
    write_atomic(out / "report.json", json.dumps(data, indent=1))
    pngs = figures.write_sweep_figures(tracker, args.sweep, data, out)
    print(f"written: {out / 'report.md'}, {out / 'report.json'}" + "".join(f", {p}" for p in pngs), file=sys.stderr)
    if args.as_json:
        print(json.dumps(data))
    return 0


def _format_note(tags: dict) -> str:
    """The run's tasks format above the table; the direct format is named as the reduction it is."""
    fmt = tags.get(runlayout.TASKS_FORMAT)
    if fmt == "direct":
        return ("tasks format: direct (a reduction of AZR's method: answer-only prefilled prompts, no <think> "
                "reasoning trained)\n\n")
    return f"tasks format: {fmt}\n\n" if fmt else ""


def data_main(argv: list[str]) -> int:
    """``populora data verify|fetch``."""
    return fetch.main(argv)


def bench_eval_main(argv: list[str]) -> int:
    """``populora bench eval``: samples/s of generation and of scoring on CPU."""
    # the one import of our own inside a function here: evaluation.bench builds a model backend (torch, seconds),
    # and `populora eval|report|data` (and their --help) load this module; `populora bench eval` imports it directly
    from populora.evaluation import bench

    return bench.main(argv)


COMMANDS = {"eval": eval_main, "report": report_main, "data": data_main, "bench-eval": bench_eval_main}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python -m populora.evaluation.cli {{{','.join(COMMANDS)}}} ...")
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
