"""Exactly ``tasks.answers_per_task`` answers per valid task in every population mix (AZR's n_samples), PFSP
choosing who answers, every student answering the same number (the compute ledger shows it)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from populora.training.phases.matchmaking import assign_answers
from populora.training.member import Member


@pytest.mark.parametrize("teachers, students, tasks", [(1, 1, 32), (4, 4, 5), (4, 8, 3), (3, 5, 7), (2, 7, 1)])
def test_every_task_gets_exactly_n_answers_and_students_share_them_evenly(teachers, students, tasks):
    ts = [Member(f"T{i}", "teacher", 8) for i in range(teachers)]
    ss = [Member(f"S{i}", "student", 8) for i in range(students)]
    ts[0].mu, ts[0].sigma = 35.0, 2.0  # an uneven field: PFSP weights differ
    tasks_of = {t.id: [f"{t.id}-{j}" for j in range(tasks - (i % 2))] for i, t in enumerate(ts)}  # unequal valid counts
    got = assign_answers(tasks_of, ts, ss, 8, "even", 2.0, np.random.default_rng(1))
    assert sorted(got) == sorted(x for v in tasks_of.values() for x in v)
    assert {len(v) for v in got.values()} == {8}
    load = Counter(s for v in got.values() for s in v)
    assert max(load.values()) - min(load.values()) <= 1 and sum(load.values()) == 8 * len(got)


def test_pfsp_still_chooses_who_answers():
    """'even' PFSP favours close matches: a weak and a strong student mostly answer the teacher of their level."""
    ts, ss = [Member("T0", "teacher", 8), Member("T1", "teacher", 8)], [Member("S0", "student", 8), Member("S1", "student", 8)]
    (ts[0].mu, ss[0].mu), (ts[1].mu, ss[1].mu) = (15.0, 15.0), (35.0, 35.0)
    for m in ts + ss:
        m.sigma = 2.0
    got = assign_answers({"T0": [f"a{j}" for j in range(20)], "T1": [f"b{j}" for j in range(20)]}, ts, ss, 8, "even",
                         2.0, np.random.default_rng(0))
    assert {len(v) for v in got.values()} == {8}
    weak_on_weak = sum(v.count("S0") for k, v in got.items() if k.startswith("a"))
    assert weak_on_weak > 0.75 * 160, weak_on_weak  # S0 gives 160 answers, most of them to T0's tasks


def test_4t4s_tiny_model_step_gives_every_valid_task_exactly_answers_per_task(mlflow_store, monkeypatch):
    """One real step of a 4T+4S population on a tiny random model. The random model writes no valid program, so
    the proposals it sampled are given known-good programs before the sandbox validates them."""
    from populora.platform import config as config_io
    from populora.training import loop
    from populora.training.config import TrainConfig

    real_propose = loop.propose

    def propose(*args, **kwargs):
        tasks, rollouts = real_propose(*args, **kwargs)
        for i, t in enumerate(tasks):
            if t.kind != "code_f" and i % 4:  # every 4th stays as written (invalid): answers go to valid tasks only
                t.program, t.input, t.reason = f"def f(x):\n    return x * {i + 2}", str(i), ""
        return tasks, rollouts

    monkeypatch.setattr(loop, "propose", propose)
    cfg = config_io.load(TrainConfig, None, [
        "steps=1", "model.tiny_random=true", "model.lora_rank=4", "population.teachers=4", "population.students=4",
        "tasks.tasks_per_teacher=3", "tasks.answers_per_task=3", "tasks.kinds=[code_o, code_i]",
        "tasks.max_new_tokens_propose=16", "tasks.max_new_tokens_solve=8", "tasks.seed_buffer=1",
        "tasks.seed_rounds=0", "evolution.every=0", "matchmaking.teachers_per_student=1"])
    trainer = loop.Trainer.create(cfg)
    record = trainer.step()
    trainer.finish()
    valid = [t["task_id"] for t in record["tasks"] if t["valid"]]
    assert valid, [t["reason"] for t in record["tasks"]]
    per_task = Counter(a["task_id"] for a in record["answers"])
    assert {per_task[t] for t in valid} == {3} and set(per_task) == set(valid)
    m = record["run_metrics"]
    assert m["tasks/answers_per_task_min"] == m["tasks/answers_per_task_max"] == 3
    students = [s.id for s in trainer.population.students]
    rollouts = [record["member_metrics"][s]["compute/rollouts"] for s in students]  # the ledger: equal shares
    assert sum(rollouts) == 3 * len(valid) and max(rollouts) - min(rollouts) <= 1
