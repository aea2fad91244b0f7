"""The compute-matched baseline rule (training/baseline.py) against the hand-made presets and `populora plan`'s
per-adapter accounting: the presets were written (and measured with the ledger) to be compute-matched, so the
rule must give their numbers."""

import pytest

from populora.platform import config as config_io
from populora.training.baseline import matched_baseline
from populora.training.config import TrainConfig
from populora.training.workload import make_plan
from conftest import ROOT

PAIRS = [("smoke", "baseline"), ("arms-race-cpu", "arms-race-cpu-baseline"),
         ("paper-1t1s", "paper-baseline"), ("paper-4t4s", "paper-baseline"), ("paper-4t8s", "paper-baseline")]


def _load(name: str, *overrides: str) -> TrainConfig:
    return config_io.load(TrainConfig, ROOT / "configs" / f"{name}.yaml", list(overrides))


def _get(cfg: TrainConfig, path: str):
    section, name = path.split(".")
    return getattr(getattr(cfg, section), name)


@pytest.mark.parametrize("population, preset", PAIRS)
def test_rule_gives_the_hand_made_baseline_presets(population, preset):
    derived, hand = matched_baseline(_load(population)), _load(preset)
    assert derived.population.single_agent and derived.evolution.every == 0
    for path in ("tasks.tasks_per_teacher", "tasks.answers_per_task", "solver.data", "solver.batch_per_kind",
                 "tasks.max_new_tokens_propose", "tasks.max_new_tokens_solve"):
        assert _get(derived, path) == _get(hand, path), path
    per_task = lambda c: c.tasks.answers_per_task or c.tasks.rollouts  # noqa: E731 - what the loop answers per task
    assert per_task(derived) == per_task(hand)


@pytest.mark.parametrize("population, overrides", [
    ("smoke", ()), ("paper-4t4s", ()), ("paper-4t8s", ()),
    ("smoke", ("population.teachers=3", "population.students=5", "matchmaking.teachers_per_student=3")),
    ("smoke", ("population.teachers=1", "population.students=3", "matchmaking.teachers_per_student=1")),
])
def test_plan_per_adapter_tokens_match(population, overrides):
    """`populora plan` on the population and on its derived baseline: per-adapter generated and trained tokens per
    step within 10% (exact where the per-adapter rows are whole numbers); the naive "same config +
    single_agent" baseline of smoke.yaml is off by far more."""
    cfg = _load(population, *overrides)
    pop, base = make_plan(cfg)["per_adapter"], make_plan(matched_baseline(cfg))["per_adapter"]
    naive = make_plan(_load(population, *overrides, "population.single_agent=true"))["per_adapter"]
    for key in ("generated_tokens", "trained_tokens"):
        assert base[key] / pop[key] == pytest.approx(1.0, abs=0.10), key
    if population == "smoke" and not overrides:  # the measured 2x of issue 31: the rule is what fixes it
        assert naive["generated_tokens"] / pop["generated_tokens"] > 1.3


def test_a_baseline_is_its_own_baseline():
    hand = _load("baseline")
    assert matched_baseline(hand).model_dump() == hand.model_dump()
