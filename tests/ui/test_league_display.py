"""The League page's findings of issues 54 and 67, without a model: no interval bound sits at a bootstrap tie with
the base model (the interval holds the fit's curvature too), the base model has no interval of its own, the unrated baseline shows "–" and
not its TrueSkill prior, and the two arms differ in colour and in marker."""

from __future__ import annotations

import numpy as np
import pandas as pd

from populora.evaluation.statistics import league_fit as F
from populora.evaluation.statistics import league_summary as S
from populora.training.league_plan import rated
from populora.ui import league_view as V


def _league(k: np.ndarray) -> dict:
    students = [{"id": "base", "arm": "base", "run": "", "step": 0, "member": "base", "mu": None}]
    students += [{"id": f"p.s1.S{i}", "arm": "population", "run": "p", "step": 1, "member": f"S{i}", "mu": 26.0}
                 for i in range(1, len(k))]
    tasks = [{"id": f"t{j}", "teacher": "seed", "kind": "code_o"} for j in range(k.shape[1])]
    return S.summarise(k, np.full(k.shape, 2.0), students, [], tasks, "base", n_boot=200, seed=3)


def test_a_bound_the_bootstrap_ties_at_zero_is_widened_by_the_answers_noise():
    """Known truth: the base model solves nothing; S1 solved 2 of 2 answers on one task of six, so a replicate
    that draws none of that task ((5/6)^6 = 33% of them) leaves S1 answering as the base model did: the same
    ability, exactly 0, and the bootstrap's lower bound is that tie, +0.00 (issue 54 explained it in a note).
    Since issue 67 the interval holds the Laplace posterior's too: 2 answers on one task cannot rule out that S1
    is no better than the base model, so the bound goes below 0, and no note is needed. S2 solved every task."""
    k = np.zeros((3, 6))
    k[1, 0] = 2
    k[2] = 2
    data = _league(k)
    s1, s2 = data["students"][1], data["students"][2]
    boot = F.bootstrap(k, np.full(k.shape, 2.0), anchor=0, n_boot=200, seed=3)
    share = float(np.mean(np.abs(boot.ability[:, 1]) < S.TIE))
    mc = np.sqrt(0.335 * 0.665 / 200)  # the share's Monte Carlo error over 200 replicates
    assert abs(share - (5 / 6) ** 6) < 4 * mc + 0.01, share  # the bootstrap's tie, as before
    lo, hi = s1["ability"]["ci95"]
    assert lo < 0 < s1["ability"]["value"] < hi and "note" not in s1["ability"]
    assert "note" not in s2["ability"] and s2["ability"]["ci95"][0] > 0.5
    frame = V.abilities(data)
    assert frame.set_index("student").loc["base", "95% CI"] == "–"
    assert V.NOTE in frame and frame.set_index("student").loc["base", V.NOTE].startswith("the scale's zero")


def test_students_with_the_same_answers_get_the_same_ability():
    """What the note rests on: the fit gives alike rows alike abilities (the anchor's row: its 0)."""
    rng = np.random.default_rng(0)
    k = rng.integers(0, 3, size=(4, 8)).astype(float)
    k[2] = k[0]
    fit = F.fit(k, np.full(k.shape, 2.0), anchor=0)
    assert abs(fit.ability[2] - fit.ability[0]) < 1e-6 and fit.ability[0] == 0.0


def test_the_unrated_baseline_shows_a_dash_not_its_prior():
    # the single-agent baseline plays itself, unrated: its 25.00 is the prior (league_plan.rated leaves it out)
    assert rated({"role": "both", "mu": 25.0, "sigma": 25 / 3}) == (None, None)
    assert rated({"role": "student", "mu": 24.1, "sigma": 2.0}) == (24.1, 2.0)
    data = {"students": [{"id": "b.s2.B0", "arm": "baseline", "step": 2, "member": "B0", "ability": {"value": 0.3, "ci95": [-1, 1]},
                          "solve_rate": 0.1, "answers": 8, "mu": None},
                         {"id": "p.s2.S0", "arm": "population", "step": 2, "member": "S0", "ability": {"value": 0.5, "ci95": [-1, 2]},
                          "solve_rate": 0.2, "answers": 8, "mu": 27.456},
                         {"id": "old.B0", "arm": "baseline", "step": 2, "member": "B0", "ability": {"value": 0.1, "ci95": [-1, 1]},
                          "solve_rate": 0.1, "answers": 8, "mu": 25.0}]}  # a league from before: its prior kept
    shown = V.abilities(data).set_index("student")[V.MU]
    assert shown.to_dict() == {"p.s2.S0": "27.46", "b.s2.B0": "–", "old.B0": "–"}


def test_the_arms_differ_in_colour_and_marker():
    df = pd.DataFrame([{"run": f"{arm} {run}", "arm": arm, "step": s, "value": 0.1 * s, "low": 0.0, "high": 0.2 * s}
                       for arm, run in (("population", "aaaa"), ("baseline", "bbbb")) for s in (1, 2)])
    spec = V.curves_chart(df, "t").to_dict()
    layers = spec["layer"]
    color = layers[2]["encoding"]["color"]["scale"]
    shape = layers[2]["encoding"]["shape"]["scale"]
    colors = dict(zip(color["domain"], color["range"]))
    shapes = dict(zip(shape["domain"], shape["range"]))
    assert set(colors) == {"population", "baseline"} and len(set(colors.values())) == 2
    assert len(set(shapes.values())) == 2

    def rgb(hex_):
        return np.array([int(hex_[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)

    # far apart: not two blues (the page drew #4c78a8-like pairs); Euclidean RGB distance of at least 120
    assert np.linalg.norm(rgb(colors["population"]) - rgb(colors["baseline"])) >= 120
