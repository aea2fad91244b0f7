"""What a league plays, resolved before any model loads: its entrants, protocol, output dir and cost.

A league (issue 40) puts members of any runs at any checkpoints on one scale: the entrant teachers write a fixed
task panel under one seed and protocol, every entrant student answers every panel task ``answers`` times, and an
item-response fit (``evaluation.league_fit``) turns the verdicts into student abilities and task difficulties.
This module reads the runs (MLflow tags, the run dir's config and checkpoints) and says what the league will
cost; ``training/league.py`` plays it.

Entrants: the members alive at each chosen checkpoint of each run (a population's teachers and students, a
baseline's one adapter, which plays both roles), with their adapters from that checkpoint, plus the bare base
model, the anchor of the scale (ability 0), which plays both roles too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from populora.evaluation.config import run_model
from populora.evaluation.targets import TargetError, checkpoint_steps, get_run
from populora.platform import config as config_io
from populora.platform.store import runlayout as rl
from populora.training import rating
from populora.training.config import TrainConfig
from populora.training.member import BOTH, STUDENT, TEACHER

BASE_ID = "base"  # the base model's entrant id: the anchor of the scale
# the league's out dir: the panel, the finished (student, task) pairs, the results, progress for the UI
PANEL_FILE, ANSWERS_FILE, RESULTS_FILE, PROGRESS_FILE = "panel.json", "answers.jsonl", "league.json", "progress.json"


@dataclass
class LeagueSpec:
    """One league: what it reads and the panel's protocol (the same spec resumes the same league)."""

    runs: list[str]                              # MLflow parent run ids (populations and baselines)
    steps: list[int] | None = None               # checkpoint steps to read (None: every checkpoint each run kept)
    members: list[str] | None = None             # member ids to enter (None: every member alive at the checkpoint)
    kinds: list[str] | None = None               # task kinds of the panel (None: the first run's tasks.kinds)
    tasks_per_kind: int = 2                      # valid panel tasks per teacher and kind (fewer if it wrote fewer)
    proposals_per_round: int = 2                 # proposals per teacher and kind in each round (equal effort)
    rounds: int = 3                              # proposal rounds at most (until every teacher has its tasks)
    seed_tasks: int = 2                          # the first run's seed-buffer tasks per kind added as reference items
    answers: int = 2                             # answers per (student, task), sampled as in training
    seed: int = 0                                # the panel's and the answers' seed
    base: bool = True                            # the base model enters (the anchor; without it: the first student)
    model: str = "rasch"                         # item-response model: rasch | 2pl
    n_boot: int = 200                            # bootstrap replicates for the intervals
    chunk: int = 8                               # panel tasks per batched generation of the answers
    out: str | None = None                       # output dir (default: <runs' output dir>/leagues/<league id>)

    def key(self) -> str:
        """The league id: a hash of what decides its panel and verdicts (not of the fit's settings or out dir)."""
        what = {k: v for k, v in asdict(self).items() if k not in ("model", "n_boot", "chunk", "out")}
        return "lg-" + hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:10]


@dataclass
class Entrant:
    id: str                  # "<run id[:8]>.s<step>.<member>", or "base"
    arm: str                 # population | baseline | base
    run: str                 # the MLflow parent run id ("" for the base model)
    step: int                # checkpoint step (0 for the base model)
    member: str              # member id (T0, S1, B0) or "base"
    role: str                # teacher | student | both
    adapter_dir: str | None  # the PEFT dir at that checkpoint; None: the bare base model
    mu: float | None = None  # the within-run TrueSkill rating at that checkpoint (a cross-check, not the scale)
    sigma: float | None = None

    @property
    def teaches(self) -> bool:
        return self.role in (TEACHER, BOTH)

    @property
    def studies(self) -> bool:
        return self.role in (STUDENT, BOTH)

    def record(self) -> dict:
        return {"id": self.id, "arm": self.arm, "run": self.run, "step": self.step, "member": self.member,
                "role": self.role, "mu": self.mu, "sigma": self.sigma}


@dataclass
class Plan:
    spec: LeagueSpec
    entrants: list[Entrant]
    configs: dict[str, TrainConfig]                      # run id -> its training config
    checkpoints: dict[tuple[str, int], Path] = field(default_factory=dict)
    out: Path = Path(".")

    @property
    def teachers(self) -> list[Entrant]:
        return [e for e in self.entrants if e.teaches]

    @property
    def students(self) -> list[Entrant]:
        return [e for e in self.entrants if e.studies]

    @property
    def protocol(self) -> TrainConfig:
        """The first run's config: its tasks section is the panel's prompts, format, sampling and verifier."""
        return self.configs[self.spec.runs[0]]

    @property
    def kinds(self) -> list[str]:
        return list(self.spec.kinds or self.protocol.tasks.kinds)


def entrant_id(run_id: str, step: int, member: str) -> str:
    """An entrant's id: its run (8 characters), checkpoint step and member.

    >>> entrant_id("f8a161c82dd240cc", 2, "S0")
    'f8a161c8.s2.S0'
    """
    return f"{run_id[:8]}.s{step}.{member}"


def rated(member: dict) -> tuple[float | None, float | None]:
    """A checkpoint member's within-run TrueSkill (mu, sigma), or (None, None) where no game ever rated it: the
    single-agent baseline plays itself and self-play is not rated (``scoring``), so its 25.00 is the prior, not a
    rating; so is any member still at the prior exactly.

    >>> rated({"role": "both", "mu": 25.0, "sigma": 8.333}), rated({"role": "student", "mu": 27.1, "sigma": 3.2})
    ((None, None), (27.1, 3.2))
    >>> rated({"role": "teacher", "mu": rating.MU, "sigma": rating.SIGMA})
    (None, None)
    """
    mu, sigma = member.get("mu"), member.get("sigma")
    if member.get("role") == BOTH or (mu, sigma) == (rating.MU, rating.SIGMA):
        return None, None
    return mu, sigma


def _config(run) -> TrainConfig:
    path = Path(run.data.tags.get(rl.RUN_DIR) or "") / rl.CONFIG_FILE
    if not path.is_file():
        raise TargetError(f"run {run.info.run_id} has no {rl.CONFIG_FILE} in its run dir {str(path.parent)!r}: a league "
                          f"reads the run's checkpoints there")
    return config_io.build(TrainConfig, yaml.safe_load(path.read_text()), source=str(path))


def resolve(tracker, spec: LeagueSpec) -> Plan:
    """The league's entrants and protocol; ``TargetError`` naming what is wrong (an unknown run, a run with no
    checkpoint at a step, runs on different base models or in different task formats, an unknown member)."""
    if not spec.runs:
        raise TargetError("a league needs at least one run (--runs A,B)")
    if spec.answers < 1 or spec.tasks_per_kind < 1 or spec.rounds < 1 or spec.proposals_per_round < 1:
        raise TargetError("answers, tasks per kind, rounds and proposals per round must each be at least 1")
    entrants, configs, checkpoints, model = [], {}, {}, None
    seen_members: set[str] = set()
    for rid in spec.runs:
        run = get_run(tracker, rid)
        kind = run.data.tags.get(rl.KIND)
        if kind not in (rl.POPULATION, rl.BASELINE):
            raise TargetError(f"run {rid} is not a PopuLoRA training run (tag {rl.KIND} is missing); pass parent run ids "
                              f"as populora runs lists them")
        configs[rid] = cfg = _config(run)
        this_model = run_model(rid, run.data.tags.get(rl.RUN_DIR) or ".", getattr(tracker, "uri", None))
        if model is not None and this_model != model:
            raise TargetError(f"run {rid} was trained on {this_model!r}, run {spec.runs[0]} on {model!r}: not one scale")
        model = model or this_model
        if cfg.tasks.format != configs[spec.runs[0]].tasks.format:
            raise TargetError(f"run {rid} uses tasks.format={cfg.tasks.format}, run {spec.runs[0]} "
                              f"{configs[spec.runs[0]].tasks.format}: one panel needs one format")
        run_dir = Path(run.data.tags.get(rl.RUN_DIR) or "")
        have = checkpoint_steps(run_dir)
        steps = spec.steps or have
        missing = [s for s in steps if s not in have]
        if missing or not steps:
            raise TargetError(f"run {rid} has no checkpoint at step(s) {', '.join(map(str, missing)) or '(any)'} under "
                              f"{str(run_dir / 'checkpoints')!r}; it has {', '.join(map(str, have)) or 'none'} "
                              f"(training keeps the newest checkpoint.keep)")
        for step in steps:
            path = run_dir / "checkpoints" / rl.step_folder(step)
            checkpoints[(rid, step)] = path
            state = json.loads((path / "state.json").read_text())
            for m in state["population"]["members"]:
                if not m.get("alive"):
                    continue
                seen_members.add(m["id"])
                if spec.members and m["id"] not in spec.members:
                    continue
                adapter = path / "adapters" / m["id"]
                if not (adapter / "adapter_config.json").is_file():
                    raise TargetError(f"checkpoint {path} has no adapter for member {m['id']} ({adapter})")
                entrants.append(Entrant(entrant_id(rid, step, m["id"]), kind, rid, step, m["id"], m["role"],
                                        str(adapter), *rated(m)))
    unknown = sorted(set(spec.members or ()) - seen_members)
    if unknown:
        raise TargetError(f"member(s) {', '.join(unknown)} are alive at none of the chosen checkpoints; alive there: "
                          f"{', '.join(sorted(seen_members, key=rl.member_order))}")
    if spec.base:
        entrants.insert(0, Entrant(BASE_ID, "base", "", 0, BASE_ID, BOTH, None))
    plan = Plan(spec, entrants, configs, checkpoints)
    bad = [k for k in plan.kinds if k not in plan.protocol.tasks.kinds]
    if bad:
        raise TargetError(f"kind(s) {', '.join(bad)} are not among run {spec.runs[0]}'s tasks.kinds "
                          f"({', '.join(plan.protocol.tasks.kinds)})")
    if len(plan.students) < 2:
        raise TargetError("a league needs at least two students (the base model counts as one)")
    if not plan.teachers:
        raise TargetError("a league needs at least one teacher")
    first_dir = Path(get_run(tracker, spec.runs[0]).data.tags.get(rl.RUN_DIR) or ".")
    plan.out = Path(spec.out) if spec.out else first_dir.parent / "leagues" / spec.key()
    return plan


def estimate(plan: Plan) -> dict:
    """The league's cost at most, before it starts: generations (proposal rounds run only while some teacher
    still lacks tasks) and generated tokens, from the protocol's token budgets."""
    spec, tc = plan.spec, plan.protocol.tasks
    kinds = len(plan.kinds)
    proposals = len(plan.teachers) * kinds * spec.proposals_per_round * spec.rounds
    tasks = len(plan.teachers) * kinds * spec.tasks_per_kind + kinds * spec.seed_tasks
    answers = len(plan.students) * tasks * spec.answers
    tokens = proposals * tc.max_new_tokens_propose + answers * tc.max_new_tokens_solve
    return {"teachers": len(plan.teachers), "students": len(plan.students), "proposals": proposals,
            "panel_tasks": tasks, "answers": answers, "generations": proposals + answers, "tokens": tokens}


def describe(plan: Plan, est: dict) -> str:
    """The estimate in words, printed before a league starts."""
    return (f"league {plan.spec.key()}: {len(plan.entrants)} entrants ({est['teachers']} teachers, {est['students']} "
            f"students) from {len(plan.spec.runs)} run(s); panel of at most {est['panel_tasks']} tasks "
            f"({', '.join(plan.kinds)}), at most {est['proposals']} proposals and {est['answers']} answers: "
            f"<= {est['generations']} generations, <= {est['tokens']:,} generated tokens; out {plan.out}")
