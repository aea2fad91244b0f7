"""A synthetic MLflow store with the exact layout ``populora train`` writes, built fast through MlflowClient.

Used by the scale test (50 runs x 16 members x 10k tasks must stay responsive) and to develop pages without
waiting for a model. Nothing here trains; values are random but well-formed.

    python -m populora.ui.synthetic --uri sqlite:///big.db --runs 50 --members 16 --tasks 10000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

KINDS = ("code_o", "code_i", "code_f")
PROGRAM = "def f(x):\n    total = 0\n    for i in range(x):\n        if i % 2:\n            total += i\n    return total\n"


def _client(uri: str):
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri)


def _metrics(items: dict[int, dict[str, float]]):
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [Metric(k, float(v), now, step) for step, values in items.items() for k, v in values.items()]


def _log_batch(client, run_id: str, metrics=(), tags: dict | None = None, params: dict | None = None) -> None:
    from mlflow.entities import Param, RunTag

    metrics = list(metrics)
    for i in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[i:i + 1000])
    tag_items = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
    param_items = [Param(k, str(v)) for k, v in (params or {}).items()]
    for i in range(0, max(len(tag_items), len(param_items)), 100):
        client.log_batch(run_id, tags=tag_items[i:i + 100], params=param_items[i:i + 100])


def _log_json(client, run_id: str, data, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(json.dumps(data))
        client.log_artifact(run_id, str(path))


def _members(n: int, baseline: bool, steps: int, rng: random.Random) -> list[dict]:
    """Initial members plus one evolution child per 4 steps (mutation or crossover of two alive members)."""
    if baseline:
        return [dict(id="B0", role="both", generation=0, parents=[], operator="init", born_step=0, alive=True)]
    half = max(1, n // 2)
    members = [dict(id=f"T{i}", role="teacher", generation=0, parents=[], operator="init", born_step=0, alive=True) for i in range(half)]
    members += [dict(id=f"S{i}", role="student", generation=0, parents=[], operator="init", born_step=0, alive=True) for i in range(n - half)]
    counters = {"teacher": half, "student": n - half}
    for step in range(4, steps + 1, 4):
        role = rng.choice(("teacher", "student"))
        alive = [m for m in members if m["alive"] and m["role"] == role]
        if len(alive) < 2:
            continue
        dead = rng.choice(alive)
        dead["alive"] = False
        op = rng.choice(("mutation", "crossover"))
        parents = rng.sample([m for m in alive if m is not dead], 2 if op == "crossover" and len(alive) > 2 else 1)
        prefix = "T" if role == "teacher" else "S"
        members.append(dict(id=f"{prefix}{counters[role]}", role=role, operator=op, born_step=step, alive=True,
                            parents=[p["id"] for p in parents], generation=1 + max(p["generation"] for p in parents),
                            replaced=dead["id"]))
        counters[role] += 1
    return members


def _run_metrics(steps: int, rng: random.Random) -> dict[int, dict[str, float]]:
    out = {}
    for s in range(1, steps + 1):
        trend = s / steps
        out[s] = {"tasks/proposed": 12, "tasks/valid": rng.randint(2, 12), "tasks/validity_rate": min(1, 0.3 + 0.5 * trend + rng.random() * 0.2),
                  "student/solve_rate": min(1, 0.2 + 0.4 * trend + rng.random() * 0.1), "student/format_rate": 0.9,
                  "student/reward": rng.random(), "teacher/reward": rng.random() - 0.3, "curriculum/coverage": 3 * s,
                  "curriculum/ast_depth": 4 + 3 * trend, "curriculum/cyclomatic": 2 + 2 * trend, "curriculum/loc": 6 + 6 * trend,
                  "curriculum/variables": 2 + 2 * trend, "curriculum/novel_rate": rng.random(), "rating/games": 8,
                  "evolution/replaced": 1 if s % 4 == 0 else 0, "time/step_s": 10 + rng.random(), "progress/step": s}
        for kind in KINDS:
            out[s][f"student/solve_rate/{kind}"] = rng.random()
            out[s][f"tasks/validity_rate/{kind}"] = rng.random()
    return out


def _member_metrics(m: dict, steps: int, rng: random.Random) -> dict[int, dict[str, float]]:
    out, mu, sigma = {}, 25.0, 8.333
    for s in range(max(1, m["born_step"]), steps + 1):
        mu += rng.gauss(0, 0.8)
        sigma = max(1.0, sigma * 0.95)
        v = {"rating/mu": mu, "rating/sigma": sigma, "rating/conservative": mu - 3 * sigma,
             "train/loss": rng.random(), "train/kl": rng.random() * 0.01, "train/grad_norm": rng.random(), "train/tokens": 500, "train/rollouts": 6}
        if m["role"] in ("teacher", "both"):
            v.update({"teacher/validity_rate": rng.random(), "teacher/reward": rng.random(), "teacher/task_solve_rate": rng.random(),
                      "curriculum/ast_depth": 5 + rng.random(), "curriculum/loc": 8 + rng.random()})
        if m["role"] in ("student", "both"):
            v.update({"student/solve_rate": rng.random(), "student/format_rate": 0.9, "student/reward": rng.random()})
        out[s] = v
        if not m["alive"] and s >= m.get("died", steps):
            break
    m["mu"], m["sigma"] = mu, sigma
    return out


def _tables(client, run_id: str, steps: int, tasks_per_step: int, members: list[dict], rng: random.Random) -> None:
    teachers = [m["id"] for m in members if m["role"] in ("teacher", "both")]
    students = [m["id"] for m in members if m["role"] in ("student", "both")]
    for s in range(1, steps + 1):
        tasks, answers = [], []
        for i in range(tasks_per_step):
            kind, valid = KINDS[i % 3], rng.random() < 0.6
            tid = f"s{s}-{teachers[i % len(teachers)]}-{i}"
            rate = rng.choice((0.0, 0.5, 1.0)) if valid else None
            tasks.append({"task_id": tid, "step": s, "kind": kind, "teacher": teachers[i % len(teachers)], "valid": valid,
                          "reason": "ok" if valid else "error: NameError: name 'y' is not defined", "program": PROGRAM,
                          "input": str(i), "output": str(i * 2) if valid else "", "inputs": "[]", "outputs": "[]",
                          "message": "sum of odd numbers below x" if kind == "code_f" else "", "solve_rate": rate,
                          "metric_ast_depth": 5, "metric_cyclomatic": 3, "metric_loc": 6, "metric_variables": 2, "metric_novel_structure": 1.0})
            if valid:
                for st in rng.sample(students, min(2, len(students))):
                    ok = rng.random() < 0.5
                    answers.append({"member": st, "task_id": tid, "kind": kind, "answer": str(i * 2 if ok else i), "correct": ok,
                                    "verdict": "ok" if ok else "wrong", "reward": 1.0 if ok else 0.0,
                                    "text": f"<answer>{i * 2 if ok else i}</answer>", "step": s})
        _log_table(client, run_id, tasks, f"tasks/step_{s:06d}.json")
        _log_table(client, run_id, answers, f"answers/step_{s:06d}.json")


def _log_table(client, run_id: str, rows: list[dict], artifact_file: str) -> None:
    """The file ``MlflowClient.log_table`` writes ({"columns", "data"}), written directly: log_table also appends
    to the run's ``mlflow.loggedArtifacts`` tag, which overflows MLflow's 8000-character tag limit after ~90
    tables and then makes every further log_table call fail."""
    if not rows:
        return
    cols = list(rows[0])
    folder, name = artifact_file.rsplit("/", 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(json.dumps({"columns": cols, "data": [[r[c] for c in cols] for r in rows]}))
        client.log_artifact(run_id, str(path), artifact_path=folder)


def make_run(client, experiment_id: str, name: str, members: int, steps: int, tasks_per_step: int, status: str = "finished",
             baseline: bool = False, baseline_run: str = "", seed: int = 0) -> str:
    """One parent run and its member runs, as ``populora train`` would leave them after ``steps`` steps."""
    rng = random.Random(seed)
    kind = "baseline" if baseline else "population"
    run_id = client.create_run(experiment_id, run_name=name, tags={"populora.kind": kind}).info.run_id
    done = steps if status == "finished" else max(1, steps // 2)
    params = {"name": name, "steps": steps, "model.base": "embedded", "model.lora_rank": 8,
              "population.teachers": members // 2, "population.students": members - members // 2,
              "population.single_agent": baseline, "evolution.every": 4}
    _log_batch(client, run_id, _metrics(_run_metrics(done, rng)), params=params,
               tags={"populora.status": status, "populora.progress": f"{done}/{steps}", "populora.run_dir": f"/tmp/runs/{run_id}",
                     "populora.base_model": "embedded", "populora.baseline_run": baseline_run})
    pop = _members(members, baseline, done, rng)
    for m in pop:
        tags = {"mlflow.parentRunId": run_id, "populora.member_id": m["id"], "populora.role": m["role"],
                "populora.parents": ",".join(m["parents"]) or "-", "populora.operator": m["operator"],
                "populora.generation": m["generation"], "populora.alive": str(m["alive"]).lower(),
                "populora.adapter_dir": f"/tmp/runs/{run_id}/adapters/{m['id']}"}
        child = client.create_run(experiment_id, run_name=f"{m['id']} ({m['role']})", tags=tags).info.run_id
        m["mlflow_run_id"], m["rank"], m["adapter_dir"] = child, 8, tags["populora.adapter_dir"]
        _log_batch(client, child, _metrics(_member_metrics(m, done, rng)),
                   params={"member_id": m["id"], "role": m["role"], "rank": 8, "generation": m["generation"],
                           "parents": tags["populora.parents"], "operator": m["operator"], "born_step": m["born_step"]})
        if status != "running":
            client.set_terminated(child, status="FINISHED")
    _tables(client, run_id, done, tasks_per_step, pop, rng)
    events = [{"child": m["id"], "parents": m["parents"], "operator": m["operator"], "step": m["born_step"],
               "generation": m["generation"], "role": m["role"], "replaced": m.get("replaced", ""), "details": {}} for m in pop]
    edges = [{"parent": p, "child": e["child"], "operator": e["operator"], "step": e["step"]} for e in events for p in e["parents"]]
    _log_json(client, run_id, {"events": events, "nodes": [m["id"] for m in pop], "edges": edges}, "lineage.json")
    fields = ("id", "role", "rank", "generation", "parents", "operator", "born_step", "mu", "sigma", "alive", "adapter_dir", "mlflow_run_id")
    _log_json(client, run_id, {"members": [{k: m.get(k) for k in fields} for m in pop], "next_index": {}}, "population.json")
    if status != "running":
        client.set_terminated(run_id, status={"finished": "FINISHED", "failed": "FAILED", "stopped": "KILLED"}[status])
    return run_id


def build(uri: str, runs: int = 3, members: int = 4, tasks: int = 120, steps: int = 6, experiment: str = "populora",
          small_steps: int | None = None) -> list[str]:
    """``runs`` population runs plus one baseline run. The first population run is the big one (``steps`` steps
    holding ``tasks`` tasks); the others have ``small_steps`` steps (default: ``steps``) of 6 tasks each, which keeps
    a 50-run store quick to build: per-step metrics of every member are what costs time in SQLite."""
    client = _client(uri)
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    baseline = make_run(client, exp_id, "baseline", 1, steps, 6, baseline=True, seed=999)
    ids = [baseline]
    statuses = ("finished", "running", "failed", "stopped")
    for i in range(runs):
        big = i == 0
        ids.append(make_run(client, exp_id, f"synthetic-{i}", members, steps if big else (small_steps or steps),
                            max(1, tasks // steps) if big else 6,
                            status=statuses[i % len(statuses)], baseline_run=baseline if big else "", seed=i))
    return ids


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m populora.ui.synthetic", description=__doc__.splitlines()[0])
    p.add_argument("--uri", default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///synthetic.db"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--members", type=int, default=4)
    p.add_argument("--tasks", type=int, default=120, help="tasks of the first (largest) run")
    p.add_argument("--steps", type=int, default=6, help="steps of the first run (and of the others unless --small-steps)")
    p.add_argument("--small-steps", type=int, help="steps of the other runs")
    args = p.parse_args(argv)
    t0 = time.time()
    ids = build(args.uri, args.runs, args.members, args.tasks, args.steps, small_steps=args.small_steps)
    print(f"{len(ids)} runs in {args.uri} ({time.time() - t0:.1f}s); first population run: {ids[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
