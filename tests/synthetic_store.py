"""A synthetic MLflow store written by the trainer's own writers (``RunLog``, ``run_log.step_record``) from
made-up tasks, answers and ratings, so it has exactly the layout ``populora train`` leaves, without a model.

Used by the UI scale test (50 runs x 16 members x 10k tasks must stay responsive), the UI page tests and to
develop pages without waiting for a model. Nothing here trains; values are random but well-formed.

    PYTHONPATH=. python tests/synthetic_store.py --uri sqlite:///big.db --runs 50 --members 16 --tasks 10000
"""

from __future__ import annotations

import argparse
import os
import random
import time

from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker
from populora.training.run import run_log
from populora.training.config import EvolutionConfig, TrainConfig
from populora.training.compute.ledger import add_to_record
from populora.training.evolve.lineage import Lineage, LineageEvent
from populora.training.member import BOTH, STUDENT, TEACHER, Member, Population
from populora.training.phases.rollout import Rollout
from populora.training.run.run_log import RunLog
from populora.training.tasks import Task

KINDS = ("code_o", "code_i", "code_f")
PROGRAM = "def f(x):\n    total = 0\n    for i in range(x):\n        if i % 2:\n            total += i\n    return total\n"
RANK = 8


EVAL_BENCHMARKS = ("humaneval_plus", "gsm8k")  # what runs made with eval_every > 0 evaluate during training


def _config(name: str, members: int, steps: int, baseline: bool, baseline_run: str, eval_every: int = 0) -> TrainConfig:
    return TrainConfig.model_validate({
        "name": name, "steps": steps, "baseline_run": baseline_run or None, "model": {"lora_rank": RANK},
        "population": {"teachers": max(1, members // 2), "students": max(1, members - members // 2), "single_agent": baseline},
        "evolution": {"every": 4}, "eval": {"every": eval_every, "benchmarks": ",".join(EVAL_BENCHMARKS), "limit": 20}})


def _eval(step: int, population: Population, rng: random.Random, skill: float) -> tuple[dict, dict]:
    """Made-up in-training scores of the alive members (``skill`` + growth with the step), as the trainer's
    periodic evaluation reports them: member ``eval/*`` metrics and the parent's ``eval_population/*``."""
    from populora.training.periodic_eval import population_stats

    per_member = {}
    for m in population.alive():
        per_member[m.id] = {}
        for i, name in enumerate(EVAL_BENCHMARKS):
            score = min(1.0, max(0.0, skill + 0.03 * step - 0.1 * i + rng.gauss(0, 0.04)))
            per_member[m.id].update({f"eval/{name}/score": score, f"eval/{name}/truncated_rate": rng.random() * 0.2})
    return per_member, population_stats(per_member, list(EVAL_BENCHMARKS))


def _population(cfg: TrainConfig, lineage: Lineage) -> Population:
    pc = cfg.population
    population = Population()
    for role in [BOTH] if pc.single_agent else [TEACHER] * pc.teachers + [STUDENT] * pc.students:
        m = population.add(Member(population.new_id(role), role, RANK))
        lineage.record(LineageEvent(m.id, [], "init", 0, 0, role))
    return population


def _evolve(population: Population, lineage: Lineage, step: int, rng: random.Random) -> list[tuple[Member, Member]]:
    """One child per evolution (mutation or crossover of alive members of one role) replacing a random member."""
    role = rng.choice((TEACHER, STUDENT))
    alive = [m for m in population.alive() if m.role == role]
    if len(alive) < 2:
        return []
    dead = rng.choice(alive)
    dead.alive = False
    op = rng.choice(("mutation", "crossover"))
    parents = rng.sample([m for m in alive if m is not dead], 2 if op == "crossover" and len(alive) > 2 else 1)
    generation = 1 + max(p.generation for p in parents)
    child = population.add(Member(population.new_id(role), role, RANK, generation, [p.id for p in parents], op, step,
                                  mu=sum(p.mu for p in parents) / len(parents), sigma=8.0))
    lineage.record(LineageEvent(child.id, child.parents, op, step, generation, role, replaced=dead.id))
    return [(dead, child)]


AUGMENTED = ("+=", "-=", "*=", "|=", "^=")


def program(structure: int) -> str:
    """PROGRAM's shape with ``structure`` choosing its update operator and how many extra statements it has: a
    different structure key for each value."""
    extra = "".join(f"    total {AUGMENTED[(structure + k) % 5]} {k}\n" for k in range(structure // 5))
    return PROGRAM.replace("total += i", f"total {AUGMENTED[structure % 5]} i").replace("    return", extra + "    return")


def _tasks(step: int, n: int, teachers: list[Member], rng: random.Random, structures: int = 0) -> list[Task]:
    """``structures``: the programs are drawn from that many structures (0: all PROGRAM)."""
    tasks = []
    for i in range(n):
        kind, valid, teacher = KINDS[i % 3], rng.random() < 0.6, teachers[i % len(teachers)].id
        depth = 4 + rng.randint(0, 3)
        source = program(rng.randrange(structures)) if structures else PROGRAM
        tasks.append(Task(id=f"s{step}-{teacher}-{i}", kind=kind, program=source, input=str(i), teacher=teacher, step=step,
                          output=str(i * 2) if valid else "", valid=valid,
                          reason="ok" if valid else "error: error: NameError: name 'y' is not defined",  # as runs logged before Verdict.said
                          message="sum of odd numbers below x" if kind == "code_f" else "",
                          metrics={"ast_depth": depth, "cyclomatic": 3, "loc": 6, "variables": 2, "novel_structure": 1.0}))
    return tasks


def _rollout(member: str, role: str, task: Task, reward: float, **kw) -> Rollout:
    return Rollout(member, role, task.kind, task.id, [], [], kw.pop("text", "<task>...</task>"), reward=reward, **kw)


def _step(step: int, tasks_per_step: int, population: Population, lineage: Lineage, evolve_every: int,
          rng: random.Random, eval_every: int = 0, skill: float = 0.3, structures: int = 0) -> dict:
    """One step's record, built by the trainer's step_record from made-up tasks, answers and ratings."""
    teachers, students = population.alive(TEACHER), population.alive(STUDENT)
    tasks = _tasks(step, tasks_per_step, teachers, rng, structures)
    proposals = [_rollout(t.teacher, TEACHER, t, rng.random() - 0.3) for t in tasks]
    answers = []
    for t in (t for t in tasks if t.valid):
        for st in rng.sample(students, min(2, len(students))):
            ok = rng.random() < 0.5
            answer = str(int(t.input) * 2 if ok else t.input)
            answers.append(_rollout(st.id, STUDENT, t, 1.0 if ok else 0.0, text=f"<answer>{answer}</answer>",
                                    answer=answer, correct=ok, verdict="ok" if ok else "wrong"))
    rates = {t.id: rng.choice((0.0, 0.5, 1.0)) for t in tasks if t.valid}
    for m in population.alive():
        m.mu, m.sigma = m.mu + rng.gauss(0, 0.8), max(1.0, m.sigma * 0.95)
    train_stats = {m.id: {"loss": rng.random(), "kl": rng.random() * 0.01, "grad_norm": rng.random(), "tokens": 500,
                          "rollouts": 6} for m in population.alive()}
    replaced = _evolve(population, lineage, step, rng) if evolve_every and step % evolve_every == 0 else []
    timings = {"step": 10 + rng.random(), "propose": 4 + rng.random(), "solve": 3 + rng.random()}
    record = run_log.step_record(step, tasks, proposals, answers, rates, train_stats, population, 3 * step,
                                 len(answers), timings, replaced, EvolutionConfig().conservative_k,
                                 programs_proposed=4 * step)
    if eval_every and step % eval_every == 0:  # after evolution, as the trainer: the members alive at the step
        per_member, stats = _eval(step, population, rng, skill)
        add_to_record(record, per_member, stats)
    return record


def make_run(tracker: Tracker, name: str, members: int, steps: int, tasks_per_step: int, status: str = rl.FINISHED,
             baseline: bool = False, baseline_run: str = "", seed: int = 0, eval_every: int = 0, skill: float = 0.3,
             structures: int = 0) -> str:
    """One training run (parent and member runs) as ``populora train`` leaves it after ``steps`` steps; a run
    left ``running`` has done half of its steps. ``eval_every``: made-up in-training evaluation every so many
    steps (``skill``: the members' score at step 0); ``structures``: teachers' programs drawn from that many
    program structures (0: one)."""
    rng = random.Random(seed)
    cfg = _config(name, members, steps, baseline, baseline_run, eval_every)
    log = RunLog.start(cfg, tracker)
    run_dir = f"/tmp/runs/{log.run_id}"
    log.describe(cfg, run_dir)
    lineage = Lineage()
    population = _population(cfg, lineage)
    done = steps if status == rl.FINISHED else max(1, steps // 2)
    records = [_step(s, tasks_per_step, population, lineage, cfg.evolution.every, rng, eval_every, skill, structures)
               for s in range(1, done + 1)]
    for m in population.alive():
        m.adapter_dir = f"{run_dir}/checkpoints/step_{done:06d}/adapters/{m.id}"
    log.write_steps(records, population)
    log.write_state(done, steps, lineage, population)
    if status == rl.FINISHED:
        for m in population.alive():
            m.adapter_dir = f"{run_dir}/adapters/{m.id}"
        log.finish(population)
    elif status != rl.RUNNING:
        log.end(status)
    return log.run_id


def build(uri: str, runs: int = 3, members: int = 4, tasks: int = 120, steps: int = 6, experiment: str = "populora",
          small_steps: int | None = None, small_members: int | None = None) -> list[str]:
    """``runs`` population runs plus one baseline run (first in the list). The first population run is the big
    one (``members`` members, ``steps`` steps holding ``tasks`` tasks); the others have ``small_members`` members
    (default: ``members``) and ``small_steps`` steps (default: ``steps``) of 6 tasks each, which keeps a 50-run
    store quick to build: member runs and per-step metrics of every member are what costs time."""
    tracker = Tracker(uri)
    baseline = make_run(tracker, "baseline", 1, steps, 6, baseline=True, seed=999)
    ids = [baseline]
    statuses = (rl.FINISHED, rl.RUNNING, rl.FAILED, rl.STOPPED)
    for i in range(runs):
        big = i == 0
        ids.append(make_run(tracker, f"synthetic-{i}", members if big else (small_members or members),
                            steps if big else (small_steps or steps),
                            max(1, tasks // steps) if big else 6, status=statuses[i % len(statuses)],
                            baseline_run=baseline if big else "", seed=i))
    return ids


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tests/synthetic_store.py", description=__doc__.splitlines()[0])
    p.add_argument("--uri", default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///synthetic.db"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--members", type=int, default=4)
    p.add_argument("--tasks", type=int, default=120, help="tasks of the first (largest) run")
    p.add_argument("--steps", type=int, default=6, help="steps of the first run (and of the others unless --small-steps)")
    p.add_argument("--small-steps", type=int, help="steps of the other runs")
    p.add_argument("--small-members", type=int, help="members of the other runs")
    args = p.parse_args(argv)
    t0 = time.time()
    ids = build(args.uri, args.runs, args.members, args.tasks, args.steps, small_steps=args.small_steps,
                small_members=args.small_members)
    print(f"{len(ids)} runs in {args.uri} ({time.time() - t0:.1f}s); first population run: {ids[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
