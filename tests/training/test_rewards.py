"""Reward assignment: AZR code's values by default, the paper's where they differ as config, per rollout."""

import pytest

from populora.training.config import RewardConfig, TrainConfig
from populora.training.phases.rewards import solve_rate, student_reward, teacher_reward
from populora.training.phases.rollout import Rollout
from populora.training.phases.scoring import assign_rewards
from populora.training.tasks import Task


def test_defaults_are_azr_code_values():
    cfg = RewardConfig()
    assert (cfg.student_correct, cfg.student_wrong, cfg.student_format_error) == (1.0, -0.5, -1.0)
    assert (cfg.teacher_invalid, cfg.teacher_trivial_or_impossible) == (-1.0, 0.0)


@pytest.mark.parametrize("parsed,correct,expected", [(True, True, 1.0), (True, False, -0.5), (False, False, -1.0),
                                                     (False, True, -1.0)])  # an unparsed answer is never right
def test_student_reward(parsed, correct, expected):
    assert student_reward(parsed, correct, RewardConfig()) == expected


@pytest.mark.parametrize("rate,expected", [(0.0, 0.0), (0.125, 0.875), (0.5, 0.5), (0.875, 0.125), (1.0, 0.0)])
def test_teacher_reward_is_learnability(rate, expected):
    assert teacher_reward(True, rate, RewardConfig()) == pytest.approx(expected)


def test_teacher_reward_code_variant_and_invalid():
    code = RewardConfig(teacher_trivial_or_impossible=-0.5)  # AZR's code, not its paper
    assert [teacher_reward(True, r, code) for r in (0.0, 0.5, 1.0)] == [-0.5, 0.5, -0.5]
    assert teacher_reward(False, None, code) == -1.0
    assert teacher_reward(False, 0.5, code) == -1.0  # invalid wins over any rate
    assert teacher_reward(True, None, code) == 0.0   # valid but nobody answered: no signal, not "invalid"


def test_solve_rate():
    assert solve_rate([True, False, True, True]) == 0.75 and solve_rate([]) is None


def _rollout(member, role, task_id, answer=None, correct=False):
    return Rollout(member, role, "code_o", task_id, [1], [2, 3], "text", answer=answer, correct=correct)


def test_assign_rewards_per_rollout_and_task():
    tasks = [Task("a", "code_o", "def f(x): return x", valid=True, teacher="T0"),
             Task("b", "code_o", "def f(x): return x", valid=True, teacher="T0"),
             Task("c", "code_o", "", valid=False, teacher="T1"),
             Task("d", "code_o", "def f(x): return x", valid=True, teacher="T1")]
    proposals = [_rollout(t.teacher, "teacher", t.id) for t in tasks]
    answers = [_rollout("S0", "student", "a", "1", True), _rollout("S0", "student", "a", "2", False),
               _rollout("S1", "student", "a", None), _rollout("S1", "student", "a", "1", True),  # a: 2 of 4 solved
               _rollout("S0", "student", "b", "1", True), _rollout("S1", "student", "b", "1", True)]  # b: always
    rates = assign_rewards(tasks, proposals, answers, TrainConfig())
    assert rates == {"a": 0.5, "b": 1.0, "c": None, "d": None}
    assert [a.reward for a in answers] == [1.0, -0.5, -1.0, 1.0, 1.0, 1.0]
    assert [p.reward for p in proposals] == [0.5, 0.0, -1.0, 0.0]
    assert [p.verdict for p in proposals] == ["valid", "valid", "invalid", "valid"]
    cfg = TrainConfig(reward={"teacher_trivial_or_impossible": -0.5, "student_wrong": 0.0})
    assign_rewards(tasks, proposals, answers, cfg)
    assert [p.reward for p in proposals] == [0.5, -0.5, -1.0, 0.0] and answers[1].reward == 0.0


# ---------------------------------------------------------------- the compute ledger
def test_ledger_counts_per_member_and_sums_for_the_run():
    from populora.training.compute.ledger import ComputeLedger, step_compute

    rollouts = [Rollout("T0", "teacher", "code_o", "a", [1], [2] * 5, ""), Rollout("S0", "student", "code_o", "a", [1], [2] * 3, ""),
                Rollout("S0", "student", "code_o", "a", [1], [2] * 4, "")]
    ledger = ComputeLedger()
    members, run = ledger.record(step_compute(rollouts, {"T0": {"tokens": 5.0}, "S0": {"tokens": 7.0}}), ["T0", "S0", "S1"])
    assert members["S0"]["compute/generated_tokens"] == 7 and members["S0"]["compute/rollouts"] == 2
    assert members["S1"]["compute/rollouts"] == 0  # alive but idle: still logged, as zeros
    assert run["compute/generated_tokens"] == 12 and run["compute/trained_tokens"] == 12
    members, run = ComputeLedger.from_dict(ledger.to_dict()).record(step_compute(rollouts[:1], {}), ["T0", "S0", "S1"])
    assert members["T0"]["compute/cumulative/generated_tokens"] == 10 and members["T0"]["compute/trained_tokens"] == 0
    assert run["compute/cumulative/rollouts"] == 4 and run["compute/per_adapter/rollouts"] == pytest.approx(4 / 3)
