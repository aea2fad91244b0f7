"""No zero-width interval in a league (issue 67): a CPU league's students all answer alike (the tiny random model
solves nothing), every bootstrap replicate refits the same answers, and the percentile intervals read
"+0.00 [+0.00, +0.00]". Every interval the league reports is widened to the Laplace posterior's
(``league_fit.covariance``): checked against the Rasch Hessian written out by hand, over ties and degenerate
panels (all solved, none solved, one student), and for coverage of planted abilities."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from populora.evaluation.statistics import league_fit as F
from populora.evaluation.statistics import league_summary as S


def _league(k: np.ndarray, n: np.ndarray, n_boot: int = 20, seed: int = 0) -> dict:
    """Student 0 the base model, then population and baseline students at step 1; two teachers, one per arm, who
    wrote the tasks alternately (task 0 a seed task)."""
    arms = ["base"] + ["population" if s % 2 else "baseline" for s in range(1, len(k))]
    students = [{"id": f"s{s}", "arm": a, "run": a[0], "step": 0 if a == "base" else 1, "member": f"S{s}"}
                for s, a in enumerate(arms)]
    teachers = [{"id": f"{a[0]}.T0", "arm": a, "run": a[0], "step": 1, "member": "T0", "proposed": 4, "valid": v}
                for a, v in (("population", 0), ("baseline", 3))]
    tasks = [{"id": f"t{i}", "teacher": "seed" if i == 0 else teachers[i % 2]["id"], "kind": "code_o"}
             for i in range(k.shape[1])]
    return S.summarise(k, n, students, teachers, tasks, "s0", n_boot=n_boot, seed=seed)


def _intervals(data: dict):
    """(what, value, lo, hi) of every interval the league reports."""
    for s in data["students"]:
        yield s["id"], s["ability"]["value"], *s["ability"]["ci95"]
    for t in data["teachers"]:
        yield t["id"], t["strength"]["value"], *t["strength"]["ci95"]
    for t in data["tasks"]:
        yield t["id"], t["difficulty"]["value"], *t["difficulty"]["ci95"]
    for c in data["curves"]:
        for side in ("student_ability", "teacher_strength"):
            if side in c:
                yield f"{c['run']} {side}", c[side]["value"], *c[side]["ci95"]
    for c in data["comparisons"]:
        yield c["words"], c["delta"], *c["ci95"]


def _check(data: dict) -> None:
    for what, value, lo, hi in _intervals(data):
        if what == data["anchor"]:
            assert lo is None and hi is None and value == 0.0  # the scale's zero: no interval of its own
            continue
        if value is None:  # a teacher with no valid task on the panel: no strength at all
            assert lo is None and hi is None, what
            continue
        assert lo < hi and lo <= value <= hi and np.isfinite([lo, hi]).all(), (what, value, lo, hi)


panels = st.tuples(st.integers(2, 5), st.integers(1, 6), st.integers(1, 3)).flatmap(
    lambda shape: st.tuples(
        st.just(shape[2]),
        st.one_of(st.just("none"), st.just("all"), st.just("ties"), st.just("any")),
        st.lists(st.lists(st.integers(0, shape[2]), min_size=shape[1], max_size=shape[1]),
                 min_size=shape[0], max_size=shape[0])))


@settings(max_examples=30, deadline=None)
@given(panels)
def test_no_interval_of_a_league_has_zero_width(panel):
    answers, kind, rows = panel
    k = np.array(rows, dtype=float)
    n = np.full(k.shape, float(answers))
    if kind == "none":
        k[:] = 0  # the tiny random model: nobody solves anything
    elif kind == "all":
        k[:] = n
    elif kind == "ties":
        k[1:] = k[0]  # every student answers as the base model did
    _check(_league(k, n))


def test_a_cpu_league_where_nobody_solves_anything_reads_wide_not_zero():
    """Nobody solves anything: every ability is 0, and the interval says how little 8 tasks x 2 answers of
    failures tell apart (several logits), not +0.00 to +0.00."""
    k, n = np.zeros((5, 8)), np.full((5, 8), 2.0)
    data = _league(k, n, n_boot=100)
    _check(data)
    for s in data["students"][1:]:
        lo, hi = s["ability"]["ci95"]
        assert s["ability"]["value"] == 0.0 and lo < -1 and hi > 1, s
    assert "the interval includes 0" in data["comparisons"][0]["words"]


def test_one_student_beside_the_base_model():
    k, n = np.array([[0.0, 1.0, 2.0], [2.0, 2.0, 2.0]]), np.full((2, 3), 2.0)
    data = _league(k, n)
    _check(data)
    assert data["students"][1]["ability"]["ci95"][0] > -1  # it solved everything the base model missed


def _rasch_hessian(k, n, f: F.Fit) -> np.ndarray:
    """The penalised Rasch negative log-likelihood's Hessian written out: w = n p (1 - p) per cell."""
    p = expit(f.ability[:, None] - f.difficulty[None, :])
    w = n * p * (1 - p)
    S_, I = w.shape
    H = np.zeros((S_ + I, S_ + I))
    H[:S_, :S_] = np.diag(w.sum(axis=1))
    H[S_:, S_:] = np.diag(w.sum(axis=0))
    H[:S_, S_:], H[S_:, :S_] = -w, -w.T
    return H + np.eye(S_ + I) / F.PRIOR_SD ** 2


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 5), st.integers(1, 6), st.integers(0, 10_000))
def test_the_covariance_is_the_inverse_of_the_rasch_hessian_written_out(students, tasks, seed):
    rng = np.random.default_rng(seed)
    n = rng.integers(1, 4, size=(students, tasks)).astype(float)
    k = rng.binomial(n.astype(int), rng.uniform(0, 1, size=n.shape)).astype(float)
    f = F.fit(k, n, anchor=0)
    want = np.linalg.inv(_rasch_hessian(k, n, f))
    got = F.covariance(k, n, f)
    # central differences of the exact gradient: error O(h^2) relative, h = 1e-5 (x rounding 1e-16 / 1e-5)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max()), np.abs(got - want).max()


def test_widened_intervals_cover_planted_abilities_near_nominal():
    """As ``test_league_fit``'s coverage of the bootstrap, for the intervals the league prints (widened): 15
    simulated leagues x 7 students cover the planted abilities at 0.87 or more (105 intervals)."""
    rng = np.random.default_rng(2)
    covered = []
    for rep in range(15):
        abilities = np.concatenate([[0.0], rng.normal(0, 1.0, 7)])
        difficulties = rng.normal(0, 1.2, 40)
        n = np.full((8, 40), 3.0)
        k = rng.binomial(3, expit(abilities[:, None] - difficulties[None, :])).astype(float)
        data = _league(k, n, n_boot=50, seed=rep)
        for s in range(1, 8):
            lo, hi = data["students"][s]["ability"]["ci95"]
            covered.append(lo <= abilities[s] <= hi)
    assert 0.87 <= float(np.mean(covered)) <= 1.0, np.mean(covered)


@given(st.integers(0, 50), st.integers(1, 50))
def test_a_teachers_validity_interval_holds_its_rate_within_0_and_1(valid, proposed):
    valid = min(valid, proposed)
    lo, hi = F.wilson(valid, proposed)
    assert 0.0 <= lo <= valid / proposed <= hi <= 1.0 and lo < hi
