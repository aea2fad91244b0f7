"""TrueSkill ratings of members: the environment, one zero-sum teacher-vs-student game, the win probability
matchmaking samples by, the conservative score evolution ranks by, and the rating a child inherits.

Ratings are (mu, sigma) pairs; every function here takes anything with ``mu`` and ``sigma`` (a ``Member``, a
``trueskill.Rating``) or plain floats, and returns new values: the caller stores them.
"""

from __future__ import annotations

import math

import trueskill

# Draws are rare: an outcome is "student solved the task in most rollouts" or not.
ENV = trueskill.TrueSkill(draw_probability=0.05)
MU, SIGMA, BETA = ENV.mu, ENV.sigma, ENV.beta  # 25, 25/3, 25/6: a new member's rating and the skill-gap scale

Rating = trueskill.Rating


def new(mu: float = MU, sigma: float = SIGMA) -> Rating:
    return ENV.create_rating(mu, sigma)


def conservative(mu: float, sigma: float, k: float) -> float:
    """Skill we are confident of: mu - k * sigma (TrueSkill's leaderboard score for k = 3).

    >>> conservative(25.0, 25 / 3, 3.0)
    0.0
    >>> conservative(30.0, 2.0, 1.5)
    27.0
    """
    return mu - k * sigma


def win_probability(a, b) -> float:
    """P(a beats b): Phi((mu_a - mu_b) / sqrt(2 beta^2 + sigma_a^2 + sigma_b^2)).

    >>> round(win_probability(new(), new()), 3)
    0.5
    >>> round(win_probability(new(30.0, 1.0), new(20.0, 1.0)), 3)
    0.951
    """
    denom = math.sqrt(2 * BETA ** 2 + a.sigma ** 2 + b.sigma ** 2)
    return float(ENV.cdf((a.mu - b.mu) / denom))


def play(student, teacher, score: float) -> tuple[Rating, Rating]:
    """New (student, teacher) ratings after one zero-sum game: ``score`` is the fraction of its rollouts the
    student solved; it wins above 1/2, loses below, draws at exactly 1/2, and the teacher gets the opposite.

    >>> s, t = play(new(), new(), 1.0)
    >>> s.mu > MU > t.mu and s.sigma < SIGMA
    True
    >>> s, t = play(new(), new(), 0.0)
    >>> s.mu < MU < t.mu
    True
    >>> s, t = play(new(), new(), 0.5)
    >>> round(s.mu, 6) == round(t.mu, 6) == MU
    True
    """
    s, t = new(student.mu, student.sigma), new(teacher.mu, teacher.sigma)
    if score == 0.5:
        return trueskill.rate_1vs1(s, t, drawn=True, env=ENV)
    if score > 0.5:
        return trueskill.rate_1vs1(s, t, env=ENV)
    t, s = trueskill.rate_1vs1(t, s, env=ENV)
    return s, t


def inherit(parents: list, widen: float) -> tuple[float, float]:
    """(mu, sigma) of a child: its parents' mean mu, their largest sigma widened (it is a new player), capped at
    a new member's sigma.

    >>> inherit([new(30.0, 2.0), new(20.0, 4.0)], 1.5)
    (25.0, 6.0)
    >>> inherit([new(30.0, 8.0)], 1.5)[1] == SIGMA
    True
    """
    mu = sum(p.mu for p in parents) / len(parents)
    return float(mu), float(min(SIGMA, max(p.sigma for p in parents) * widen))


def fitness_weight(a, b, k: float) -> float:
    """Weight of parent ``a`` against ``b`` in a crossover: the softmax of their conservative scores with one
    beta as the temperature, so a parent one beta better weighs e times more.

    >>> round(fitness_weight(new(), new(), 3.0), 3)
    0.5
    >>> round(fitness_weight(new(MU + BETA, SIGMA), new(), 0.0), 3)
    0.731
    """
    gap = conservative(b.mu, b.sigma, k) - conservative(a.mu, a.sigma, k)
    return float(1.0 / (1.0 + math.exp(gap / BETA)))
