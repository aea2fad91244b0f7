"""In-training evaluation (``eval.every``): one named phase of the step that scores every alive member on a fixed,
seeded subset of benchmarks, with the trainer's own backend and its adapters in place.

How it works:
- The subset is drawn once per run (``eval.seed``, per benchmark) and written into ``<run dir>/eval_subset`` with
  its own ``SHA256SUMS``, so the evaluation library reads it like any data dir and every evaluated step scores
  the same problems. The draw depends on the seed, the benchmark and ``eval.limit`` only: a population and its
  baseline with the same ``eval.seed`` score the same problems.
- Scoring is ``populora eval``'s own ``evaluation.evaluate.score`` on the batched path (every member of a
  benchmark in the same mixed-adapter batches), with ``loaded`` naming the trainer's adapters, so nothing is copied or reloaded: the
  multi-LoRA, PEFT, Ray and vLLM backends all serve it as they serve rollouts.
- Members log ``eval/<benchmark>/<metric>`` (``populora eval``'s names) at MLflow step = training step; the parent
  logs ``eval_population/<mean|weakest|best>/<benchmark>/<metric>`` over the members alive at that step.
- Its compute (tokens generated, completions) is measured per member and logged as ``compute/eval/*``, never in
  the training ledger that compute-matching reads. The trainer's random state is put back afterwards, so turning
  evaluation on does not change what training does.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import zlib
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from populora.evaluation.harness import benchmarks
from populora.evaluation import evaluate, results
from populora.evaluation.config import EvalConfig
from populora.evaluation.evaluate import MissingDependency, require_packages
from populora.evaluation.harness.generation import GenConfig
from populora.evaluation.summary import population_summary
from populora.evaluation.targets import MEMBER, Target
from populora.platform.store import runlayout as rl
from populora.platform.config import ConfigError, ModelSource
from populora.platform.files import write_atomic

log = logging.getLogger(__name__)

SUBSET_DIR = "eval_subset"  # under the run dir: the subset's benchmark files and SHA256SUMS
STEPS_DIR = "eval_steps"    # under the run dir: each evaluated step's pairs and samples (the Runner's layout)


# ====================================================================== the fixed subset
def subset_indices(n: int, limit: int, seed: int, name: str) -> list[int]:
    """``limit`` of ``n`` items, drawn without replacement from (seed, benchmark), in file order.

    >>> subset_indices(10, 3, 0, "gsm8k") == subset_indices(10, 3, 0, "gsm8k"), len(subset_indices(10, 30, 0, "x"))
    (True, 10)
    >>> subset_indices(1000, 5, 0, "gsm8k") != subset_indices(1000, 5, 1, "gsm8k")
    True
    """
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])  # each benchmark its own stream
    return sorted(int(i) for i in rng.choice(n, size=min(limit, n), replace=False))


def write_subset(source: Path, names: list[str], limit: int, seed: int, out: Path) -> Path:
    """The subset of each benchmark in ``source`` written to ``out`` (same relative paths, JSONL lines kept byte
    for byte), with a ``SHA256SUMS`` of its own. Writing it again gives the same bytes."""
    sums = []
    for name in names:
        rel = benchmarks.BENCHMARKS[name].file
        path, target = source / rel, out / rel
        if path.suffix == ".json":  # LiveCodeBench: one JSON list
            records = json.loads(path.read_text())
            text = json.dumps([records[i] for i in subset_indices(len(records), limit, seed, name)])
        else:
            lines = [line for line in path.read_text().splitlines() if line.strip()]
            text = "".join(lines[i] + "\n" for i in subset_indices(len(lines), limit, seed, name))
        write_atomic(target, text)
        sums.append(f"{benchmarks.sha256(target)}  {rel}\n")
    write_atomic(out / benchmarks.CHECKSUMS, "".join(sums))
    return out


def check(cfg) -> None:
    """Before a run starts: the benchmarks' files are there and intact, and their graders are installed;
    ``ConfigError`` naming ``eval.*`` and the fix otherwise."""
    if not cfg.eval.every:
        return
    try:
        benchmarks.verify(benchmarks.data_dir(), cfg.eval.names)
        require_packages(cfg.eval.names)
    except (benchmarks.DataError, MissingDependency) as err:
        raise ConfigError(f"eval.every={cfg.eval.every} needs eval.benchmarks={cfg.eval.benchmarks}: {err} "
                          f"(or turn in-training evaluation off with eval.every=0)") from None


def run_tags(cfg) -> dict[str, str]:
    """The parent run's tags saying its eval curves are a subset, never a full evaluation ({} when off)."""
    ec = cfg.eval
    if not ec.every:
        return {}
    return {rl.EVAL_EVERY: str(ec.every), rl.EVAL_SUBSET: rl.eval_subset(ec.names, ec.limit),
            rl.EVAL_SUBSET_SEED: str(ec.seed)}


# ====================================================================== the population's statistics
NOT_AVERAGED = ("_stderr", "/max_new_tokens")  # a mean of these says nothing; the weakest's / best's own are kept
def population_stats(per_member: dict[str, dict[str, float]], names: list[str]) -> dict[str, float]:
    """The parent's ``eval_population/*`` metrics of one step from each alive member's ``eval/*`` metrics: the
    mean of every metric (but standard errors and token budgets), and per benchmark all metrics of the weakest and
    of the best member, ranked by the benchmark's score (``population_summary``; ties: the first member id).
    Chosen on the same problems they are scored on.

    >>> s = population_stats({"S0": {"eval/gsm8k/score": 0.5, "eval/gsm8k/truncated_rate": 0.0},
    ...                       "S1": {"eval/gsm8k/score": 0.0, "eval/gsm8k/truncated_rate": 1.0}}, ["gsm8k"])
    >>> s["eval_population/mean/gsm8k/score"], s["eval_population/weakest/gsm8k/truncated_rate"], s["eval_population/best/gsm8k/score"]
    (0.25, 1.0, 0.5)
    """
    per = {m: per_member[m] for m in sorted(per_member, key=rl.member_order)}  # ties go to the first listed
    averaged = population_summary({m: {k: v for k, v in s.items() if not k.endswith(NOT_AVERAGED)} for m, s in per.items()})
    out = {rl.eval_population_key("mean", key): averaged.mean[key] for key in sorted(averaged.mean)}
    for name in names:
        score = f"{rl.EVAL_PREFIX}{name}/score"
        summary = population_summary(per, rank={m: s.get(score) for m, s in per.items()})
        for stat, member in ((w, summary.picks[w][0]) for w in summary.picks):
            for key, value in per[member].items():
                if key.startswith(f"{rl.EVAL_PREFIX}{name}/"):
                    out[rl.eval_population_key(stat, key)] = value
    return out


# ====================================================================== compute
class Counted:
    """The trainer's backend as evaluation sees it: ``generate`` also counts each adapter's completions and
    generated tokens; everything else is the backend's own."""

    def __init__(self, backend):
        self._backend = backend
        self.spent: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(rl.EVAL_COMPUTE_QUANTITIES, 0.0))

    def generate(self, prompts, adapters, *args, **kwargs):
        outs = self._backend.generate(prompts, adapters, *args, **kwargs)
        for adapter, g in zip(adapters, outs):
            if adapter is not None:
                self.spent[adapter]["generated_tokens"] += len(g.completion_ids or [])
                self.spent[adapter]["completions"] += 1
        return outs

    def __getattr__(self, name: str):
        return getattr(self._backend, name)


@contextmanager
def kept_random_state():
    """Evaluation seeds the global generators (the backends' ``generate``, lm-eval's ``simple_evaluate``): put
    training's states back after it, so a run with evaluation trains exactly as one without."""
    import torch

    state = (random.getstate(), np.random.get_state())
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(state[0])
            np.random.set_state(state[1])


# ====================================================================== the phase
@dataclass
class Scored:
    """One evaluated step: each member's ``eval/*`` metrics, the parent's ``eval_population/*``, the compute."""

    member_metrics: dict[str, dict[str, float]]
    run_metrics: dict[str, float]
    spent: dict[str, dict[str, float]] = field(default_factory=dict)


class PeriodicEval:
    """``eval.every``'s evaluation of one run: the subset, the protocol and where each step's files go."""

    def __init__(self, cfg, run_dir: Path, data_dir: Path | None = None):
        self.cfg, self.ec, self.run_dir = cfg, cfg.eval, run_dir
        self.names = self.ec.names
        self.data = write_subset(data_dir or benchmarks.data_dir(), self.names, self.ec.limit, self.ec.seed,
                                 run_dir / SUBSET_DIR)
        # The evaluation library's own config, so scoring here is `populora eval`'s (one entry point,
        # evaluation.evaluate.score): greedy, batched, the protocol's budgets and templates.
        self.eval_config = EvalConfig(run=run_dir.name, benchmarks=",".join(self.names), batched=True,
                                      protocol=None if self.ec.protocol == "auto" else self.ec.protocol,
                                      generation=GenConfig(batch_size=self.ec.batch_size,
                                                           max_new_tokens=self.ec.max_new_tokens))
        self.model = ModelSource(**cfg.model.model_dump(include=set(ModelSource.model_fields)))

    def due(self, step: int) -> bool:
        """Every ``eval.every`` steps, and at the last step so a run always ends with a point."""
        return bool(self.ec.every) and (step % self.ec.every == 0 or step == self.cfg.steps)

    def run(self, backend, member_ids: list[str], step: int, part: str = "") -> Scored:
        """Score ``member_ids`` (adapters the backend holds under those names) on the subset at ``step``
        (``part``: a sub-folder of the step's files, for a second call in the same step)."""
        out = self.run_dir / STEPS_DIR / f"step_{step:06d}" / part
        shutil.rmtree(out, ignore_errors=True)  # a resumed step re-trained its adapters: never reuse its old pairs
        counted = Counted(backend)
        targets = [Target(m, MEMBER, None) for m in member_ids]
        plan = evaluate.Plan(targets, self.names, self.data, out, self.model, step=step)
        with kept_random_state():  # no tracker: the trainer logs these as histories, not as a final evaluation
            data = evaluate.score(plan, self.eval_config, backend=counted, log=log.info,
                                  loaded={m: m for m in member_ids}, progress=False).data
        per_member = {m: results.metric_keys(rl.EVAL_PREFIX.rstrip("/"), data["results"].get(m, {})) for m in member_ids}
        return Scored(per_member, population_stats(per_member, self.names), {m: dict(v) for m, v in counted.spent.items()})

    def complete(self, backend, earlier: Scored | None, alive: list[str], step: int) -> Scored:
        """The step's evaluation after evolution: ``earlier`` scored the members as they trained this step, before
        evolution replaced some (their histories end on their last step, not one step early); here the alive
        members not scored yet (the children evolution just made) are scored, and the parent's mean / weakest /
        best are over the members alive now (survivors' weights did not change), as checkpoint ``step`` holds."""
        todo = [m for m in alive if earlier is None or m not in earlier.member_metrics]
        new = self.run(backend, todo, step, part="born" if earlier else "") if todo else Scored({}, {}, {})
        per = {**(earlier.member_metrics if earlier else {}), **new.member_metrics}
        spent = {**(earlier.spent if earlier else {}), **new.spent}
        return Scored(per, population_stats({m: per[m] for m in alive if m in per}, self.names), spent)
