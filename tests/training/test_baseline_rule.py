"""The compute-matched baseline rule (training/compute/baseline.py) against the hand-made presets and `populora plan`'s
per-adapter accounting: the presets were written (and measured with the ledger) to be compute-matched, so the
rule must give their numbers."""

import pytest

from populora.platform import config as config_io
from populora.training.compute.baseline import matched_baseline
from populora.training.config import TrainConfig
from populora.training.compute.workload import make_plan
from conftest import ROOT, trained_runs

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


@pytest.mark.slow
def test_train_with_baseline_runs_both_linked_and_compute_matched(tmp_path):
    """`populora train --baseline`: the population, then its baseline by the rule, linked both ways; the ledgers
    (compute/per_adapter/*, measured from the rollouts) agree within issue 31's 0.8-1.25 where the naive baseline
    of smoke.yaml measured 2.0x. The command runs in this process (``trained_runs``): the runs are the subject."""
    from mlflow import MlflowClient

    from populora.platform.store import runlayout as rl

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ids = trained_runs(tmp_path, uri, "--config", str(ROOT / "configs" / "smoke.yaml"), "--baseline", "--quiet",
                       "--set", "steps=1", "--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
                       "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
                       "--set", f"output_dir={tmp_path / 'runs'}")
    assert len(ids) == 2, ids
    client = MlflowClient(uri)
    pop, base = (client.get_run(i) for i in ids)
    assert (pop.data.tags[rl.KIND], base.data.tags[rl.KIND]) == (rl.POPULATION, rl.BASELINE)
    assert pop.data.tags[rl.BASELINE_RUN] == ids[1] and base.data.tags[rl.BASELINE_OF] == ids[0]
    for q in ("generated_tokens", "trained_tokens"):
        ratio = base.data.metrics[f"compute/per_adapter/{q}"] / pop.data.metrics[f"compute/per_adapter/{q}"]
        assert 0.8 <= ratio <= 1.25, (q, ratio)
