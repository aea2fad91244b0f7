"""Score targets on benchmarks, resumably: one (target, benchmark) pair at a time, or (``batched``) every target
of a benchmark at once in mixed-adapter batches (``evaluation/harness/batching.py``), with the same scores.

Each finished pair is written atomically to ``<out>/pairs/<target>/<benchmark>.json`` (its generations to
``<out>/samples/<target>/<benchmark>.jsonl``) and skipped on the next start if its config matches, so a killed
evaluation continues where it stopped. The model is loaded only if some pair is still to do.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from populora.evaluation.harness import benchmarks, evalplus_suite, livecodebench, math_suite
from populora.evaluation.harness import protocol as P
from populora.evaluation.harness.batching import SharedBackend, Stopped
from populora.evaluation.harness.generation import GenConfig, ensure_offline
from populora.evaluation.statistics.stats import one_sample_stderr
from populora.evaluation.targets import Target
from populora.platform.files import write_atomic


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "target"


PACKAGES = ("evalplus", "lm_eval", "math-verify", "torch", "transformers", "peft", "vllm")


def versions() -> dict[str, str | None]:
    """Versions of the packages that can change a score (None: not installed)."""
    from importlib import metadata

    out = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def run_benchmark(backend, adapter: str | None, name: str, data_dir: Path, work_dir: Path, gen: GenConfig,
                  limit: int | None, progress, protocol=None, sandbox=None) -> dict:
    """Dispatch to the suite that owns ``name``."""
    if name in evalplus_suite.DATASETS:
        return evalplus_suite.evaluate(backend, adapter, name, data_dir, gen, limit, progress, protocol, sandbox)
    if name == livecodebench.NAME:
        return livecodebench.evaluate(backend, adapter, data_dir, gen, limit, progress)
    return math_suite.evaluate(backend, adapter, name, data_dir, work_dir, gen, limit, progress, protocol)


ITEMS_DIR = "items"  # <out>/items/<target>/<benchmark>.json: how far a running pair is (the UI's progress and ETA)


class ItemProgress:
    """The progress callback of one (target, benchmark) pair: advances the log's tqdm bar and rewrites
    ``<out>/items/<target>/<benchmark>.json`` ({done, total, started, updated}, in generated rows) as each
    generation chunk ends, so a batched evaluation (every target of a benchmark at once, all finishing together)
    shows progress long before its first pair is stored."""

    def __init__(self, path: Path, total: int, bar_update: Callable[[int], object]):
        self.path, self.total, self.bar_update = path, total, bar_update
        self.done, self.started = 0, time.time()
        self._write()

    def __call__(self, n: int = 1) -> None:
        self.bar_update(n)
        self.done += n
        self._write()

    def _write(self) -> None:
        write_atomic(self.path, json.dumps({"done": min(self.done, self.total), "total": self.total,
                                            "started": self.started, "updated": time.time()}))


class Runner:
    """Evaluates ``targets`` x ``names``; ``backend_factory()`` is called once, only when something is left to do."""

    def __init__(self, backend_factory: Callable, data_dir: Path, out_dir: Path, gen: GenConfig,
                 limit: int | None, model: dict, log=None, batched: bool = True, protocol=None,
                 loaded: dict[str, str] | None = None, progress: bool = True):
        """``loaded``: {target label: adapter name} of adapters the backend already holds (in-training evaluation
        scores the trainer's own adapters in place): used as they are, neither loaded from a dir nor removed."""
        self.backend_factory, self.backend = backend_factory, None
        # sampling draws its noise per batch: merged batches would change it, so only greedy runs batched
        self.batched = batched and gen.temperature == 0
        self.data_dir, self.out_dir, self.gen, self.limit, self.model = data_dir, out_dir, gen, limit, model
        self.protocol = protocol or P.resolve("quick", None, max_new_tokens=gen.max_new_tokens)
        if (self.protocol.samples, self.protocol.temperature) != (gen.sampled, gen.temperature):  # the decoding used
            self.protocol = P.resolve_decoding(self.protocol, gen.sampled, gen.temperature)
        self.packages = versions()
        self.sums = benchmarks.expected_checksums(data_dir) if (data_dir / benchmarks.CHECKSUMS).is_file() else {}
        self.config = {"protocol": self.protocol.to_dict(), "limit": limit, "model": model,
                       "generation": gen.to_dict(), "batched": self.batched, "versions": self.packages}
        self.sandbox = None  # EvalPlus's, made on first use and shared by every target (closed by run())
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.loaded = dict(loaded or {})
        self.progress = progress  # tqdm bars on stderr (off inside training: its own step line says it)

    def gen_for(self, name: str) -> GenConfig:
        """The decoding settings of benchmark ``name``: the shared ones with the protocol's token budget."""
        return self.gen.model_copy(update={"max_new_tokens": self.protocol.budget(name)})

    def pair_config(self, name: str) -> dict:
        """What a stored result of ``name`` must match to be reused: everything that can change a score (decoding
        with the benchmark's budget, template and time limits, the subset, the model, batched or not, the data
        file's checksum and the package versions)."""
        out = {"generation": self.gen_for(name).to_dict(), "limit": self.limit, "model": self.model,
               "protocol": self.protocol.name, "template": self.protocol.template(name), "batched": self.batched,
               "data_sha256": self.sums.get(benchmarks.BENCHMARKS[name].file), "versions": self.packages}
        if name in evalplus_suite.DATASETS:
            limits = evalplus_suite.time_limits(self.protocol)
            out["evalplus_time_limits"] = {"min_time_limit": limits[0], "gt_time_limit_factor": limits[1]}
        return out

    def _sandbox(self, name: str):
        if name not in evalplus_suite.DATASETS:
            return None
        if self.sandbox is None:
            self.sandbox = evalplus_suite.make_sandbox()
        return self.sandbox

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
        return result if result.get("config") == self.pair_config(name) else None

    def run(self, targets: list[Target], names: list[str]) -> dict[str, dict[str, dict]]:
        """{target label: {benchmark: result}}, computing only the missing pairs."""
        scores: dict[str, dict[str, dict]] = {}
        try:
            if self.batched and len(targets) > 1:
                return self._run_batched(targets, names, scores)
            for t in targets:
                todo = self._todo(t, names, scores)
                if todo:
                    scores.setdefault(t.label, {}).update(self._run_target(t, todo))
            return scores
        finally:
            if self.sandbox is not None:
                self.sandbox.close()
                self.sandbox = None

    def _todo(self, t: Target, names: list[str], scores: dict) -> list[str]:
        """The benchmarks ``t`` still needs; finished pairs go straight into ``scores``."""
        todo = []
        for name in names:
            prev = self.done(t, name)
            if prev is not None:
                scores.setdefault(t.label, {})[name] = prev
                self.log(f"{t.label:>14} | {benchmarks.BENCHMARKS[name].label:<28} done earlier: {prev['score']:.3f}")
            else:
                todo.append(name)
        return todo

    def _run_batched(self, targets: list[Target], names: list[str], scores: dict) -> dict[str, dict[str, dict]]:
        """Benchmark by benchmark, every target still missing it at once; each pair is stored as it finishes."""
        todo = {t.label: self._todo(t, names, scores) for t in targets}
        pending = [t for t in targets if todo[t.label]]
        if not pending:
            return scores
        if self.backend is None:
            self.backend = self.backend_factory()
        adapters = {t.label: self._load(t) for t in pending}
        try:
            for name in names:
                group = [t for t in pending if name in todo[t.label]]
                if group:
                    self._run_group(group, name, adapters, scores)
        finally:
            for label, adapter in adapters.items():
                if adapter is not None and label not in self.loaded:
                    self.backend.remove_adapter(adapter)
        return scores

    def _run_group(self, group: list[Target], name: str, adapters: dict, scores: dict) -> None:
        """One thread per target runs the suite; their generation meets in :class:`SharedBackend`."""
        self._warm_up(name)
        shared = SharedBackend(self.backend, len(group))
        errors: list[BaseException] = []

        def one(i: int, t: Target) -> None:
            try:
                # its own work dir: suites that export files there (lm-eval tasks) must not race each other
                result, seconds = self._benchmark(shared.party(i), t, adapters[t.label], name,
                                                  self.out_dir / "work" / slug(t.label))
                scores.setdefault(t.label, {})[name] = self._finish(t, name, result, seconds)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread below
                errors.append(e)
            finally:
                shared.leave()

        threads = [threading.Thread(target=one, args=(i, t), name=f"eval-{slug(t.label)}") for i, t in enumerate(group)]
        for th in threads:
            th.start()
        try:
            for th in threads:
                th.join()
        except BaseException:  # a stop (KeyboardInterrupt) reaches only this thread: end the others' generation too
            shared.cancel(Stopped("evaluation stopped"))
            for th in threads:
                th.join()  # each ends at its next generate call (not daemon: torch must not die mid-kernel)
            raise
        if errors:
            raise errors[0]

    def _warm_up(self, name: str) -> None:
        """What the suites do once, lazily, done here before the threads start: importing the same module from
        several threads at once races (a thread sees it half initialised), and so does filling a shared cache."""
        ensure_offline()
        self._sandbox(name)  # one pool for every thread of the group
        if name in evalplus_suite.DATASETS:
            evalplus_suite.expected_outputs(name, evalplus_suite.problems(name, self.data_dir, self.limit), self.data_dir)
        elif name == livecodebench.NAME:
            livecodebench.problems(self.data_dir, self.limit)
        else:
            import lm_eval  # noqa: F401
            import lm_eval.tasks  # noqa: F401

            from populora.evaluation.harness import lm_eval_model

    def _load(self, t: Target) -> str | None:
        if t.label in self.loaded:
            return self.loaded[t.label]
        if not t.adapter_dir:
            return None  # the bare base model: rows without adapter
        adapter = "eval_" + slug(t.label)
        self.backend.add_adapter(adapter, from_dir=t.adapter_dir)
        return adapter

    def _benchmark(self, backend, t: Target, adapter: str | None, name: str, work_dir: Path) -> tuple[dict, float]:
        from tqdm import tqdm

        rows = benchmarks.count_records(self.data_dir, name, self.limit) * self.gen.sampled
        desc = f"{t.label} | {benchmarks.BENCHMARKS[name].label}"
        with tqdm(total=rows, desc=desc, unit="gen", file=sys.stderr, dynamic_ncols=True, disable=not self.progress) as bar:
            items = ItemProgress(self.out_dir / ITEMS_DIR / slug(t.label) / f"{name}.json", rows, bar.update)
            start = time.time()
            result = run_benchmark(backend, adapter, name, self.data_dir, work_dir, self.gen_for(name), self.limit,
                                   items, self.protocol, self._sandbox(name))
        return result, time.time() - start

    def _finish(self, t: Target, name: str, result: dict, seconds: float) -> dict:
        stored = self._store(t, name, result, seconds)
        self.log(f"{t.label:>14} | {benchmarks.BENCHMARKS[name].label:<28} {stored['primary']} = {stored['score']:.3f}")
        return stored

    def _run_target(self, t: Target, names: list[str]) -> dict[str, dict]:
        if self.backend is None:
            self.backend = self.backend_factory()
        adapter = self._load(t)
        out = {}
        try:
            for name in names:
                result, seconds = self._benchmark(self.backend, t, adapter, name, self.out_dir / "work")
                out[name] = self._finish(t, name, result, seconds)
        finally:
            if adapter is not None and t.label not in self.loaded:
                self.backend.remove_adapter(adapter)
        return out

    def _store(self, t: Target, name: str, result: dict, seconds: float) -> dict:
        samples = result.pop("samples", [])
        if self.gen.sampled > 1:  # what the samples bought: the one-sample SE at this pass@1 (report.sampling_notes)
            result["metrics"]["stderr_one_sample"] = one_sample_stderr(result["metrics"][result["primary"]], result["n"])
        samples_path = self.out_dir / "samples" / slug(t.label) / f"{name}.jsonl"
        write_atomic(samples_path, "".join(json.dumps(s) + "\n" for s in samples))
        result.update(target=t.label, kind=t.kind, benchmark=name, alias=benchmarks.BENCHMARKS[name].label,
                      score=result["metrics"][result["primary"]], seconds=round(seconds, 2),
                      samples_file=str(samples_path), config=self.pair_config(name),
                      truncated_rate=result["metrics"].get("truncated_rate"))
        write_atomic(self.pair_path(t, name), json.dumps(result, indent=1))  # last: marks the pair finished
        return result
