"""What a step leaves in MLflow: run-level metrics, per-member metrics, task and answer tables.

Records are built right after the step and written after the checkpoint that contains them (``flush``), each
step's run-level sentinel ``progress/step`` last, so a resumed run logs every step exactly once.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from populora.training.member import Member, Population
from populora.training.rollout import Rollout
from populora.training.tasks import Task

CURRICULUM = ("ast_depth", "cyclomatic", "loc", "variables")


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def step_record(step: int, tasks: list[Task], proposals: list[Rollout], answers: list[Rollout], rates: dict,
                train_stats: dict, population: Population, coverage: int, games: int, timings: dict, replaced: list) -> dict:
    valid = [t for t in tasks if t.valid]
    texts = {p.task_id: p.text for p in proposals}  # the teacher's raw completion, reasoning included
    run_metrics = {
        "tasks/proposed": len(tasks), "tasks/valid": len(valid),
        "tasks/validity_rate": len(valid) / len(tasks) if tasks else 0.0,
        "student/solve_rate": _mean([float(a.correct) for a in answers]),
        "student/format_rate": _mean([float(a.answer is not None) for a in answers]),
        "student/reward": _mean([a.reward for a in answers]),
        "teacher/reward": _mean([p.reward for p in proposals]),
        "curriculum/coverage": coverage,
        "curriculum/novel_rate": _mean([t.metrics.get("novel_structure") for t in valid]),
        "rating/games": games, "evolution/replaced": len(replaced),
    }
    for kind in sorted({t.kind for t in tasks}):
        of_kind = [t for t in tasks if t.kind == kind]
        run_metrics[f"tasks/validity_rate/{kind}"] = sum(t.valid for t in of_kind) / len(of_kind)
        run_metrics[f"student/solve_rate/{kind}"] = _mean([float(a.correct) for a in answers if a.kind == kind])
    for key in CURRICULUM:
        run_metrics[f"curriculum/{key}"] = _mean([t.metrics.get(key) for t in valid])
    run_metrics.update({f"time/{k}_s": v for k, v in timings.items()})
    return {
        "step": step,
        "run_metrics": {k: v for k, v in run_metrics.items() if v is not None},
        "member_metrics": member_metrics(tasks, proposals, answers, rates, train_stats, population),
        "tasks": [dict(task_row(t, rates), completion=texts.get(t.id, "")) for t in tasks],
        "answers": [dict(a.summary(), step=step) for a in answers],
        "events": [{"dead": d.id, "child": c.id, "parents": c.parents, "operator": c.operator} for d, c in replaced],
    }


def member_metrics(tasks, proposals, answers, rates, train_stats, population: Population) -> dict[str, dict]:
    out: dict[str, dict] = defaultdict(dict)
    by_teacher = defaultdict(list)
    for t in tasks:
        by_teacher[t.teacher].append(t)
    for teacher_id, ts in by_teacher.items():
        out[teacher_id].update({
            "teacher/validity_rate": sum(t.valid for t in ts) / len(ts),
            "teacher/reward": _mean([p.reward for p in proposals if p.member == teacher_id]),
            "teacher/task_solve_rate": _mean([rates.get(t.id) for t in ts]),
            **{f"curriculum/{k}": _mean([t.metrics.get(k) for t in ts if t.valid]) for k in CURRICULUM},
        })
    by_student = defaultdict(list)
    for a in answers:
        by_student[a.member].append(a)
    for student_id, answers_of in by_student.items():
        out[student_id].update({
            "student/solve_rate": _mean([float(a.correct) for a in answers_of]),
            "student/format_rate": _mean([float(a.answer is not None) for a in answers_of]),
            "student/reward": _mean([a.reward for a in answers_of]),
        })
    for member_id, stats in train_stats.items():
        out[member_id].update({f"train/{k}": v for k, v in stats.items()})
    for m in population.alive():
        out[m.id].update({"rating/mu": m.mu, "rating/sigma": m.sigma, "rating/conservative": m.conservative(3.0)})
    return {k: {mk: mv for mk, mv in v.items() if mv is not None} for k, v in out.items()}


def task_row(t: Task, rates: dict) -> dict:
    row = {"task_id": t.id, "step": t.step, "kind": t.kind, "teacher": t.teacher, "valid": t.valid, "reason": t.reason,
           "program": t.program, "input": t.input, "output": t.output, "inputs": t.inputs, "outputs": t.outputs,
           "message": t.message, "solve_rate": rates.get(t.id)}
    row.update({f"metric_{k}": v for k, v in t.metrics.items()})
    return row


def summary_line(record: dict, total_steps: int, population: Population) -> str:
    m = record["run_metrics"]
    ratings = " ".join(f"{x.id}:{x.mu:.1f}±{x.sigma:.1f}" for x in population.alive())
    solve = m.get("student/solve_rate")
    return (f"step {record['step']}/{total_steps} | valid {m['tasks/valid']}/{m['tasks/proposed']} "
            f"({100 * m['tasks/validity_rate']:.0f}%) | solve {'n/a' if solve is None else f'{100 * solve:.0f}%'} "
            f"| teacher reward {m.get('teacher/reward', 0):+.2f} | coverage {m['curriculum/coverage']} "
            f"| {m.get('time/step_s', 0):.1f}s | {ratings}")


def member_params(m: Member) -> dict:
    return {"member_id": m.id, "role": m.role, "rank": m.rank, "generation": m.generation,
            "parents": ",".join(m.parents) or "-", "operator": m.operator, "born_step": m.born_step}
