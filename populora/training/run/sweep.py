"""Sweeps: the cartesian product of grid values x seeds, plus one compute-matched single-agent baseline per seed,
each a ``populora train`` job, run through the local job queue (K at a time) or as Ray Jobs.

A grid axis is ``key=v1,v2`` (values parsed as YAML, like ``--set``), or several keys varied together,
``k1,k2=a1:a2,b1:b2`` (a population mix: ``population.teachers,population.students=1:1,4:4``).

The baseline of seed s is the compute-matched single-agent baseline (``baseline.matched_baseline``: the
population's per-adapter rows per step) of the base config (preset + ``--set``, without the grid values), trained
until its per-adapter ledger equals its seed's population's (``budget.population``: the population runs tagged
with the same sweep and seed, the largest ledger where a grid gives several): the rule the Launch page's "also
launch the baseline" and ``train --baseline`` use. It is planned after its seed's populations, which it follows.

A fork sweep (``populora sweep --fork RUN_ID --step N --grid ...``, ``plan_fork``) runs each grid point x seed as
a fork of that checkpoint (``populora train --fork``) instead of a run from scratch; no baseline (the runs share
the checkpoint's past). It is grouped, tagged and resumed as any sweep; a killed fork resumes as a run.

Resumable: the sweep id is a hash of the plan, so the same command finds the same sweep; a planned run whose
tagged MLflow run FINISHED is skipped, one still running (its job alive) is waited on, one killed is resumed from
its checkpoint (``train --resume``), one failed is started afresh. Each run is found through its job: the
trainer writes ``<job dir>/run_id`` and tags its run ``populora.job_id`` (``runlayout``'s job link), and the
driver then tags it with the sweep (``runlayout.sweep_tags``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from populora.platform import config as config_io
from populora.platform.jobs import jobs, queue
from populora.platform.store import runlayout as rl
from populora.platform.store import sweep as S
from populora.platform.store.tracking import Tracker, tracking_uri
from populora.training.run import fork
from populora.training.compute.baseline import matched_baseline, too_small
from populora.training.config import TrainConfig, job_slots
from populora.training.run.run_log import RunLog


@dataclass
class PlannedRun:
    key: str
    config: str                       # the config label (grid overrides, or "baseline")
    overrides: dict                   # grid overrides of this configuration (dotted key -> value)
    seed: int
    baseline: bool = False
    name: str = ""
    yaml: str = field(default="", repr=False)  # the validated config the job starts with
    fork: str = ""                    # a fork sweep: the run whose checkpoint every run continues ...
    fork_step: int | None = None      # ... its step ...
    fork_sets: list = field(default_factory=list)  # ... and this run's --set overrides of that checkpoint's config


def parse_grid(axes: list[str]) -> list[list[dict]]:
    """Each axis -> its list of override dicts.

    >>> parse_grid(["evolution.every=0,2"])
    [[{'evolution.every': 0}, {'evolution.every': 2}]]
    >>> parse_grid(["population.teachers,population.students=1:1,2:4"])[0][1]
    {'population.teachers': 2, 'population.students': 4}
    """
    out = []
    for axis in axes:
        if "=" not in axis:
            raise config_io.ConfigError(f"grid axis {axis!r} has no '=': write key=v1,v2 or k1,k2=a1:a2,b1:b2")
        keys_text, values_text = axis.split("=", 1)
        keys = [k.strip() for k in keys_text.split(",") if k.strip()]
        values = [v for v in values_text.split(",") if v.strip()]
        if not keys or not values:
            raise config_io.ConfigError(f"grid axis {axis!r} needs at least one key and one value")
        choices = []
        for v in values:
            parts = v.split(":") if len(keys) > 1 else [v]
            if len(parts) != len(keys):
                raise config_io.ConfigError(f"grid value {v!r} of {axis!r} needs {len(keys)} parts joined by ':'")
            choices.append({k: config_io.parse_override(f"{k}={p}")[1] for k, p in zip(keys, parts)})
        out.append(choices)
    return out


def label(overrides: dict) -> str:
    """The config label of a grid combination.

    >>> label({"population.teachers": 1, "population.students": 1})
    'population.students=1 population.teachers=1'"""
    return " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(overrides.items())) or "default"


def plan(config_path: str | None, grid: list[str], seeds: int, baseline: bool, sets: list[str],
         ray_address: str | None = None) -> list[PlannedRun]:
    """Every run of the sweep, each config validated now (a typo fails before anything starts)."""
    if seeds < 1:
        raise config_io.ConfigError(f"--seeds must be >= 1, got {seeds}")
    base = config_io.load(TrainConfig, config_path, sets)
    combos = [dict(kv for d in combo for kv in d.items()) for combo in itertools.product(*parse_grid(grid))] or [{}]
    runs = []
    for offset in range(seeds):
        seed = base.seed + offset
        for combo in combos:
            extra = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in combo.items()]
            runs.append(_planned(config_path, sets + extra, combo, seed, False, base.name, ray_address))
        if baseline:  # after its seed's populations: it follows their ledger, so it must not hold the queue first
            runs.append(_planned(config_path, sets, {}, seed, True, base.name, ray_address))
    return runs


def match_warnings(runs: list[PlannedRun]) -> list[str]:
    """For a sweep with baselines: each planned population configuration that may be too small to compute-match
    (``baseline.too_small``), once per configuration, in words; printed at launch."""
    if not any(r.baseline for r in runs):
        return []
    out = {}
    for r in runs:
        if not r.baseline and r.config not in out:
            out[r.config] = too_small(TrainConfig.model_validate(yaml.safe_load(r.yaml)))
    return [f"warning: population {label} {words}" for label, words in out.items() if words]


def plan_fork(run_id: str, step: int, grid: list[str], seeds: int, sets: list[str]) -> list[PlannedRun]:
    """A sweep over forks of one checkpoint: each grid point x seed is ``populora train --fork RUN_ID --step N``
    with the ``--set`` overrides, the grid values, ``seed`` (seed, seed+1, ... from the checkpoint's; a fork
    that changes the seed draws fresh random streams from it) and a run name; each validated now, as the
    fork itself would (``fork.fork_config``: frozen settings, bounds, ``steps`` beyond N)."""
    if seeds < 1:
        raise config_io.ConfigError(f"--seeds must be >= 1, got {seeds}")
    try:
        parent = fork.checkpoint_config(RunLog.recorded_run_dir(run_id), step)
    except LookupError as err:
        raise config_io.ConfigError(f"{err}; list runs with: populora runs") from None
    combos = [dict(kv for d in combo for kv in d.items()) for combo in itertools.product(*parse_grid(grid))] or [{}]
    runs = []
    for offset in range(seeds):
        seed = parent.seed + offset
        for combo in combos:
            lab = label(combo)
            name = f"{parent.name}-fork{step}-{_short(combo)}-s{seed}"
            extra = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in combo.items()]
            overrides = list(sets) + extra + [f"seed={seed}", f"name={name}"]
            cfg = fork.fork_config(parent, overrides, step)
            runs.append(PlannedRun(S.run_key(lab, seed), lab, combo, seed, False, name, config_io.dump(cfg),
                                   run_id, step, overrides))
    return runs


def _planned(config_path, overrides: list[str], combo: dict, seed: int, is_baseline: bool, name: str,
             ray_address: str | None) -> PlannedRun:
    cfg = config_io.load(TrainConfig, config_path, overrides + [f"seed={seed}"])
    if is_baseline:
        cfg = matched_baseline(cfg)
    lab = S.BASELINE_LABEL if is_baseline else label(combo)
    cfg.name = f"{name}-{'baseline' if is_baseline else _short(combo)}-s{seed}"
    if ray_address:  # the driver runs on the cluster's head node, where "auto" finds the cluster
        cfg.ray.address = "auto"
    return PlannedRun(S.run_key(lab, seed), lab, combo, seed, is_baseline, cfg.name, config_io.dump(cfg))


def _short(combo: dict) -> str:
    """The short form used in run names.

    >>> _short({"population.teachers": 4, "population.students": 8})
    'students8-teachers4'"""
    return "-".join(f"{k.split('.')[-1]}{v}" for k, v in sorted(combo.items())) or "default"


def sweep_id(runs: list[PlannedRun]) -> str:
    """Same plan -> same id, so running the same sweep command again resumes it."""
    digest = hashlib.sha256("\n".join(r.key + "\n" + r.yaml + (f"\nfork {r.fork}@{r.fork_step}" if r.fork else "")
                                      for r in runs).encode()).hexdigest()
    return f"sw-{digest[:10]}"


def dry_run_json(sid: str, runs: list[PlannedRun]) -> dict:
    return {"sweep": sid, "runs": [{"key": r.key, "config": r.config, "overrides": r.overrides, "seed": r.seed,
                                    "baseline": r.baseline, "name": r.name,
                                    **({"fork": r.fork, "fork_step": r.fork_step} if r.fork else {})} for r in runs]}


# ====================================================================== the driver: K of the sweep's jobs at a time
@dataclass
class Item:
    key: str                              # unique within the sweep
    start: Callable[[], jobs.Job]         # starts the job (called once, when a slot is free)
    job: jobs.Job | None = None           # set when started (or adopted: a job already running from an earlier queue)
    run_id: str | None = None
    status: str = "pending"               # pending | running | starting | finished | failed | stopped | lost
    info: dict = field(default_factory=dict)


def run_items(items: list[Item], parallel: int = 1, on_started: Callable[[Item], None] | None = None,
              on_run_id: Callable[[Item], None] | None = None, on_end: Callable[[Item], None] | None = None,
              poll_s: float = 1.0) -> list[Item]:
    """Run ``items`` with at most ``parallel`` active at once; returns them with their final status.

    Items that already carry a running ``job`` are adopted (they count against ``parallel``). A KeyboardInterrupt
    stops the jobs this call is waiting on, then propagates.
    """
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    pending = [i for i in items if i.job is None]
    active = [i for i in items if i.job is not None]
    try:
        while pending or active:
            while pending and len(active) < parallel:
                item = pending.pop(0)
                item.job, item.status = item.start(), "starting"
                active.append(item)
                if on_started:
                    on_started(item)
            for item in list(active):
                _poll(item, on_run_id)
                if item.status not in queue.ACTIVE:
                    active.remove(item)
                    if on_end:
                        on_end(item)
            if pending or active:
                time.sleep(poll_s)
    except KeyboardInterrupt:
        for item in active:
            item.status = jobs.stop(item.job)
        raise
    return items


def _poll(item: Item, on_run_id) -> None:
    status = item.job.status
    if item.run_id is None:
        item.run_id = item.job.run_id  # read while it runs: the trainer links its run to the job as it starts it
        if item.run_id and on_run_id:
            on_run_id(item)
    item.status = status


class Driver:
    """Runs a planned sweep to the end: skips finished runs, tags each run as soon as its id is known, links
    population runs to their seed's baseline."""

    def __init__(self, sid: str, runs: list[PlannedRun], ray_address: str | None = None, log=print,
                 max_restarts: int = 0):
        self.sid, self.runs, self.ray_address, self.log = sid, runs, ray_address, log
        self.max_restarts = max_restarts  # each run's job: resumed after a transient failure (platform/jobs/restart.py)
        self.tracker = Tracker()
        self.env = {"MLFLOW_TRACKING_URI": tracking_uri()}  # jobs write where this driver reads
        self.dir = S.sweeps_dir() / sid
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / S.PLAN_FILE).write_text(json.dumps([asdict(r) for r in runs], indent=1))
        self.run_ids: dict[str, str] = {}

    # ---------------------------------------------------------------- state on disk: key -> job dir
    def _state(self) -> dict[str, str]:
        return S.read_jobs(self.dir)

    def _remember(self, item: Item) -> None:
        state = self._state()
        state[item.key] = item.job.dir
        (self.dir / S.JOBS_FILE).write_text(json.dumps(state, indent=1))

    # ---------------------------------------------------------------- tags and links
    def _tag(self, item: Item) -> None:
        r = item.info["run"]
        self.run_ids[item.key] = item.run_id
        self.tracker.set_tags(item.run_id, rl.sweep_tags(self.sid, r.key, r.config, r.seed))
        self._link()

    def _link(self) -> None:
        """Every population run whose seed's baseline is known is linked with it both ways (idempotent)."""
        for r in self.runs:
            if r.baseline or r.key not in self.run_ids:
                continue
            base = self.run_ids.get(S.run_key(S.BASELINE_LABEL, r.seed))
            if base:
                rl.link_baseline(self.tracker, self.run_ids[r.key], base)

    # ---------------------------------------------------------------- the queue
    def items(self) -> list[Item]:
        """Queue items for the runs not finished yet (finished ones only record their run id)."""
        existing = S.latest_by_key(S.find_runs(self.tracker.client, self.sid))
        state, out = self._state(), []
        for r in self.runs:
            prev = existing.get(r.key)
            job = jobs.Job.load(state[r.key]) if r.key in state and Path(state[r.key], "job.json").is_file() else None
            linked = self._run_of(job) if prev is None and job is not None else None
            if linked:  # an earlier driver died before tagging it
                self._tag(Item(r.key, start=None, run_id=linked, info={"run": r}))
                prev = self.tracker.get_run(linked)
            if prev is not None:
                self.run_ids[r.key] = prev.info.run_id
            if prev is not None and prev.info.status == "FINISHED":
                self.log(f"  {r.key}: finished earlier (run {prev.info.run_id})")
                continue
            item = Item(r.key, start=self._starter(r, prev), info={"run": r})
            if job is not None and job.status in queue.ACTIVE:  # still running from an earlier driver: wait on it
                item.job, item.status = job, job.status
            out.append(item)
        self._link()
        return out

    def _run_of(self, job: jobs.Job) -> str | None:
        """The run a job's trainer linked to it: ``<job dir>/run_id``, else the run tagged with the job's id."""
        return job.run_id or rl.run_of_job(self.tracker.client, job.id)

    def _starter(self, r: PlannedRun, prev):
        def start() -> jobs.Job:
            if prev is not None and prev.info.status in ("KILLED", "RUNNING") and not self.ray_address:
                self.log(f"  {r.key}: resuming run {prev.info.run_id} from its last checkpoint")
                # through the machine's queue with the run's slot need, as the Runs page's Resume does
                return jobs.launch_resume(prev.info.run_id, name=r.name, env=self.env, root=self.dir / "jobs",
                                          need=job_slots(r.yaml), max_restarts=self.max_restarts)
            if r.fork:  # a fork sweep's run: a fork of the checkpoint, queued like a launch
                self.log(f"  {r.key}: forking run {r.fork} at step {r.fork_step} as {r.name}")
                return jobs.launch_fork(r.fork, r.fork_step, r.fork_sets, name=r.name, env=self.env,
                                        root=self.dir / "jobs", need=job_slots(r.yaml), max_restarts=self.max_restarts)
            self.log(f"  {r.key}: starting {r.name}")
            return jobs.launch_training(r.yaml, name=r.name, env=self.env, root=self.dir / "jobs",
                                        ray_address=self.ray_address, need=job_slots(r.yaml),
                                        max_restarts=self.max_restarts)
        return start

    def run(self, parallel: int = 1) -> int:
        """Runs everything left; 0 if every planned run finished, 1 otherwise."""
        start = time.time()
        items = self.items()
        self.log(f"sweep {self.sid}: {len(self.runs)} runs, {len(self.runs) - len(items)} finished earlier, "
                 f"{len(items)} to run ({parallel} at a time{', as Ray Jobs' if self.ray_address else ''})")
        slots = queue.max_parallel()
        if parallel > slots and not self.ray_address:  # the machine's one queue bounds every job, the sweep's too
            self.log(f"  note: this machine's job queue runs {slots} job(s) at once (one per GPU, or "
                     f"POPULORA_MAX_PARALLEL_JOBS), so at most {slots} of these run together; the rest wait in line")

        def ended(item: Item) -> None:
            self.log(f"  {item.key}: {item.status}" + (f" (run {item.run_id})" if item.run_id else
                                                        f"; log: {item.job.log_path}"))

        run_items(items, parallel, on_started=self._remember, on_run_id=self._tag, on_end=ended)
        failed = [i for i in items if i.status != "finished"]
        self.log(f"sweep {self.sid}: {len(self.runs) - len(failed)}/{len(self.runs)} finished "
                 f"in {time.time() - start:.0f}s" + (f"; not finished: {', '.join(i.key for i in failed)}" if failed else ""))
        return 1 if failed else 0
