"""Rating updates of a step (``scoring.update_ratings``): zero-sum games per rollout, two-sided (unsolved tasks are
teacher wins), no collapsing draws, invalid tasks as forfeits, self-play unrated."""

import pytest

from populora.training import rating
from populora.training.member import BOTH, STUDENT, TEACHER, Member, Population
from populora.training.phases.rollout import Rollout
from populora.training.phases.scoring import update_ratings
from populora.training.tasks import Task


def _population(*ids: str) -> Population:
    role = {"T": TEACHER, "S": STUDENT, "B": BOTH}
    return Population([Member(i, role[i[0]], 8) for i in ids])


def _task(tid: str, teacher: str, valid: bool = True) -> Task:
    return Task(tid, "code_o", "def f(a):\n    return a", input="1", teacher=teacher, valid=valid,
                reason="ok" if valid else "error: NameError")


def _answers(task: Task, student: str, correct: list[bool]) -> list[Rollout]:
    return [Rollout(student, STUDENT, task.kind, task.id, [], [], "", answer="1", correct=c) for c in correct]


def test_every_game_is_zero_sum():
    pop = _population("T0", "S0")
    task = _task("t", "T0")
    games = update_ratings([task], _answers(task, "S0", [True]), pop, {"T0": ["S0"]})
    assert games == 1
    s, t = pop["S0"], pop["T0"]
    assert s.mu > rating.MU > t.mu
    assert (s.mu - rating.MU) == pytest.approx(rating.MU - t.mu)  # equal sigmas: the winner gains what the loser loses
    assert s.sigma == pytest.approx(t.sigma) and s.sigma < rating.SIGMA


def test_one_game_per_rollout():
    pop = _population("T0", "S0", "S1")
    tasks = [_task("a", "T0"), _task("b", "T0")]
    answers = _answers(tasks[0], "S0", [True, False, True]) + _answers(tasks[1], "S1", [False, False])
    assert update_ratings(tasks, answers, pop, {"T0": ["S0", "S1"]}) == 5


def test_a_task_no_student_solved_is_a_teacher_win_unless_the_old_rule_is_asked_for():
    task = _task("t", "T0")
    answers = _answers(task, "S0", [False, False])
    two_sided = _population("T0", "S0")
    assert update_ratings([task], answers, two_sided, {"T0": ["S0"]}) == 2
    assert two_sided["T0"].mu > rating.MU > two_sided["S0"].mu

    one_sided = _population("T0", "S0")
    assert update_ratings([task], answers, one_sided, {"T0": ["S0"]}, rate_unsolved=False) == 0
    assert (one_sided["T0"].mu, one_sided["T0"].sigma) == (rating.MU, rating.SIGMA)


def test_with_one_matched_student_a_teacher_can_climb():
    """Under the one-sided rule a teacher with one student could only draw or lose; now hard tasks win."""
    pop = _population("T0", "S0")
    for step in range(3):
        task = _task(f"t{step}", "T0")
        update_ratings([task], _answers(task, "S0", [False, False]), pop, {"T0": ["S0"]})
    assert pop["T0"].mu > rating.MU + 3 and pop["T0"].conservative(3.0) > pop["S0"].conservative(3.0)


def test_a_half_solved_task_is_a_win_and_a_loss_not_a_draw():
    """No draws (so nothing for TrueSkill to read as "these two are equal"): each rollout moves mu. Rollouts are
    exchangeable, so the order they are rated in is unbiased: the two orders of one win and one loss mirror each
    other and average to no change."""
    assert rating.ENV.draw_probability == 0.0
    teacher_mu = []
    for order in ([True, False], [False, True]):
        pop = _population("T0", "S0")
        task = _task("t", "T0")
        assert update_ratings([task], _answers(task, "S0", order), pop, {"T0": ["S0"]}) == 2
        teacher_mu.append(pop["T0"].mu)
        assert pop["T0"].mu != rating.MU and pop["T0"].sigma < rating.SIGMA
    assert sum(teacher_mu) / 2 == pytest.approx(rating.MU)


@pytest.mark.parametrize("rate_unsolved", [True, False])
def test_a_winning_teacher_outranks_one_that_only_plays_even(rate_unsolved):
    """The old one-sided rule left unsolved tasks unrated, so a teacher whose tasks nobody solved kept a new
    member's rating (mu - 3 sigma = 0) while one playing even games shrank its sigma and survived evolution."""
    pop = _population("T0", "T1", "S0", "S1")
    for step in range(5):
        even, hard = _task(f"a{step}", "T0"), _task(f"b{step}", "T1")
        answers = _answers(even, "S0", [True, False]) + _answers(hard, "S1", [False, False])
        update_ratings([even, hard], answers, pop, {"T0": ["S0"], "T1": ["S1"]}, rate_unsolved=rate_unsolved)
    winning_first = pop["T1"].conservative(3.0) > pop["T0"].conservative(3.0)
    assert winning_first == rate_unsolved


def test_an_invalid_task_is_a_forfeit_only_the_teacher_pays():
    pop = _population("T0", "S0", "S1")
    task = _task("t", "T0", valid=False)
    games = update_ratings([task], [], pop, {"T0": ["S0", "S1"]})
    assert games == 2  # one forfeit per matched student, not one per rollout
    assert pop["T0"].mu < rating.MU and pop["T0"].sigma < rating.SIGMA
    for s in ("S0", "S1"):
        assert (pop[s].mu, pop[s].sigma) == (rating.MU, rating.SIGMA)
    unrated = _population("T0", "S0")
    assert update_ratings([task], [], unrated, {"T0": ["S0"]}, rate_invalid=False) == 0


def test_a_teacher_of_only_invalid_tasks_ranks_below_one_whose_tasks_are_solved_half_the_time():
    pop = _population("T0", "T1", "S0", "S1")
    pairs = {"T0": ["S0"], "T1": ["S1"]}
    for step in range(2):
        invalid = [_task(f"x{step}{j}", "T0", valid=False) for j in range(3)]
        valid = [_task(f"v{step}{j}", "T1") for j in range(3)]
        answers = [a for t in valid for a in _answers(t, "S1", [True, False])]
        update_ratings(invalid + valid, answers, pop, pairs)
        assert pop["T0"].conservative(3.0) < pop["T1"].conservative(3.0)
        assert pop["T0"].mu < pop["T1"].mu


def test_a_forfeit_costs_the_same_whoever_the_student_is():
    """The student did nothing on an invalid task: its rating (here crushed by this step's games, or untouched)
    must not change what the forfeit costs."""
    crushed, fresh = _population("T0", "S0"), _population("T0", "S0")
    crushed["S0"].rating = rating.new(10.0, 3.0)
    for pop in (crushed, fresh):
        update_ratings([_task("x", "T0", valid=False)], [], pop, {"T0": ["S0"]})
    assert crushed["T0"].mu == fresh["T0"].mu < rating.MU


def test_a_teacher_whose_valid_tasks_beat_the_student_climbs_despite_an_invalid_one():
    """The demo's typical step: 3 tasks, 2 valid and answered twice each, 1 of the 4 rollouts solved, 1 task
    invalid. The teacher won 3 of its 4 games and forfeited once: it must end above a new member's mu (before
    the forfeit was charged per rollout against the just-beaten student, it ended near 21.9)."""
    pop = _population("T0", "S0")
    valid = [_task("a", "T0"), _task("b", "T0")]
    answers = _answers(valid[0], "S0", [True, False]) + _answers(valid[1], "S0", [False, False])
    update_ratings(valid + [_task("x", "T0", valid=False)], answers, pop, {"T0": ["S0"]})
    assert pop["T0"].mu > rating.MU > pop["S0"].mu


def test_self_play_is_not_rated():
    pop = _population("B0")
    tasks = [_task("t", "B0"), _task("x", "B0", valid=False)]
    assert update_ratings(tasks, _answers(tasks[0], "B0", [True, False]), pop, {"B0": ["B0"]}) == 0
    assert (pop["B0"].mu, pop["B0"].sigma) == (rating.MU, rating.SIGMA)
