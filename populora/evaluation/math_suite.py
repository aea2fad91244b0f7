"""The math suite (AIME24, AIME25, AMC23, MATH-500, Minerva Math, GSM8K, OlympiadBench) through lm-eval.

The task YAMLs ship in ``lm_eval_tasks/`` (local JSONL via ``dataset_path: json``; prompts and math-verify
grading in its ``utils.py``). Their data paths are relative to the project root; ``export_tasks`` writes copies
pointing at any data dir, which is what both ``populora eval`` and a plain ``lm_eval --include_path DIR`` use.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from populora.evaluation import benchmarks
from populora.evaluation.generation import GenConfig, ensure_offline, truncated_rate

TASKS_DIR = Path(__file__).parent / "lm_eval_tasks"
SHIPPED_DATA_PREFIX = "../shared/data/benchmarks/"


def task_name(benchmark: str) -> str:
    return f"populora_{benchmark}"


def export_tasks(out_dir: Path, data_dir: Path, protocol=None) -> Path:
    """Copy the task YAMLs + utils.py into ``out_dir`` with absolute paths into ``data_dir``; with a ``protocol``
    (``protocol.Protocol``), its per-benchmark budgets as ``max_gen_toks`` and, for azr, the azr hooks (bare
    question, AZR's answer extraction)."""
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


def evaluate(backend, adapter: str | None, name: str, data_dir: Path, work_dir: Path, gen: GenConfig,
             limit: int | None, progress=None, protocol=None) -> dict:
    """Run one math benchmark for one adapter through lm-eval: accuracy (exact_match under math-verify), the share
    of verdicts that were not math-verify's (``grading_fallback``) and of completions cut by the token budget."""
    ensure_offline()
    import lm_eval.evaluator
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    lm_eval.evaluator.get_git_commit_hash = quiet_git_hash

    # lm_eval_model subclasses lm-eval's LM at import: it loads the harness, which `import populora.evaluation`
    # must not (0.7 s), so it comes with lm-eval's own imports above
    from populora.evaluation.lm_eval_model import BackendLM

    include = export_tasks(work_dir / "lm_eval_tasks", data_dir, protocol)
    task = task_name(name)
    template = protocol.template(name) if protocol is not None else "chat"
    lm = BackendLM(backend, adapter, gen, progress, template)
    res = simple_evaluate(model=lm, tasks=[task], task_manager=TaskManager(include_path=str(include), include_defaults=False),
                          limit=limit, log_samples=True, bootstrap_iters=100,  # mean: closed-form stderr
                          random_seed=gen.seed, gen_kwargs={"max_gen_toks": gen.max_new_tokens})
    r = res["results"][task]
    stderr = r.get("exact_match_stderr,none")
    samples = [{"task_id": f"{name}/{s['doc_id']}", "completion": (s.get("resps") or [[""]])[0][0],
                "target": s.get("target"), "correct": bool(s.get("exact_match")),
                "grading_fallback": bool(s.get("grading_fallback")), "truncated": lm.truncated.get(s["doc_id"], False)}
               for s in res.get("samples", {}).get(task, [])]
    n = len(samples) or len(benchmarks.read_records(data_dir, name, limit))
    return {"metrics": {"accuracy": float(r["exact_match,none"]),
                        "accuracy_stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
                        "grading_fallback": sum(s["grading_fallback"] for s in samples) / max(len(samples), 1),
                        "truncated_rate": truncated_rate(samples)},
            "primary": "accuracy", "n": n, "samples": samples,
            "lm_eval_config": {"task": task, "version": res.get("versions", {}).get(task), "template": template}}
