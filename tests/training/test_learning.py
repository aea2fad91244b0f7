"""The learn/ diagnostics (training/measures/learning.py) and their monitors (no learning signal, generator out
of sync), against references: a group has no signal exactly when TRR++ (``task_relative_advantages``, the
function the update uses) gives every rollout in it advantage 0; shares and spreads by brute force."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.training.measures import learning, monitors
from populora.training.phases.advantages import task_relative_advantages
from populora.training.phases.rollout import Rollout
from populora.training.run import run_log

REWARDS = st.sampled_from([-1.0, -0.5, 0.0, 0.25, 1.0])   # few values: ties and flat groups are common
rows = st.lists(st.tuples(REWARDS, st.sampled_from("abc"), st.integers(1, 6), st.sampled_from(["T0", "S0", "S1"])),
                min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(rows=rows)
def test_a_group_is_flat_exactly_when_trr_gives_it_no_gradient(rows):
    rewards, groups, lengths, _ = zip(*rows)
    adv = task_relative_advantages(list(rewards), list(groups), list(lengths))
    flat = learning.flat_groups(rewards, groups, lengths)
    for g, is_flat in flat.items():
        assert is_flat == all(a == 0 for a, gg in zip(adv, groups) if gg == g), g
    want = sum(len({r for r, gg in zip(rewards, groups) if gg == g}) == 1 for g in set(groups)) / len(set(groups))
    assert learning.no_signal_share(rewards, groups, lengths) == want


@settings(max_examples=200, deadline=None)
@given(rows=rows)
def test_step_metrics_per_member_and_run_by_brute_force(rows):
    rewards, groups, lengths, members = (list(x) for x in zip(*rows))
    adv = list(task_relative_advantages(rewards, groups, lengths))
    run, per = learning.step_metrics(members, rewards, adv, groups, lengths, {}, groups, rewards)
    flat = {g: len({r for r, gg in zip(rewards, groups) if gg == g}) == 1 for g in groups}
    assert run["learn/no_signal_rollouts"] == sum(flat[g] for g in groups) / len(groups)
    assert math.isclose(run["learn/adv_std"], float(np.std(adv)), rel_tol=1e-12, abs_tol=1e-15)
    for m in set(members):
        mine = [i for i, mm in enumerate(members) if mm == m]
        assert per[m]["learn/no_signal_share"] == sum(flat[groups[i]] for i in mine) / len(mine)
        assert math.isclose(per[m]["learn/adv_abs_mean"], sum(abs(adv[i]) for i in mine) / len(mine),
                            rel_tol=1e-12, abs_tol=1e-15)
    answered = {t for t in groups if groups.count(t) > 1}
    want = (sum(len({r for r, t in zip(rewards, groups) if t == task}) == 1 for task in answered) / len(answered)
            if answered else None)
    assert run.get("learn/flat_task_share") == want


def test_edges_one_rollout_is_a_flat_group_and_nothing_gives_nothing():
    assert learning.no_signal_share([0.3], ["g"]) == 1.0  # a lone rollout: TRR++ gives it advantage 0
    assert learning.no_signal_share([], []) is None and learning.flat_task_share([], []) is None
    assert learning.spread([]) == {}
    assert run_log.learn_metrics(None, [], {}, "population") == ({}, {})


def test_the_mismatch_pools_members_by_their_compared_tokens_and_takes_the_max_deviation():
    stats = {"A": {"mismatch_k3": 0.1, "mismatch_tokens": 30.0, "mismatch_rollouts": 3.0, "mismatch_max_abs": 0.5,
                   "mismatch_ppl_ratio": 1.2, "rollout_corrected": 0.0, "entropy": 2.0, "grad_norm": 0.4},
             "B": {"mismatch_k3": 0.4, "mismatch_tokens": 10.0, "mismatch_rollouts": 1.0, "mismatch_max_abs": 0.9,
                   "mismatch_ppl_ratio": 1.0, "rollout_corrected": 0.5, "entropy": 1.0},
             "C": {"entropy": 3.0}}  # torch generation: nothing compared, not a false 0
    run, per = learning.step_metrics(["A", "B", "C"], [1.0, 0.0, 1.0], [1.0, -1.0, 0.0], ["g", "g", "h"], [3, 3, 3], stats)
    assert math.isclose(run["learn/mismatch_k3"], (0.1 * 30 + 0.4 * 10) / 40)
    assert run["learn/mismatch_max_abs"] == 0.9 and math.isclose(run["learn/mismatch_ppl_ratio"], (1.2 * 3 + 1.0) / 4)
    assert math.isclose(run["learn/rollout_corrected"], 5 / 40)
    assert per["A"]["learn/grad_norm"] == 0.4 and per["C"]["learn/entropy"] == 3.0 and "learn/mismatch_k3" not in per["C"]


def test_the_run_log_records_learn_metrics_for_the_rollouts_the_update_trained_on():
    def r(member, role, kind, reward, adv):
        return Rollout(member, role, kind, "t", [1], [2, 3], "", reward=reward, advantage=adv)
    trained = [r("S0", "student", "code_o", 1.0, 1.0), r("S0", "student", "code_o", 0.0, -1.0),
               r("T0", "teacher", "code_o", 0.5, 0.0), r("T0", "teacher", "code_o", 0.5, 0.0)]
    run, per = run_log.learn_metrics(trained, [], {"S0": {"clip_frac": 0.1}}, "population")
    assert run["learn/no_signal_share"] == 0.5 and per["T0"]["learn/no_signal_share"] == 1.0
    assert per["S0"]["learn/no_signal_share"] == 0.0 and per["S0"]["learn/clip_frac"] == 0.1


def test_no_signal_fires_only_when_each_of_the_last_steps_is_mostly_flat():
    k = monitors.NO_SIGNAL_STEPS
    assert monitors.no_signal([1.0] * (k - 1)).fired is None
    assert monitors.no_signal([0.0] + [0.9] * k).fired is True
    assert monitors.no_signal([0.9] * k + [monitors.NO_SIGNAL_SHARE]).fired is False  # "most": above the share
    assert monitors.no_signal([0.9] * (k - 1) + [None, 0.9]).fired is True  # a step that trained nothing is skipped


def test_out_of_sync_judges_the_last_measured_steps_against_the_threshold():
    k, t = monitors.OUT_OF_SYNC_STEPS, monitors.OUT_OF_SYNC_K3
    assert monitors.out_of_sync([None] * 10).fired is None  # torch generation: the generator is the trainer
    assert monitors.out_of_sync([3e-3] * k).fired is False   # the bf16 engine's k3 (scripts/mismatch_figures.py)
    assert monitors.out_of_sync([0.0] + [0.44] * k).fired is True  # samples at T=0.7 scored at T=1
    assert monitors.out_of_sync([t] * k).fired is False and monitors.out_of_sync([t * 1.01] * k).fired is True
    assert set(monitors.MEANINGS) >= {"no_signal", "out_of_sync"}
