"""The math suite (AIME24, AIME25, AMC23, MATH-500, Minerva Math, GSM8K, OlympiadBench) through lm-eval.

The task YAMLs ship in ``lm_eval_tasks/`` (local JSONL via ``dataset_path: json``; prompts and math-verify
grading in its ``utils.py``). Their data paths are relative to the project root; ``export_tasks`` writes copies
pointing at any data dir, which is what both ``populora eval`` and a plain ``lm_eval --include_path DIR`` use.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from populora.evaluation.harness import benchmarks
from populora.evaluation.harness.generation import GenConfig, ensure_offline, truncated_rate
from populora.evaluation.harness.protocol import resolve as resolve_protocol
from populora.evaluation.harness.protocol import resolve_decoding

TASKS_DIR = Path(__file__).parent / "lm_eval_tasks"
SHIPPED_DATA_PREFIX = "../shared/data/benchmarks/"


def task_name(benchmark: str) -> str:
    return f"populora_{benchmark}"


def sampling_yaml(samples: int, temperature: float) -> str:
    """The task keys of sampled evaluation: ``samples`` repeats of each document at ``temperature``, every response
    kept (``take_first_k``; lm-eval's default filter keeps the first only) for ``process_results`` to average, and
    the per-sample verdicts it returns."""
    return (f"repeats: {samples}\nfilter_list:\n  - name: none\n    filter:\n      - function: take_first_k\n"
            f"        k: {samples}\nmetric_list:\n  - metric: exact_match\n    aggregation: mean\n"
            f"    higher_is_better: true\n  - metric: grading_fallback\n    aggregation: mean\n"
            f"    higher_is_better: false\n  - metric: sample_verdicts\n    aggregation: !function utils.count\n"
            f"    higher_is_better: true\n")


def export_tasks(out_dir: Path, data_dir: Path, protocol=None) -> Path:
    """Copy the task YAMLs + utils.py into ``out_dir`` with absolute paths into ``data_dir``; with a ``protocol``
    (``protocol.Protocol``), its per-benchmark budgets as ``max_gen_toks``, for azr the azr hooks (bare question,
    AZR's answer extraction), and its decoding (greedy, or ``samples`` repeats at its temperature)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = str(data_dir.resolve()) + "/"
    for f in TASKS_DIR.iterdir():
        if f.suffix == ".yaml":
            text = f.read_text().replace(SHIPPED_DATA_PREFIX, prefix)
            bench = f.stem.removeprefix("populora_")
            if protocol is not None and bench in benchmarks.BENCHMARKS:
                if protocol.template(bench) == "azr":
                    for hook in ("doc_to_text", "doc_to_target", "process_results"):
                        text = text.replace(f"utils.{hook}_{bench}", f"utils.{hook}_azr_{bench}")
                if protocol.temperature > 0:
                    text += sampling_yaml(protocol.samples, protocol.temperature)
                    text += (f"generation_kwargs:\n  until: []\n  max_gen_toks: {protocol.budget(bench)}\n"
                             f"  do_sample: true\n  temperature: {protocol.temperature}\n")
                else:
                    text += f"generation_kwargs:\n  until: []\n  max_gen_toks: {protocol.budget(bench)}\n  do_sample: false\n"
            (out_dir / f.name).write_text(text)
        elif f.name == "utils.py":
            shutil.copy(f, out_dir / f.name)
    return out_dir


def quiet_git_hash() -> str | None:
    """lm-eval's ``get_git_commit_hash`` (lm_eval/loggers/utils.py: ``git describe --always``, None on failure)
    with git's stderr dropped: lm-eval leaves it open, so outside a git checkout every benchmark printed "fatal:
    not a git repository" into evaluation and training logs. lm-eval only stores the hash in its results dict."""
    import os
    import subprocess

    from lm_eval.loggers.utils import get_commit_from_path

    try:
        out = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return get_commit_from_path(os.getcwd())  # lm-eval's own fallback: a .git dir read without git


def versions_only_env_info(storage: dict) -> None:
    """lm-eval's ``add_env_info`` (lm_eval/loggers/utils.py) without its ``pretty_env_info``: that is torch's
    ``collect_env``, a ``python -m pip list`` subprocess and system probes, ~3 s of CPU per ``simple_evaluate``
    call (one per benchmark and adapter), for a report lm-eval only puts in the results dict, which we drop. The
    versions it also stores are kept."""
    import lm_eval
    import transformers

    storage.update({"transformers_version": transformers.__version__,
                    "lm_eval_version": getattr(lm_eval, "__version__", None)})


def evaluate(backend, adapter: str | None, name: str, data_dir: Path, work_dir: Path, gen: GenConfig,
             limit: int | None, progress=None, protocol=None) -> dict:
    """Run one math benchmark for one adapter through lm-eval: accuracy (exact_match under math-verify), the share
    of verdicts that were not math-verify's (``grading_fallback``) and of completions cut by the token budget.
    Sampled (``gen.n_samples`` at ``gen.temperature`` > 0): each document's accuracy is the mean of its samples'
    verdicts, one samples-file row per generation (``per_problem.problem_scores`` averages them back)."""
    ensure_offline()
    import lm_eval.evaluator
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    lm_eval.evaluator.get_git_commit_hash = quiet_git_hash
    lm_eval.evaluator.add_env_info = versions_only_env_info

    # lm_eval_model subclasses lm-eval's LM at import: it loads the harness, which `import populora.evaluation`
    # must not (0.7 s), so it comes with lm-eval's own imports above
    from populora.evaluation.harness.lm_eval_model import BackendLM

    protocol = protocol or resolve_protocol("quick", None, max_new_tokens=gen.max_new_tokens)
    if (protocol.samples, protocol.temperature) != (gen.sampled, gen.temperature):  # the decoding gen asks for
        protocol = resolve_decoding(protocol, gen.sampled, gen.temperature)
    include = export_tasks(work_dir / "lm_eval_tasks", data_dir, protocol)
    task = task_name(name)
    template = protocol.template(name) if protocol is not None else "chat"
    lm = BackendLM(backend, adapter, gen, progress, template)
    res = simple_evaluate(model=lm, tasks=[task], task_manager=TaskManager(include_path=str(include), include_defaults=False),
                          limit=limit, log_samples=True, bootstrap_iters=100,  # mean: closed-form stderr
                          random_seed=gen.seed, gen_kwargs={"max_gen_toks": gen.max_new_tokens})
    r = res["results"][task]
    stderr = r.get("exact_match_stderr,none")
    samples = [row for s in res.get("samples", {}).get(task, []) for row in _rows(name, s, lm.truncated)]
    n = len({s["task_id"] for s in samples}) or benchmarks.count_records(data_dir, name, limit)
    return {"metrics": {"accuracy": float(r["exact_match,none"]),
                        "accuracy_stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
                        "grading_fallback": sum(s["grading_fallback"] for s in samples) / max(len(samples), 1),
                        "truncated_rate": truncated_rate(samples)},
            "primary": "accuracy", "n": n, "samples": samples,
            "lm_eval_config": {"task": task, "version": res.get("versions", {}).get(task), "template": template}}


def _rows(name: str, s: dict, truncated: dict[int, list[bool]]) -> list[dict]:
    """The samples-file rows of one of lm-eval's logged documents: one per generation (sampled: its N responses,
    each with its own verdict from ``sample_verdicts``)."""
    resps = (s.get("resps") or [[""]])[0] or [""]
    cut = truncated.get(s["doc_id"], [])
    base = {"task_id": f"{name}/{s['doc_id']}", "target": s.get("target")}
    if "sample_verdicts" not in s:  # greedy: one response, the document's verdict
        return [{**base, "completion": resps[0], "correct": bool(s.get("exact_match")),
                 "grading_fallback": bool(s.get("grading_fallback")), "truncated": bool(cut[:1] and cut[0])}]
    return [{**base, "completion": text, "correct": correct, "grading_fallback": fallback,
             "truncated": bool(j < len(cut) and cut[j])}
            for j, (text, (correct, fallback)) in enumerate(zip(resps, s["sample_verdicts"]))]
