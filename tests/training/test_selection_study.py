"""Evolution's replacement rule, measured on known skills (scripts/selection_study.py): the default must let newborn
children take hold and raise the population's true skill at least as much as the old mu - 3 sigma rule, which
ranked every child (inheriting a widened sigma) weakest at its first evolution."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from populora.training.config import EvolutionConfig  # noqa: E402
from selection_study import Rule, simulate, study  # noqa: E402


def test_a_child_that_is_as_good_as_the_strongest_member_is_not_replaced_first_by_the_default_rule():
    default = EvolutionConfig()
    new, old = study([Rule(default.conservative_k, default.sigma_widen), Rule(3.0, 1.5)], seeds=40, steps=20,
                     games_per_pair=1, every=1)
    assert new["child_first_survival"] > 0.4 > old["child_first_survival"] + 0.15, (new, old)
    assert new["skill_gain"] > old["skill_gain"], (new, old)
    assert new["hit_rate"] > 0.5  # better than replacing at random in a role of two


def test_selection_beats_chance_and_a_simulation_is_reproducible():
    a, b = simulate(Rule(0.0, 1.5), seed=3), simulate(Rule(0.0, 1.5), seed=3)
    assert a.summary() == b.summary()
    (row,) = study([Rule(0.0, 1.5)], seeds=30, steps=20)
    assert row["hit_rate"] > 0.55 and row["skill_gain"] > 0.5, row
