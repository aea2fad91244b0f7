"""Score targets on benchmarks, one (target, benchmark) pair at a time, resumably.

Each finished pair is written atomically to ``<out>/pairs/<target>/<benchmark>.json`` (its generations to
``<out>/samples/<target>/<benchmark>.jsonl``) and skipped on the next start if its config matches, so a killed
evaluation continues where it stopped. The model is loaded only if some pair is still to do.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable

from populora.evaluation import benchmarks, evalplus_suite, livecodebench, math_suite
from populora.evaluation.generation import GenConfig
from populora.evaluation.targets import Target


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "target"


def write_atomic(path: Path, text: str) -> None:
    """Write-then-rename: a killed process leaves the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def pair_config(gen: GenConfig, limit: int | None, model: dict) -> dict:
    """What a stored result must match to be reused."""
    return {"generation": gen.to_dict(), "limit": limit, "model": model}


def run_benchmark(backend, adapter: str | None, name: str, data_dir: Path, work_dir: Path, gen: GenConfig,
                  limit: int | None, progress) -> dict:
    """Dispatch to the suite that owns ``name``."""
    if name in evalplus_suite.DATASETS:
        return evalplus_suite.evaluate(backend, adapter, name, data_dir, gen, limit, progress)
    if name == livecodebench.NAME:
        return livecodebench.evaluate(backend, adapter, data_dir, gen, limit, progress)
    return math_suite.evaluate(backend, adapter, name, data_dir, work_dir, gen, limit, progress)


def n_items(data_dir: Path, name: str, limit: int | None) -> int:
    n = len(benchmarks.read_records(data_dir, name))
    return min(n, limit) if limit else n


class Runner:
    """Evaluates ``targets`` x ``names``; ``backend_factory()`` is called once, only when something is left to do."""

    def __init__(self, backend_factory: Callable, data_dir: Path, out_dir: Path, gen: GenConfig,
                 limit: int | None, model: dict, log=None):
        self.backend_factory, self.backend = backend_factory, None
        self.data_dir, self.out_dir, self.gen, self.limit = data_dir, out_dir, gen, limit
        self.config = pair_config(gen, limit, model)
        self.log = log or (lambda msg: print(msg, file=sys.stderr))

    def pair_path(self, t: Target, name: str) -> Path:
        return self.out_dir / "pairs" / slug(t.label) / f"{name}.json"

    def done(self, t: Target, name: str) -> dict | None:
        path = self.pair_path(t, name)
        if not path.is_file():
            return None
        try:
            result = json.loads(path.read_text())
        except json.JSONDecodeError:
            return None
        return result if result.get("config") == self.config else None

    def run(self, targets: list[Target], names: list[str]) -> dict[str, dict[str, dict]]:
        """{target label: {benchmark: result}}, computing only the missing pairs."""
        scores: dict[str, dict[str, dict]] = {}
        for t in targets:
            todo = []
            for name in names:
                prev = self.done(t, name)
                if prev is not None:
                    scores.setdefault(t.label, {})[name] = prev
                    self.log(f"{t.label:>14} | {benchmarks.BENCHMARKS[name].label:<28} done earlier: {prev['score']:.3f}")
                else:
                    todo.append(name)
            if todo:
                scores.setdefault(t.label, {}).update(self._run_target(t, todo))
        return scores

    def _run_target(self, t: Target, names: list[str]) -> dict[str, dict]:
        from tqdm import tqdm

        if self.backend is None:
            self.backend = self.backend_factory()
        adapter = None
        if t.adapter_dir:
            adapter = "eval_" + slug(t.label)
            self.backend.add_adapter(adapter, from_dir=t.adapter_dir)
        out = {}
        try:
            for name in names:
                rows = n_items(self.data_dir, name, self.limit) * (self.gen.n_samples if self.gen.temperature > 0 else 1)
                desc = f"{t.label} | {benchmarks.BENCHMARKS[name].label}"
                with tqdm(total=rows, desc=desc, unit="gen", file=sys.stderr, dynamic_ncols=True) as bar:
                    start = time.time()
                    result = run_benchmark(self.backend, adapter, name, self.data_dir, self.out_dir / "work",
                                           self.gen, self.limit, bar.update)
                out[name] = self._store(t, name, result, time.time() - start)
                self.log(f"{t.label:>14} | {benchmarks.BENCHMARKS[name].label:<28} {out[name]['primary']} = {out[name]['score']:.3f}")
        finally:
            if adapter is not None:
                self.backend.remove_adapter(adapter)
        return out

    def _store(self, t: Target, name: str, result: dict, seconds: float) -> dict:
        samples = result.pop("samples", [])
        samples_path = self.out_dir / "samples" / slug(t.label) / f"{name}.jsonl"
        write_atomic(samples_path, "".join(json.dumps(s) + "\n" for s in samples))
        result.update(target=t.label, kind=t.kind, benchmark=name, alias=benchmarks.BENCHMARKS[name].label,
                      score=result["metrics"][result["primary"]], seconds=round(seconds, 2),
                      samples_file=str(samples_path), config=self.config)
        write_atomic(self.pair_path(t, name), json.dumps(result, indent=1))  # last: marks the pair finished
        return result
