"""Before and after on one panel (evaluation/statistics/panel_change.py): the solve rates' and the paired
difference's intervals over panels of 1 to 2000 tasks, all solved, none solved and ties (the trained students
answering as the base model did); against known answers where there are some (Wilson's interval at the edges),
and the mean ability against the league's own per-student fit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.evaluation.statistics import intervals
from populora.evaluation.statistics import league_summary
from populora.evaluation.statistics import panel_change as P

Z = intervals.z_of()
EPS = 64 * np.finfo(float).eps  # a mean of <= 2000 terms in [0, 1] and a difference of two: a few ulps each


def _panel(seed: int, tasks: int, answers: int, students: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Counts (1 + students, tasks): row 0 the base model; ``mode`` none / all solved, tie (every row answers as
    the base), or random per-task solve probabilities."""
    rng = np.random.default_rng(seed)
    n = np.full((1 + students, tasks), answers, dtype=float)
    if mode == "none":
        return np.zeros_like(n), n
    if mode == "all":
        return n.copy(), n
    p = rng.uniform(0, 1, tasks)
    k = rng.binomial(answers, np.broadcast_to(p, n.shape)).astype(float)
    if mode == "tie":
        k[1:] = k[0]
    return k, n


panels = st.tuples(st.integers(0, 2**31), st.integers(1, 2000), st.integers(1, 8), st.integers(1, 3),
                   st.sampled_from(["random", "none", "all", "tie"]))


@settings(max_examples=150, deadline=None)
@given(panel=panels)
def test_solve_rates_and_difference_contain_their_values_never_zero_width(panel):
    seed, tasks, answers, students, mode = panel
    k, n = _panel(seed, tasks, answers, students, mode)
    before, after = P.per_task(k, n, [0]), P.per_task(k, n, range(1, 1 + students))
    assert np.allclose(after, (k[1:] / n[1:]).mean(0), rtol=0, atol=EPS)  # brute force
    for scores in (before, after):
        r = P.solve_rate(scores)
        lo, hi = r["ci95"]
        assert 0 <= lo < hi <= 1 and lo <= r["value"] <= hi
        assert abs(r["value"] - scores.mean()) <= EPS
    d = P.difference(after, before)
    lo, hi = d["ci95"]
    assert -1 <= lo < hi <= 1 and lo <= d["value"] <= hi, d
    assert abs(d["value"] - float(np.mean(after - before))) <= EPS
    assert 0 <= d["p"] <= 1
    if mode == "tie":  # no task changed: a difference of exactly 0, an interval around it, p = 1
        # the means' difference is 0 up to rounding; p inverts the interval by a numerical search (a tie's p read
        # 0.9999999924 on a fresh clone's run: the search's tolerance, not a difference)
        assert abs(d["value"]) <= EPS and lo < 0 < hi and d["p"] >= 1 - 1e-6


@pytest.mark.parametrize("tasks", [1, 2, 7, 30, 2000])
def test_none_and_all_solved_read_wilsons_edges(tasks):
    """0 of n tasks: Wilson's [0, z^2 / (n + z^2)] (never [0, 0]); n of n: [n / (n + z^2), 1]."""
    none, every = P.solve_rate(np.zeros(tasks)), P.solve_rate(np.ones(tasks))
    assert none["value"] == 0 and none["ci95"][0] == 0
    assert none["ci95"][1] == pytest.approx(Z * Z / (tasks + Z * Z), rel=1e-12)
    assert every["value"] == 1 and every["ci95"][1] == 1
    assert every["ci95"][0] == pytest.approx(tasks / (tasks + Z * Z), rel=1e-12)


def test_a_planted_rise_on_many_tasks_is_found_and_no_rise_is_not():
    rng = np.random.default_rng(3)
    before = rng.binomial(4, 0.2, 400) / 4
    after = np.clip(before + rng.binomial(4, 0.15, 400) / 4, 0, 1)
    assert P.difference(after, before)["ci95"][0] > 0
    lo, hi = P.difference(before[rng.permutation(400)], before)["ci95"]
    assert lo < 0 < hi


@settings(max_examples=15, deadline=None)
@given(panel=st.tuples(st.integers(0, 2**31), st.integers(1, 25), st.integers(1, 4), st.integers(1, 3),
                       st.sampled_from(["random", "none", "all", "tie"])))
def test_mean_ability_is_the_students_mean_on_the_leagues_scale_with_a_positive_width_interval(panel):
    seed, tasks, answers, students, mode = panel
    k, n = _panel(seed, tasks, answers, students, mode)
    out = P.panel_change(k, n, 0, range(1, 1 + students), n_boot=20, seed=seed % 1000)
    ab = out["ability"]["trained"]
    lo, hi = ab["ci95"]
    assert lo < hi and lo <= ab["value"] <= hi
    # the league's own summary of the same counts: each student's ability, anchored at the base model
    recs = [{"id": f"s{i}", "arm": "base" if i == 0 else "population", "run": "" if i == 0 else "r", "step": int(i > 0), "member": f"S{i}"} for i in range(1 + students)]
    league = league_summary.summarise(k, n, recs, [], [{"id": f"t{j}", "teacher": "seed", "kind": "code_o"}
                                                      for j in range(tasks)], "s0", n_boot=20, seed=seed % 1000)
    each = [s["ability"]["value"] for s in league["students"][1:]]
    assert ab["value"] == pytest.approx(np.mean(each), abs=1e-3)  # the league rounds to 4 decimals
    for mine, theirs in zip(ab["members"], league["students"][1:]):
        assert mine["ci95"] == pytest.approx(theirs["ability"]["ci95"], abs=1e-3)
    if mode == "tie":
        assert abs(ab["value"]) < 1e-3 and lo < 0 < hi
    assert out["rise"] == out["solve_rate"]["difference"]["value"]
    assert out["interval"][0] <= out["rise"] <= out["interval"][1] and out["interval"][0] < out["interval"][1]


def test_bad_panels_are_refused_with_what_is_wrong():
    k, n = np.zeros((2, 3)), np.ones((2, 3))
    with pytest.raises(ValueError, match="did not answer every panel task"):
        P.per_task(k, np.array([[1, 1, 0], [1, 1, 1]]), [0])
    with pytest.raises(ValueError, match="at least one trained entrant"):
        P.panel_change(k, n, 0, [0])
    with pytest.raises(ValueError, match="at least one entrant and one task"):
        P.per_task(np.zeros((2, 0)), np.zeros((2, 0)), [0])
