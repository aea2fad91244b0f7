"""The math suite through lm-eval: our task YAMLs (local JSONL, math-verify grading) and an lm-eval ``LM`` that
generates with the platform's backend, the adapter applied, the same chat template and greedy decoding for all."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from populora.evaluation import benchmarks

TASKS_DIR = Path(__file__).parent / "lm_eval_tasks"


def export_tasks(out_dir: Path, data_dir: Path, names: list[str], max_new_tokens: int = 512) -> Path:
    """Write runnable lm-eval task YAMLs (absolute data paths) + utils.py into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    template = (TASKS_DIR / "template.yaml").read_text()
    shutil.copy(TASKS_DIR / "utils.py", out_dir / "utils.py")
    for n in names:
        text = template.format(benchmark=n, data_file=(data_dir / benchmarks.BENCHMARKS[n].file).resolve(),
                               max_new_tokens=max_new_tokens)
        (out_dir / f"populora_{n}.yaml").write_text(text)
    return out_dir


def backend_lm(backend, adapter: str | None, batch_size: int = 8):
    """An lm-eval LM whose generate_until runs ``backend.generate`` with ``adapter`` (None = the base model)."""
    from lm_eval.api.model import LM

    class BackendLM(LM):
        def generate_until(self, requests, disable_tqdm: bool = False):
            out = []
            for i in range(0, len(requests), batch_size):
                chunk = requests[i:i + batch_size]
                prompts = [backend.encode_chat([{"role": "user", "content": r.args[0]}]) for r in chunk]
                kwargs = chunk[0].args[1]
                stop = tuple(s for s in kwargs.get("until", []) if s)
                gens = backend.generate(prompts, [adapter] * len(chunk), int(kwargs.get("max_gen_toks", 512)),
                                        temperature=0, stop=stop)
                out += [g.text for g in gens]
            return out

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError("PopuLoRA's math tasks are generative; loglikelihood tasks are not supported")

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError("PopuLoRA's math tasks are generative; loglikelihood tasks are not supported")

    return BackendLM()


def evaluate(backend, adapter: str | None, names: list[str], data_dir: Path, work_dir: Path,
             limit: int | None, max_new_tokens: int) -> dict[str, dict]:
    """Run the math benchmarks ``names`` for one adapter; return {benchmark: {"accuracy", "stderr", "n"}}."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    include = export_tasks(work_dir / "lm_eval_tasks", data_dir, names, max_new_tokens)
    results = simple_evaluate(model=backend_lm(backend, adapter), tasks=[f"populora_{n}" for n in names],
                              task_manager=TaskManager(include_path=str(include), include_defaults=False),
                              limit=limit, log_samples=False, bootstrap_iters=0)
    out = {}
    for n in names:
        r = results["results"][f"populora_{n}"]
        stderr = r.get("exact_match_stderr,none")
        out[n] = {"accuracy": float(r["exact_match,none"]),
                  "stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
                  "n": int(results.get("n-samples", {}).get(f"populora_{n}", {}).get("effective", 0))}
    return out
