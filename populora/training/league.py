"""Playing a league (issue 40): the entrant teachers write a fixed task panel, every entrant student answers every
panel task, and the verdicts are put on one scale (``evaluation.league_summary``).

In order: load every entrant's adapter from its checkpoint into one backend (batched multi-LoRA: every
generation below serves all entrants at once, row i on its own adapter); make the panel (``make_panel``: the
teachers propose in rounds of equal effort, with the first run's prompts and the sandbox's validation, until
each has ``tasks_per_kind`` valid tasks of each kind or the rounds run out; plus the first run's seed-buffer
tasks as reference items); answer it (``answer_panel``: training's own ``solve`` phase, so the same prompts,
sampling, parsing and verifier); fit and summarise; write ``league.json`` and log a league run to MLflow.

Resumable: ``panel.json`` is written once and reused (a league run again with more teachers extends it with
theirs, proposed under the same seed), and every finished (student, task) pair is appended to ``answers.jsonl``
as soon as its chunk is checked, so a league started again after a kill answers only the pairs still missing.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

import numpy as np

from populora.evaluation.statistics import league_summary
from populora.evaluation.targets import Target, lora_spec
from populora.platform import diskspace
from populora.platform.store import runlayout as rl
from populora.platform.backends import make_backend
from populora.platform.files import write_atomic
from populora.platform.sandbox.verifier import Verifier
from populora.training.phases.buffers import TaskBuffers, buffer_kinds
from populora.training.league_plan import ANSWERS_FILE, BASE_ID, PANEL_FILE, PROGRESS_FILE, RESULTS_FILE, Entrant, Plan
from populora.training.loop import backend_config
from populora.training.phases.solve import solve
from populora.training.tasks import KINDS, Task
from populora.training.tasks.prompts import render, stop
from populora.training.phases.validate import program_rules, validate

SEED_TEACHERS = ("seed", "handwritten", "base")  # who wrote a run's seed-buffer tasks (training/phases/seeding.py)
EXPERIMENT = "populora-league"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ====================================================================== the backend
def load_backend(plan: Plan, backend=None):
    """One backend holding every entrant's adapter (named ``e<i>``: PEFT refuses dots in adapter names);
    returns (backend, {entrant id: adapter name or None for the base model})."""
    adapters = {e.id: (None if e.adapter_dir is None else f"e{i}") for i, e in enumerate(plan.entrants)}
    if backend is None:
        targets = [Target(e.id, "member", e.adapter_dir) for e in plan.entrants if e.adapter_dir]
        cfg = plan.protocol
        bc = backend_config(cfg)
        backend = make_backend(replace(bc, lora=lora_spec(targets), slots=max(1, len(targets)), ray=None))
    for e in plan.entrants:
        if adapters[e.id] is not None and adapters[e.id] not in getattr(backend, "adapters", []):
            backend.add_adapter(adapters[e.id], from_dir=e.adapter_dir)
    return backend, adapters


def _buffers(plan: Plan, e: Entrant) -> TaskBuffers:
    """The task buffers at the entrant's checkpoint (its propose prompt's references); the base model reads the
    first run's first checkpoint."""
    run, step = (e.run, e.step) if e.run else min(plan.checkpoints, key=lambda k: (plan.spec.runs.index(k[0]), k[1]))
    tc = plan.configs[run].tasks
    state = json.loads((plan.checkpoints[(run, step)] / "state.json").read_text())
    buffers = TaskBuffers(buffer_kinds(tc.kinds), tc.buffer_size, tc.buffer_full, tc.code_f_pool)
    buffers.load(state["buffers"])
    return buffers


# ====================================================================== the panel
def make_panel(plan: Plan, backend, adapters: dict, verifier, log: Callable[[str], None] = _say) -> dict:
    """The panel (``panel.json``): reused if written before, extended with the teachers it does not have yet."""
    spec, tc = plan.spec, plan.protocol.tasks
    path = plan.out / PANEL_FILE
    panel = json.loads(path.read_text()) if path.is_file() else {
        "league": spec.key(), "seed": spec.seed, "kinds": plan.kinds, "tasks_per_kind": spec.tasks_per_kind,
        "proposals_per_round": spec.proposals_per_round, "rounds": spec.rounds, "format": tc.format,
        "protocol_run": spec.runs[0], "teachers": {}, "tasks": _seed_tasks(plan)}
    new = [e for e in plan.teachers if e.id not in panel["teachers"]]
    if not new:
        return panel
    rng = np.random.default_rng(spec.seed)
    buffers = {e.id: _buffers(plan, e) for e in new}
    kept: dict[tuple[str, str], list[Task]] = {(e.id, k): [] for e in new for k in plan.kinds}
    counts = {e.id: {"proposed": 0, "valid": 0} for e in new}
    for r in range(spec.rounds):
        short = [k for k in plan.kinds if any(len(kept[(e.id, k)]) < spec.tasks_per_kind for e in new)]
        if not short:
            break
        plans = []  # (teacher, task, prompt): every teacher the same number per kind (equal effort)
        for e in new:
            for kind in short:
                for j in range(spec.proposals_per_round):
                    task = Task(id=f"L{r}-{e.id}-{kind}-{j}", kind=kind, program="", teacher=e.id, step=e.step)
                    prompt = KINDS[kind].teacher_prompt(task, buffers[e.id], rng, tc)
                    plans.append((e, task, render(backend, prompt, tc.format, tc.template)))
        gens = backend.generate([p for _, _, p in plans], [adapters[e.id] for e, _, _ in plans], tc.max_new_tokens_propose,
                                temperature=tc.temperature, top_p=tc.top_p, seed=spec.seed * 1000 + r,
                                stop=stop(tc.format, "teacher", tc.stop_at_answer))
        tasks = [KINDS[t.kind].parse_proposal(g.text, t, tc) for (_, t, _), g in zip(plans, gens)]
        validate(verifier, tasks, TaskBuffers(plan.kinds, 1), set(), program_rules(tc))
        for (e, t, _) in plans:
            counts[e.id]["proposed"] += 1
            counts[e.id]["valid"] += bool(t.valid)
            ours = kept[(e.id, t.kind)]
            if t.valid and len(ours) < spec.tasks_per_kind and same_item(t) not in map(same_item, ours):
                ours.append(t)  # one item per program and input: a task proposed twice would weigh twice in the fit
        log(f"panel round {r + 1}/{spec.rounds}: {len(plans)} proposals, "
            f"{sum(bool(t.valid) for t in tasks)} valid; kept {sum(map(len, kept.values()))}")
    for e in new:
        panel["teachers"][e.id] = counts[e.id]
        panel["tasks"] += [t.to_dict() for k in plan.kinds for t in kept[(e.id, k)]]
        short = [f"{k} {len(kept[(e.id, k)])}/{spec.tasks_per_kind}" for k in plan.kinds if len(kept[(e.id, k)]) < spec.tasks_per_kind]
        if short:
            log(f"teacher {e.id} wrote fewer valid tasks than asked: {', '.join(short)}")
    write_atomic(path, json.dumps(panel, indent=1))
    return panel


def same_item(t: Task) -> tuple:
    """What makes two of a teacher's panel tasks one item: the kind, the program (its text, stripped) and the input
    or inputs the student is given with it.

    >>> a = Task("a", "code_i", "def f(x): return x  ", input="1", output="1")
    >>> same_item(a) == same_item(Task("b", "code_i", "def f(x): return x", input="1", output="1"))
    True
    >>> same_item(a) == same_item(Task("c", "code_i", "def f(x): return x", input="2", output="2"))
    False
    """
    return t.kind, t.program.strip(), t.input, tuple(t.inputs)


def _seed_tasks(plan: Plan) -> list[dict]:
    """Reference items every league of these runs shares: the first run's seed-buffer tasks (the base model's
    step-0 proposals, AZR's seed, the hand-written fallback), ``seed_tasks`` per kind, teacher ``seed``."""
    first = min(plan.checkpoints, key=lambda k: (plan.spec.runs.index(k[0]), k[1]))
    state = json.loads((plan.checkpoints[first] / "state.json").read_text())
    out = []
    for kind in plan.kinds:
        pool = [t for t in state["buffers"].get(kind, []) if t.get("teacher") in SEED_TEACHERS and t.get("valid")]
        for t in pool[:plan.spec.seed_tasks]:
            out.append({**t, "id": f"seed-{kind}-{len(out)}", "teacher": "seed", "metrics": {**t.get("metrics", {}),
                                                                                           "origin": t.get("teacher")}})
    return out


# ====================================================================== the answers
def done_pairs(out: Path) -> dict[tuple[str, str], list[bool]]:
    """Finished (student, task) pairs from ``answers.jsonl``; a line cut by a kill is ignored (redone)."""
    done = {}
    try:
        lines = (out / ANSWERS_FILE).read_text().splitlines()
    except OSError:
        return done
    for line in lines:
        try:
            rec = json.loads(line)
            done[(rec["student"], rec["task"])] = [bool(c) for c in rec["correct"]]
        except (ValueError, KeyError, TypeError):
            continue
    return done


def _cut_line(path: Path) -> bool:
    """The file ends inside a line (a kill cut its last write)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


def answer_panel(plan: Plan, panel: dict, backend, adapters: dict, verifier, log: Callable[[str], None] = _say) -> dict:
    """Every student answers every panel task ``answers`` times (training's solve phase, one batched generation
    per chunk of tasks over all students); each chunk's pairs are appended to ``answers.jsonl`` once checked."""
    spec, cfg = plan.spec, plan.protocol
    tasks = [Task.from_dict(t) for t in panel["tasks"]]
    done = done_pairs(plan.out)
    by_adapter = {adapters[s.id]: s.id for s in plan.students}
    total = len(tasks) * len(plan.students)
    todo = [t for t in tasks if any((s.id, t.id) not in done for s in plan.students)]
    log(f"answers: {len(done)} of {total} (student, task) pairs done before this start; {len(todo)} task(s) to answer")
    for c in range(0, len(todo), spec.chunk):
        chunk = todo[c:c + spec.chunk]
        answerers = {t.id: [adapters[s.id] for s in plan.students if (s.id, t.id) not in done for _ in range(spec.answers)]
                     for t in chunk}
        rollouts = solve(backend, verifier, chunk, answerers, cfg, spec.seed * 7919 + tasks.index(chunk[0]))
        got: dict[tuple[str, str], list[bool]] = {}
        for r in rollouts:
            got.setdefault((by_adapter[r.member], r.task_id), []).append(bool(r.correct))
        cut = _cut_line(plan.out / ANSWERS_FILE)
        with open(plan.out / ANSWERS_FILE, "a") as f:
            if cut:
                f.write("\n")  # a line cut by a kill ends here: the pairs after it stay readable
            for (student, task), correct in got.items():
                f.write(json.dumps({"student": student, "task": task, "correct": correct}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        done.update(got)
        write_atomic(plan.out / PROGRESS_FILE, json.dumps({"pairs_done": len(done), "pairs": total}))
        log(f"answered {len(done)}/{total} (student, task) pairs")
    return done


# ====================================================================== results
def results(plan: Plan, panel: dict, done: dict) -> dict:
    """The league's JSON: the summary of the fit (``league_summary.summarise``), its entrants and protocol."""
    spec = plan.spec
    students = [{**s.record(), "arm": s.arm} for s in plan.students]
    teachers = [{**t.record(), **panel["teachers"].get(t.id, {"proposed": 0, "valid": 0})} for t in plan.teachers]
    tasks = [{"id": t["id"], "teacher": t["teacher"], "kind": t["kind"]} for t in panel["tasks"]]
    if not tasks:
        raise RuntimeError("the panel has no valid task: no teacher wrote one in "
                           f"{spec.rounds} round(s) and the run has no seed task; raise --rounds or --seed-tasks")
    k, n = np.zeros((len(students), len(tasks))), np.zeros((len(students), len(tasks)))
    for i, s in enumerate(students):
        for j, t in enumerate(tasks):
            answers = done.get((s["id"], t["id"]), [])
            k[i, j], n[i, j] = sum(answers), len(answers)
    anchor = BASE_ID if spec.base else students[0]["id"]
    out = league_summary.summarise(k, n, students, teachers, tasks, anchor, spec.model, spec.n_boot, spec.seed)
    out.update(league=spec.key(), spec=asdict(spec), out=str(plan.out), runs=list(spec.runs), panel_size=len(tasks))
    return out


def log_mlflow(tracker, plan: Plan, data: dict) -> str:
    """A league run (experiment ``populora-league``) tagged with the runs it read; metrics per entrant; the
    results and the panel as artifacts. The run id is kept in the out dir, so a resumed league logs into it."""
    id_file = plan.out / "mlflow_run"
    rid = id_file.read_text().strip() if id_file.is_file() else None
    if rid is None:
        rid = tracker.start_run(EXPERIMENT, f"league {plan.spec.key()}", tags={
            rl.LEAGUE: plan.spec.key(), rl.LEAGUE_RUNS: ",".join(plan.spec.runs), rl.LEAGUE_DIR: str(plan.out.resolve())})
        id_file.write_text(rid)
    else:
        tracker.reopen(rid)
    data["mlflow_run"] = rid  # before the artifact: league.json and its MLflow copy are the same
    tracker.log_params(rid, {k: (",".join(map(str, v)) if isinstance(v, list) else v)
                             for k, v in asdict(plan.spec).items() if v is not None})
    metrics = {}
    for s in data["students"]:
        metrics[f"league/ability/{s['id']}"] = s["ability"]["value"]
    for t in data["teachers"]:
        if t["strength"]["value"] is not None:
            metrics[f"league/strength/{t['id']}"] = t["strength"]["value"]
        if t["validity_rate"] is not None:
            metrics[f"league/validity/{t['id']}"] = t["validity_rate"]
    for c in data["comparisons"]:
        key = f"league/population_vs_baseline/{c['side']}/step{c['population_step']}"
        metrics.update({key: c["delta"], f"{key}/ci_low": c["ci95"][0], f"{key}/ci_high": c["ci95"][1]})
    tracker.log_metrics(rid, {k: v for k, v in metrics.items() if v is not None}, 0)
    tracker.log_json(rid, data, rl.LEAGUE_RESULTS)
    tracker.log_json(rid, json.loads((plan.out / PANEL_FILE).read_text()), rl.LEAGUE_PANEL)
    tracker.end_run(rid)
    return rid


def play(plan: Plan, tracker=None, backend=None, verifier=None, log: Callable[[str], None] = _say) -> dict:
    """Make (or reuse) the panel, answer what is missing, fit, write ``league.json`` and log it (``tracker``)."""
    plan.out.mkdir(parents=True, exist_ok=True)
    write_atomic(plan.out / "entrants.json", json.dumps([e.record() | {"adapter_dir": e.adapter_dir} for e in plan.entrants], indent=1))
    backend, adapters = load_backend(plan, backend)
    tc = plan.protocol.tasks
    if plan.protocol.sandbox.allow_unconfined:  # as the run's trainer did (loop.py Trainer.create)
        os.environ["POPULORA_SANDBOX_ALLOW_UNCONFINED"] = "1"
    verifier = verifier or Verifier(timeout_s=tc.timeout_s, memory_mb=tc.memory_mb)  # here, as the backend (no Ray)
    panel = make_panel(plan, backend, adapters, verifier, log)
    done = answer_panel(plan, panel, backend, adapters, verifier, log)
    data = results(plan, panel, done)
    if tracker is not None:
        with diskspace.writing("the league's results in the MLflow store", diskspace.store_location(getattr(tracker, "uri", ""))):
            log_mlflow(tracker, plan, data)
    write_atomic(plan.out / RESULTS_FILE, json.dumps(data, indent=1))
    for c in data["comparisons"]:
        log(c["words"])
    return data
