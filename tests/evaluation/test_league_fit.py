"""The league's item-response fit against planted truth: simulated students of known ability answer tasks of known
difficulty, P(solve) = sigmoid(ability - difficulty); the fit must recover the ranks and its bootstrap intervals
must cover the truth about as often as they claim."""

import numpy as np
import pytest
from scipy.special import expit

from populora.evaluation.statistics import league_fit as F
from populora.evaluation.statistics.league_summary import summarise


def _simulate(rng, abilities, difficulties, answers):
    p = expit(abilities[:, None] - difficulties[None, :])
    tries = np.full(p.shape, answers, dtype=float)
    return rng.binomial(answers, p).astype(float), tries


def test_rasch_recovers_planted_abilities_and_difficulties():
    rng = np.random.default_rng(0)
    abilities = np.concatenate([[0.0], rng.normal(0, 1.2, 9)])  # student 0: the anchor (base model) at 0
    difficulties = rng.normal(0, 1.5, 120)
    k, n = _simulate(rng, abilities, difficulties, 4)
    f = F.fit(k, n, anchor=0)
    assert f.converged and f.ability[0] == 0.0
    assert F.spearman(f.ability, abilities) >= 0.9
    assert F.spearman(f.difficulty, difficulties) >= 0.9
    assert np.max(np.abs(f.ability - abilities)) < 0.6  # on the planted scale itself, not only in rank


def test_2pl_recovers_ranks_and_discrimination_order():
    rng = np.random.default_rng(1)
    abilities = np.concatenate([[0.0], rng.normal(0, 1.2, 29)])
    difficulties = rng.normal(0, 1.0, 60)
    a = np.where(np.arange(60) < 30, 0.6, 1.8)  # two blocks of tasks, weak and strong discrimination
    p = expit(a[None, :] * (abilities[:, None] - difficulties[None, :]))
    k, n = rng.binomial(6, p).astype(float), np.full(p.shape, 6.0)
    f = F.fit(k, n, anchor=0, model="2pl")
    assert F.spearman(f.ability, abilities) >= 0.9
    assert f.discrimination[30:].mean() > f.discrimination[:30].mean()


def test_bootstrap_intervals_cover_planted_abilities_near_nominal():
    """15 simulated leagues x 7 free students: the 95% intervals of the abilities (relative to the anchor)
    cover the planted values in about 95% of cases (105 intervals: binomial noise allows 0.87 to 1.0)."""
    rng = np.random.default_rng(2)
    covered = []
    for rep in range(15):
        abilities = np.concatenate([[0.0], rng.normal(0, 1.0, 7)])
        difficulties = rng.normal(0, 1.2, 40)
        k, n = _simulate(rng, abilities, difficulties, 3)
        boot = F.bootstrap(k, n, anchor=0, n_boot=50, seed=rep)
        for s in range(1, 8):
            lo, hi = F.interval(boot.ability[:, s])
            covered.append(lo <= abilities[s] <= hi)
    rate = float(np.mean(covered))
    assert 0.87 <= rate <= 1.0, f"coverage {rate:.2f} of {len(covered)} intervals"


def test_summary_pairs_population_and_baseline_and_ranks_teachers():
    """Planted: population students 1 logit above the baseline; teacher T1's tasks 1.5 logits harder than
    T0's. The summary's paired comparison says the students' gap with an interval that holds +1 and excludes 0,
    and orders the teachers by strength."""
    rng = np.random.default_rng(3)
    students = [{"id": "base", "arm": "base", "run": "", "step": 0, "member": ""}]
    students += [{"id": f"p.S{i}", "arm": "population", "run": "p", "step": 2, "member": f"S{i}"} for i in range(4)]
    students += [{"id": "b.B0", "arm": "baseline", "run": "b", "step": 2, "member": "B0"}]
    abilities = np.array([0.0, 1.6, 1.4, 1.5, 1.5, 0.5])
    teachers = [{"id": "p.T0", "arm": "population", "run": "p", "step": 2, "member": "T0", "proposed": 40, "valid": 30},
                {"id": "p.T1", "arm": "population", "run": "p", "step": 2, "member": "T1", "proposed": 40, "valid": 20},
                {"id": "b.B0", "arm": "baseline", "run": "b", "step": 2, "member": "B0", "proposed": 40, "valid": 35}]
    owner = np.repeat([0, 1, 2], 30)
    difficulties = np.array([0.0, 1.5, 0.2])[owner] + rng.normal(0, 0.5, owner.size)
    tasks = [{"id": f"t{i}", "teacher": teachers[o]["id"], "kind": "code_o"} for i, o in enumerate(owner)]
    k, n = _simulate(rng, abilities, difficulties, 8)
    out = summarise(k, n, students, teachers, tasks, anchor="base", n_boot=100)
    students_line = next(c for c in out["comparisons"] if c["side"] == "students")
    lo, hi = students_line["ci95"]
    assert 0 < lo <= 1.0 <= hi, students_line
    assert "population's students solve more" in students_line["words"]
    strength = {t["id"]: t["strength"]["value"] for t in out["teachers"]}
    assert strength["p.T1"] > strength["b.B0"] > strength["p.T0"]
    assert [t["validity_rate"] for t in out["teachers"]] == [0.75, 0.5, 0.875]
    assert {(h["teacher"], h["student"]) for h in out["heatmap"]} == {(t["id"], s["id"]) for t in teachers for s in students}
    # the anchor is the scale's zero, with no interval of its own (not "+0.00 [+0.00, +0.00]")
    assert out["students"][0]["ability"]["value"] == 0.0 and out["students"][0]["ability"]["ci95"] == [None, None]


def test_alike_answers_give_alike_abilities_the_anchor_included():
    """Nobody solves anything (a tiny random model): no student differs from the anchor, so all sit at 0."""
    k, n = np.zeros((4, 5)), np.full((4, 5), 2.0)
    f = F.fit(k, n, anchor=2)
    assert np.allclose(f.ability, 0.0, atol=1e-3) and np.all(f.difficulty > 1)
    k[1] = n[1]  # one student solves everything: above the others, who stay together
    f = F.fit(k, n, anchor=0)
    assert f.ability[1] > 1 and np.allclose(f.ability[[0, 2, 3]], 0.0, atol=1e-3)


def test_bad_input_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="one shape"):
        F.fit(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="between 0 and tries"):
        F.fit(np.full((2, 2), 3.0), np.full((2, 2), 2.0))
    with pytest.raises(ValueError, match="anchor"):
        summarise(np.zeros((2, 1)), np.ones((2, 1)), [{"id": "a"}, {"id": "b"}], [], [{"id": "t", "teacher": "seed"}], anchor="c")
