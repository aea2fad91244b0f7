"""``populora league``: population and baseline on one scale, measured in the task domain (issue 40).

    populora league --runs A,B [--steps 1,2] [--members T0,S0] [--answers 2] [--tasks-per-kind 2] [--wait]

Prints what the league will cost, then queues it as a job (the machine's one queue, like training and
evaluation: ``populora jobs`` lists it, ``populora jobs --stop ID`` stops it) and returns; ``--wait`` follows the
job to its end and prints its results; ``--here`` plays it in this process (what the job runs). The same command
resumes a stopped league: its panel and finished answers are kept in its out dir.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from populora.evaluation.targets import TargetError
from populora.platform.jobs import jobs, queue, state
from populora.platform.store.tracking import Tracker
from populora.training.league_plan import RESULTS_FILE, LeagueSpec, describe, estimate, resolve


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated steps like 1,2; got {text!r}") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    d = LeagueSpec(runs=[])
    p = argparse.ArgumentParser(prog="populora league", description="members of runs at checkpoints, the base model "
                                "and a baseline on one scale: a fixed task panel by the entrant teachers, every entrant "
                                "student answering it, an item-response fit (ability, difficulty) with bootstrap intervals")
    p.add_argument("--runs", type=_names, required=True, help="MLflow parent run ids, comma-separated (a population and its baseline)")
    p.add_argument("--steps", type=_ints, help="checkpoint steps, e.g. 1,2 (default: every checkpoint each run kept)")
    p.add_argument("--members", type=_names, help="member ids to enter, e.g. T0,S0,B0 (default: every member alive at each checkpoint)")
    p.add_argument("--kinds", type=_names, help="task kinds of the panel (default: the first run's tasks.kinds)")
    p.add_argument("--tasks-per-kind", type=int, default=d.tasks_per_kind, help=f"valid panel tasks per teacher and kind (default {d.tasks_per_kind})")
    p.add_argument("--proposals-per-round", type=int, default=d.proposals_per_round, help=f"proposals per teacher and kind per round (default {d.proposals_per_round})")
    p.add_argument("--rounds", type=int, default=d.rounds, help=f"proposal rounds at most (default {d.rounds})")
    p.add_argument("--seed-tasks", type=int, default=d.seed_tasks, help=f"the first run's seed-buffer tasks per kind added as reference items (default {d.seed_tasks})")
    p.add_argument("--answers", type=int, default=d.answers, help=f"answers per (student, task) (default {d.answers})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"the panel's and the answers' seed (default {d.seed})")
    p.add_argument("--no-base", action="store_true", help="leave the base model out (the first student is then the anchor)")
    p.add_argument("--model", choices=("rasch", "2pl"), default=d.model, help="item-response model (default rasch)")
    p.add_argument("--boot", type=int, default=d.n_boot, help=f"bootstrap replicates for the intervals (default {d.n_boot})")
    p.add_argument("--out", help="output dir (default: <the runs' output dir>/leagues/<league id>)")
    p.add_argument("--here", action="store_true", help="play it in this process instead of queueing a job")
    p.add_argument("--wait", action="store_true", help="queue it, follow the job to its end, print its results")
    return p


def spec_of(args) -> LeagueSpec:
    return LeagueSpec(runs=args.runs, steps=args.steps, members=args.members, kinds=args.kinds,
                      tasks_per_kind=args.tasks_per_kind, proposals_per_round=args.proposals_per_round,
                      rounds=args.rounds, seed_tasks=args.seed_tasks, answers=args.answers, seed=args.seed,
                      base=not args.no_base, model=args.model, n_boot=args.boot, out=args.out)


def show(data: dict) -> str:
    """The results as text: abilities, teachers (strongest first; those with no valid task last), and population vs
    baseline in words.

    >>> print(show({"students": [{"id": "r.s4.S0", "arm": "population", "ability": {"value": 0.31, "ci95": [-1.2, 2.5]},
    ...                           "solve_rate": 0.2619, "mu": 15.277218607870951},
    ...                          {"id": "base", "arm": "base", "ability": {"value": 0.0, "ci95": [None, None]},
    ...                           "solve_rate": None, "mu": None}],
    ...             "teachers": [{"id": "r.s4.T0", "arm": "population", "strength": {"value": None, "ci95": [None, None]},
    ...                           "tasks": 0, "valid": 0, "proposed": 6},
    ...                          {"id": "b.s4.B0", "arm": "baseline", "strength": {"value": 1.42, "ci95": [-1.57, 4.33]},
    ...                           "tasks": 4, "valid": 4, "proposed": 18}],
    ...             "comparisons": []}))
    students (ability, logits vs the base model; 95% CI; solve rate):
      r.s4.S0                population +0.31 (-1.20 to +2.50)  solve 26%  TrueSkill mu 15.28
      base                   base       +0.00 (the scale's zero)  solve -  TrueSkill mu -
    teachers (strength = mean difficulty of its valid tasks; validity rate of its proposals):
      b.s4.B0                baseline   +1.42 (-1.57 to +4.33)  tasks 4  valid 4/18
      r.s4.T0                population no valid task  tasks 0  valid 0/6
    no population-vs-baseline line: the league has no baseline or no population
    """
    lines = ["students (ability, logits vs the base model; 95% CI; solve rate):"]
    for s in sorted(data["students"], key=lambda s: -s["ability"]["value"]):
        lo, hi = s["ability"]["ci95"]
        solve = "-" if s["solve_rate"] is None else f"{s['solve_rate']:.0%}"
        mu = "-" if s["mu"] is None else f"{s['mu']:.2f}"
        ci = "(the scale's zero)" if lo is None else f"({lo:+.2f} to {hi:+.2f})"  # the anchor: no interval of its own
        note = s["ability"].get("note") if lo is not None else None
        lines.append(f"  {s['id']:<22} {s['arm']:<10} {s['ability']['value']:+.2f} {ci}  "
                     f"solve {solve}  TrueSkill mu {mu}" + (f"  [{note}]" if note else ""))
    lines.append("teachers (strength = mean difficulty of its valid tasks; validity rate of its proposals):")
    for t in sorted(data["teachers"], key=lambda t: (t["strength"]["value"] is None, -(t["strength"]["value"] or 0.0))):
        v = t["strength"]["value"]
        lo, hi = t["strength"]["ci95"]
        strength = "no valid task" if v is None else f"{v:+.2f} ({lo:+.2f} to {hi:+.2f})"
        lines.append(f"  {t['id']:<22} {t['arm']:<10} {strength}  tasks {t['tasks']}  valid {t['valid']}/{t['proposed']}")
    lines += [c["words"] for c in data["comparisons"]] or ["no population-vs-baseline line: the league has no baseline or no population"]
    return "\n".join(lines)


def _wait(job, out: Path, poll_s: float = 2.0) -> int:
    """Follow the league's job to its end, saying each state it passes (platform/jobs/state.py: the words the
    League page and ``populora jobs`` use), then its log's tail and results."""
    said = None
    while True:
        now = state.of_job(job)
        shown = state.label(now, queue.position(job) if now == state.QUEUED else None)
        if shown != said:
            print(f"league job {job.id}: {shown}", flush=True)
            said = shown
        if now not in (*state.ACTIVE_JOB, state.STOPPING):
            break
        time.sleep(poll_s)
    print(job.log_tail(60))
    code = job.exit_code if job.exit_code is not None else 1
    if code == 0 and (out / RESULTS_FILE).is_file():
        print(show(json.loads((out / RESULTS_FILE).read_text())))
    return code


def league_main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    tracker = Tracker()
    try:
        plan = resolve(tracker, spec_of(args))
    except (TargetError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(describe(plan, estimate(plan)), flush=True)
    if args.here:
        # the one import inside a function here: playing loads torch and the model (seconds); queueing a league,
        # which only reads MLflow and the run dirs to print its cost, must not
        from populora.training.league import play

        data = play(plan, tracker)
        print(show(data))
        print(f"results: {plan.out / RESULTS_FILE}; MLflow league run {data['mlflow_run']}")
        return 0
    rest = [a for a in argv if a not in ("--wait", "--here")]
    if not args.out:
        rest += ["--out", str(plan.out)]
    job = jobs.start([sys.executable, "-m", "populora.cli", "league", *rest, "--here"], name=f"league {plan.spec.key()}",
                     kind="league", slots=jobs.max_parallel())
    print(f"queued as job {job.id} (populora jobs lists it; populora jobs --stop {job.id} stops it; the same command "
          f"resumes it); results in {plan.out / RESULTS_FILE}", flush=True)
    return _wait(job, plan.out) if args.wait else 0
