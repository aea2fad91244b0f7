"""Does evolution replace the right member? A simulation of the replacement rule with known skills.

Evolution ranks a role by ``mu - k * sigma`` and replaces the lowest; a child inherits its parents' mu and a
sigma widened by ``sigma_widen``. Whether that finds the weakest member is a property of the rule, TrueSkill and
the number of games between evolutions, not of the model, so it can be measured cheaply here: members get a
fixed true skill, every teacher-student pair plays ``games_per_pair`` games a step with the TrueSkill win
probability, ratings move through ``rating.play`` (the training loop's own update), and evolution applies the
rule under test. A child's true skill is its parent's plus noise, as a small mutation of a good adapter is about as
good as the adapter.

What it reports, for a rule, over seeds:

- ``hit_rate``: of the replacements, the share whose victim was truly the weakest of its role (chance: 1/size);
- ``child_first_survival``: of the children that met an evolution, the share that survived their first one
  (a rule that always kills the newborn has 0: nothing it makes can ever take hold);
- ``skill_gain``: the role's mean true skill at the end minus at the start, in TrueSkill's beta units (selection
  keeping the better children raises it; random replacement leaves it at ~0).

``PYTHONPATH=. python scripts/selection_study.py`` prints the table of the rules compared in docs/evolution.md (a
research script, not part of the package: it imports the training loop's own ``rating``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from populora.training import rating


@dataclass(frozen=True)
class Rule:
    """A replacement rule: ``evolution.conservative_k`` and ``evolution.sigma_widen``."""
    k: float = 3.0
    widen: float = 1.5

    def label(self) -> str:
        return f"k={self.k:g}, widen={self.widen:g}"


@dataclass
class _Player:
    skill: float
    mu: float = rating.MU
    sigma: float = rating.SIGMA
    born: int = 0
    met_evolution: bool = False


@dataclass
class Outcome:
    replacements: int = 0
    hits: int = 0
    children_met: int = 0
    children_survived: int = 0
    skill_gain: list[float] = field(default_factory=list)

    def summary(self) -> dict:
        return {"hit_rate": self.hits / max(1, self.replacements),
                "child_first_survival": self.children_survived / max(1, self.children_met),
                "skill_gain": float(np.mean(self.skill_gain)) if self.skill_gain else 0.0,
                "replacements": self.replacements}


def _win(p_skill: float, q_skill: float, rng: np.random.Generator) -> bool:
    """One game with TrueSkill's own model: performances skill + N(0, beta^2), the higher wins."""
    return bool(rng.normal(p_skill, rating.BETA) > rng.normal(q_skill, rating.BETA))


def _evolve(role: list[_Player], rule: Rule, step: int, child_sd: float, rng: np.random.Generator,
            out: Outcome) -> None:
    ranked = sorted(role, key=lambda p: rating.conservative(p.mu, p.sigma, rule.k), reverse=True)
    weakest, parent = ranked[-1], ranked[0]
    for p in role:
        if 0 < p.born < step and not p.met_evolution:
            p.met_evolution = True
            out.children_met += 1
            out.children_survived += p is not weakest
    out.replacements += 1
    out.hits += weakest.skill == min(p.skill for p in role)
    mu, sigma = rating.inherit([parent], rule.widen)
    child = _Player(parent.skill + rng.normal(0.0, child_sd), mu, sigma, born=step)
    role[role.index(weakest)] = child


def simulate(rule: Rule, seed: int, steps: int = 30, every: int = 2, teachers: int = 2, students: int = 2,
             games_per_pair: int = 4, start_sd: float = 1.0, child_sd: float = 0.5) -> Outcome:
    """One run of ``steps`` steps; skills and noise in beta units. ``games_per_pair``: rollouts a student spends on
    one teacher's tasks per step (the 2T2S smoke config: 2 tasks x 2 rollouts = 4)."""
    rng = np.random.default_rng(seed)
    beta = rating.BETA
    roles = [[_Player(rating.MU + rng.normal(0.0, start_sd * beta)) for _ in range(n)] for n in (teachers, students)]
    start = [np.mean([p.skill for p in role]) for role in roles]
    out = Outcome()
    for step in range(1, steps + 1):
        for t in roles[0]:
            for s in roles[1]:
                for _ in range(games_per_pair):
                    (s.mu, s.sigma), (t.mu, t.sigma) = rating.play(s, t, _win(s.skill, t.skill, rng))
        if step % every == 0:
            for role in roles:
                _evolve(role, rule, step, child_sd * beta, rng, out)
    out.skill_gain = [(np.mean([p.skill for p in role]) - s0) / beta for role, s0 in zip(roles, start)]
    return out


def study(rules: list[Rule], seeds: int = 200, **kw) -> list[dict]:
    """Every rule over the same ``seeds`` (common random numbers: the same starting skills for every rule)."""
    rows = []
    for rule in rules:
        total = Outcome()
        for seed in range(seeds):
            o = simulate(rule, seed, **kw)
            total.replacements += o.replacements
            total.hits += o.hits
            total.children_met += o.children_met
            total.children_survived += o.children_survived
            total.skill_gain += o.skill_gain
        gains = np.array(total.skill_gain)
        row = {"rule": rule.label(), **total.summary(),
               "skill_gain_ci95": 1.96 * float(gains.std(ddof=1)) / math.sqrt(len(gains))}
        rows.append(row)
    return rows


RULES = [Rule(3.0, 1.5), Rule(3.0, 1.0), Rule(1.0, 1.5), Rule(0.0, 1.5)]
# the 2T2S smoke config (4 games per pair a step, evolution every 2 steps) and a sparse one (1 game, every step)
SCENARIOS = {"dense: 4 games per pair a step, evolve every 2": {"games_per_pair": 4, "every": 2},
             "sparse: 1 game per pair a step, evolve every step": {"games_per_pair": 1, "every": 1}}


def main(seeds: int = 200) -> None:
    print(f"2 teachers + 2 students, 30 steps, {seeds} seeds (the same for every rule); mean and 95% CI")
    for name, kw in SCENARIOS.items():
        print(f"\n{name}\n")
        print("| rule | hit rate (chance 0.5) | children surviving their first evolution | skill gain (beta) |")
        print("|---|---|---|---|")
        for r in study(RULES, seeds, **kw):
            print(f"| {r['rule']} | {r['hit_rate']:.2f} | {r['child_first_survival']:.2f} | "
                  f"{r['skill_gain']:+.2f} ± {r['skill_gain_ci95']:.2f} |")


if __name__ == "__main__":
    main()
