"""Pure functions of the method: rewards, advantages, PFSP matchmaking, curriculum metrics."""

import numpy as np
import pytest

from populora.training.phases.advantages import task_relative_advantages
from populora.training.config import RewardConfig
from populora.training.measures.curriculum import program_metrics, structure_key
from populora.training.phases.matchmaking import match, pfsp_weights, win_probability
from populora.training.member import Member
from populora.training.phases.rewards import student_reward, teacher_reward


def test_teacher_reward_prefers_hard_but_solvable():
    cfg = RewardConfig()
    rewards = [teacher_reward(True, r, cfg) for r in (0.0, 0.125, 0.5, 0.875, 1.0)]
    assert rewards == [0.0, 0.875, 0.5, 0.125, 0.0]
    assert teacher_reward(False, None, cfg) == -1.0
    azr = RewardConfig(teacher_trivial_or_impossible=-0.5)  # AZR's code, not its paper
    assert teacher_reward(True, 1.0, azr) == -0.5


def test_student_reward_penalises_format_errors():
    cfg = RewardConfig(student_wrong=-0.5)
    assert [student_reward(True, True, cfg), student_reward(True, False, cfg), student_reward(False, False, cfg)] == [1.0, -0.5, -1.0]


def test_advantages_are_whitened_per_role_and_kind():
    rewards = [1.0, 0.0, 0.0, 0.0, 0.5, 0.9, 0.9]
    groups = [("student", "code_o")] * 4 + [("teacher", "code_o")] + [("teacher", "code_i")] * 2
    adv = task_relative_advantages(rewards, groups)
    s = adv[:4]
    assert abs(s.mean()) < 1e-6 and abs(s.std(ddof=1) - 1) < 1e-3  # AZR's whitening: Bessel's correction
    assert adv[0] > 0 > adv[1]
    assert adv[4] == 0.0 and list(adv[5:]) == [0.0, 0.0]  # a group with no spread carries no signal


def test_advantages_weight_tokens():
    # Token-level whitening: a long sequence counts more in its group's mean.
    adv = task_relative_advantages([1.0, 0.0], [("s", "k")] * 2, lengths=[9, 1])
    assert adv[0] > 0 > adv[1] and abs(adv[1]) > abs(adv[0])


def test_win_probability_and_pfsp():
    strong, weak = Member("a", "student", 8, mu=35.0, sigma=2.0), Member("b", "teacher", 8, mu=15.0, sigma=2.0)
    assert win_probability(strong, weak) > 0.9
    assert win_probability(strong, weak) + win_probability(weak, strong) == pytest.approx(1.0)
    w_even = pfsp_weights(np.array([0.5, 0.95]), "even")
    w_hard = pfsp_weights(np.array([0.2, 0.8]), "hard")
    assert w_even[0] > w_even[1] and w_hard[0] > w_hard[1]
    assert pfsp_weights(np.array([0.3, 0.9]), "uniform").tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="unknown PFSP"):
        pfsp_weights(np.array([0.5]), "nope")


def test_match_covers_every_teacher_and_favours_even_opponents():
    teachers = [Member("T0", "teacher", 8, mu=25.0, sigma=1.0), Member("T1", "teacher", 8, mu=45.0, sigma=1.0),
                Member("T2", "teacher", 8, mu=5.0, sigma=1.0)]
    students = [Member(f"S{i}", "student", 8, mu=25.0, sigma=1.0) for i in range(40)]
    pairs = match(teachers, students, 1, "even", 2.0, np.random.default_rng(0))
    assert all(pairs[t.id] for t in teachers)  # nobody left without a solve rate
    assert len(pairs["T0"]) > len(pairs["T1"]) and len(pairs["T0"]) > len(pairs["T2"])
    hard = match(teachers, students, 1, "hard", 2.0, np.random.default_rng(0))
    assert len(hard["T1"]) > len(hard["T2"])  # 'hard' sends students to the strongest teacher


def test_program_metrics_grow_with_complexity():
    simple = program_metrics("def f(a):\n    return a")
    richer = program_metrics("def f(xs):\n    out = []\n    for x in xs:\n        if x % 2:\n            out.append(x * x)\n    return out")
    for key in ("ast_depth", "cyclomatic", "loc", "variables"):
        assert richer[key] > simple[key], key
    assert simple == {"ast_depth": 4.0, "cyclomatic": 1.0, "loc": 2.0, "variables": 1.0, "dead_code": 0.0, "ignores_input": 0.0}


def test_structure_key_abstracts_names_and_constants_only():
    a = structure_key("def f(a):\n    return a * 2")
    assert a == structure_key("def f(n):\n    return n * 7")
    assert a != structure_key("def f(a):\n    return a + 2")
