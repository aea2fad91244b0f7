"""Per-operator evolution statistics: the config that picks operators, the statistics against a lineage worked out
by hand, and a tiny real run (the CLI, in this process: the run only makes the store checked) that evolves every
step and logs them to MLflow."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import train_in_process

from populora.cli import main
from populora.platform.store import operator_table
from populora.platform.store import runlayout as rl
from populora.platform.config import ConfigError
from populora.training.evolve import operator_stats
from populora.training.config import EvolutionConfig, load_config
from populora.training.evolve.evolution import select
from populora.training.evolve.lineage import Lineage, LineageEvent
from populora.training.member import Member, Population
from populora.training.evolve.operators import CROSSOVERS, FAMILY, MUTATIONS


def test_default_mix_is_every_operator_at_equal_weight_and_old_configs_still_load():
    ec = EvolutionConfig()
    assert ec.mix("mutation") == {n: 1.0 for n in MUTATIONS} and ec.mix("crossover") == {n: 1.0 for n in CROSSOVERS}
    old = EvolutionConfig(crossover="swap", mutation_scale=0.2)  # a checkpoint's config from before the family
    assert old.mix("crossover") == {"component_swap": 1.0} and old.strength_of("gaussian") == 0.2


@pytest.mark.parametrize("override,words", [
    ("evolution.operators.mutations={gausian: 1}", ["gausian", "valid", "gaussian", "svd_noise"]),
    ("evolution.operators.mutations={dare: 1}", ["'dare' is a crossover", "crossovers"]),
    ("evolution.operators.crossovers={xes: -1}", ["xes", ">= 0"]),
    ("evolution.strength={nope: 0.1}", ["nope", "valid", "extrapolate"]),
])
def test_a_bad_operator_name_is_refused_naming_the_valid_ones(override, words):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert all(w in str(err.value) for w in words), str(err.value)


def test_selection_rules_pick_by_fitness():
    ec = EvolutionConfig(selection="tournament", tournament_size=4)
    members = [Member(f"T{i}", "teacher", 4, mu=mu) for i, mu in enumerate((20.0, 30.0, 25.0, 10.0))]
    assert select(members, ec, np.random.default_rng(0)).id == "T1"  # a tournament of all four: the fittest
    fuss = EvolutionConfig(selection="fuss")
    crowded = [Member(f"T{i}", "teacher", 4, mu=mu) for i, mu in enumerate((10.0, 10.1, 10.2, 10.3, 30.0))]
    picks = [select(crowded, fuss, np.random.default_rng(s)).id for s in range(400)]
    # fitness-uniform: the lone fit member is drawn about as often as the four crowded ones together
    assert 0.35 < picks.count("T4") / 400 < 0.65


def _pop_lineage():
    """T0, T1 (init); step 1: T2 = gaussian(T0) replaces T1; step 2: T3 = mask(T0) replaces T2; step 3:
    T4 = clone(T3) replaces T0. Ratings as the members hold them after step 3."""
    pop = Population([Member("T0", "teacher", 4, mu=27.0, alive=False), Member("T1", "teacher", 4, mu=20.0, alive=False),
                      Member("T2", "teacher", 4, mu=24.0, alive=False), Member("T3", "teacher", 4, mu=29.0),
                      Member("T4", "teacher", 4, mu=26.0)])
    lin = Lineage([LineageEvent("T0", [], "init", 0, 0, "teacher"), LineageEvent("T1", [], "init", 0, 0, "teacher")])
    d = lambda mu, pmu, kl: {"kind": "mutation", "mu_at_birth": mu, "parent_mu_at_birth": pmu, "kl": kl, "seconds": 0.5}
    lin.record(LineageEvent("T2", ["T0"], "gaussian", 1, 1, "teacher", "T1", d(25.0, 25.0, 0.02)))
    return pop, lin, d


def test_stats_match_a_lineage_worked_out_by_hand():
    pop, lin, d = _pop_lineage()
    pop["T0"].mu, pop["T2"].mu = 26.0, 24.0  # at step 2, when T2 is replaced
    lin.record(LineageEvent("T3", ["T0"], "mask", 2, 1, "teacher", "T2", d(26.0, 26.0, 0.04)))
    operator_stats.settle(lin, pop, 2)  # T2 dies: (24 - 25) - (26 - 25) = -2, frozen now
    pop["T0"].mu = 27.0
    lin.record(LineageEvent("T4", ["T3"], "clone", 3, 2, "teacher", "T0", d(28.0, 28.0, 0.0)))
    stats = operator_stats.stats(lin, pop, 3)
    assert stats["gaussian"] == {"children": 1, "judged": 1, "survival": 0.0, "rating_change": -2.0, "kl": 0.02, "seconds": 0.5}
    # T3 survived step 3's evolution; it lived: (29 - 26) - (27 - 26) = +2 against T0
    assert stats["mask"] == {"children": 1, "judged": 1, "survival": 1.0, "rating_change": 2.0, "kl": 0.04, "seconds": 0.5}
    # T4 was born at this step: not judged yet, no rating change
    assert stats["clone"]["judged"] == 0 and stats["clone"]["survival"] is None and stats["clone"]["rating_change"] is None
    metrics = operator_stats.metrics(lin, pop, 3)
    assert metrics["evolution/mask/survival"] == 1.0 and "evolution/clone/survival" not in metrics
    assert [r["operator"] for r in operator_table.rows(metrics)] == ["clone", "gaussian", "mask"]


TINY = ["--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
        "--set", "tasks.max_new_tokens_propose=16", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=1", "--set", "tasks.rollouts=1"]


def test_a_tiny_run_evolving_every_step_uses_many_operators_and_logs_their_statistics(mlflow_store, tmp_path, capsys):
    from mlflow import MlflowClient

    assert train_in_process("--config", str(Path(__file__).parents[2] / "configs/smoke.yaml"),
                            "--set", "steps=3", "--set", "evolution.every=1", "--set", "evolution.replace_fraction=0.5",
                            "--set", "population.teachers=4", "--set", "population.students=4",
                            "--set", "evolution.crossover_prob=0.5", "--set", "seed=3", *TINY, "--quiet") == 0
    client = MlflowClient(tracking_uri=mlflow_store)
    exp = client.get_experiment_by_name("populora")
    parent = next(r for r in client.search_runs([exp.experiment_id]) if rl.PARENT not in r.data.tags)
    lineage = json.loads(Path(client.download_artifacts(parent.info.run_id, rl.LINEAGE, str(tmp_path))).read_text())
    born = [e for e in lineage["events"] if e["operator"] != "init"]
    assert len(born) == 3 * 4  # 2 teachers + 2 students replaced at each of 3 steps
    used = {e["operator"] for e in born}
    assert len(used) >= 5 and used <= set(FAMILY)
    assert all(edge["operator"] in FAMILY for edge in lineage["edges"] if edge["operator"] != "init")
    table = {r["operator"]: r for r in operator_table.rows(parent.data.metrics)}
    assert set(table) == used
    for op in used:  # the logged counts are the lineage's, each child's KL measured against its first parent
        mine = [e for e in born if e["operator"] == op]
        assert table[op]["children"] == len(mine)
        assert table[op]["kl"] == pytest.approx(np.mean([e["details"]["kl"] for e in mine]))
        assert table[op]["seconds"] > 0
    kl = {e["child"]: (e["operator"], e["details"]["kl"]) for e in born}
    assert all(abs(v) < 1e-6 for op, v in kl.values() if op == "clone"), kl  # a clone is its parent: KL 0
    assert all(v > -1e-6 for _, v in kl.values()), kl
    # survival, by hand from the lineage: children of steps 1 and 2 were judged at the next step
    died = {e["replaced"]: e["step"] for e in born}
    for op in used:
        judged = [e for e in born if e["operator"] == op and e["step"] < 3]
        if judged:
            assert table[op]["judged"] == len(judged)
            kept = sum(died.get(e["child"]) != e["step"] + 1 for e in judged)
            assert table[op]["survival"] == pytest.approx(kept / len(judged))
    history = client.get_metric_history(parent.info.run_id, operator_table.key(born[0]["operator"], "children"))
    assert [m.step for m in history][0] == born[0]["step"]
    # populora report --run prints the table (it needs no evaluation, which this run does not have)
    capsys.readouterr()
    code = main(["report", "--run", parent.info.run_id])
    report = capsys.readouterr()
    lines = {line.split()[0]: line for line in report.out.splitlines() if line.split() and line.split()[0] in FAMILY}
    assert set(lines) == used and code != 0 and "no evaluation results" in report.err
    for op in used:
        assert lines[op].split()[1] == str(table[op]["children"])
