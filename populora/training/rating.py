"""TrueSkill ratings of members: the environment, one zero-sum teacher-vs-student game, the win probability
matchmaking samples by, the conservative score evolution ranks by, and the rating a child inherits.

Ratings are (mu, sigma) pairs; every function here takes anything with ``mu`` and ``sigma`` (a ``Member``, a
``trueskill.Rating``) or plain floats, and returns new values: the caller stores them.
"""

from __future__ import annotations

import math

import trueskill

# Every game is one rollout (see ``play``), so no game is ever drawn: a draw probability above 0 would only widen
# the draw margin, making wins and losses move ratings less than they should.
ENV = trueskill.TrueSkill(draw_probability=0.0)
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


def play(student, teacher, student_won: bool) -> tuple[Rating, Rating]:
    """New (student, teacher) ratings after one zero-sum game: one rollout of the student on the teacher's task,
    won by the student if its answer is correct and by the teacher otherwise.

    Why one game per rollout and not one per task: a task solved in k of n rollouts is k wins and n - k losses,
    so every rollout moves mu, and "half solved" is a win and a loss, not a draw. Rated per task, "half solved"
    had to be a draw, which TrueSkill reads as "these two are equal": mu stays put while sigma shrinks (at
    draw_probability 0.05 one draw takes sigma from 8.3 to 6.5). With 2 rollouts draws were most outcomes, mu
    hardly moved, and evolution's mu - k*sigma ranked members by how much they had played. Calibrating
    draw_probability to the observed draw rate barely helps (a draw still shrinks sigma to 6.5-6.6 for any rate
    from 0.05 to 0.7) and keeps the "equal" reading; per-rollout games need no calibration. Rollouts are
    exchangeable, so rating them in sampling order is unbiased (the two orders of a win and a loss mirror each
    other). Sigma still shrinks with every game, as it should with evidence; every teacher is rated on each task it
    wrote (invalid ones as forfeits, see ``scoring.update_ratings``).

    >>> s, t = play(new(), new(), True)
    >>> s.mu > MU > t.mu and s.sigma < SIGMA
    True
    >>> s, t = play(new(), new(), False)
    >>> s.mu < MU < t.mu
    True
    >>> round((s.mu - MU) + (t.mu - MU), 9)  # equal sigmas: what one wins the other loses
    0.0
    """
    s, t = new(student.mu, student.sigma), new(teacher.mu, teacher.sigma)
    if student_won:
        return trueskill.rate_1vs1(s, t, env=ENV)
    t, s = trueskill.rate_1vs1(t, s, env=ENV)
    return s, t


PAR = Rating(MU, SIGMA)  # the opponent an invalid task is forfeited to: a new member's rating, never updated


def forfeit(teacher) -> Rating:
    """The teacher's new rating after forfeiting one game (its task was invalid) to ``PAR``.

    Why a fixed par opponent and not the matched student: the student did nothing, so the forfeit must not
    depend on how the student fared in this step's games. Played against the student, a forfeit rated after the
    teacher had just beaten that student in every rollout was a loss to a far weaker player, the largest surprise
    TrueSkill knows: it cost more than all the wins had gained, and in the 2T2S demo every teacher's mu sank
    below 25 whatever it proposed. Against par, a forfeit costs what losing to a new member costs. Only the
    teacher moves.

    >>> t = forfeit(new())
    >>> t.mu < MU and t.sigma < SIGMA
    True
    >>> round(forfeit(new(40.0, 2.0)).mu, 1) < 40.0 and forfeit(new(40.0, 2.0)).mu > forfeit(new()).mu
    True
    """
    t = new(teacher.mu, teacher.sigma)
    return trueskill.rate_1vs1(PAR, t, env=ENV)[1]


def inherit(parents: list, widen: float, weights: list[float] | None = None) -> tuple[float, float]:
    """(mu, sigma) of a child: its parents' mu averaged with ``weights`` (default equal; a crossover passes the
    share each parent has in the child's weights), their largest sigma widened (it is a new player), capped at a
    new member's sigma.

    >>> inherit([new(30.0, 2.0), new(20.0, 4.0)], 1.5)
    (25.0, 6.0)
    >>> inherit([new(30.0, 2.0), new(20.0, 4.0)], 1.5, [0.75, 0.25])
    (27.5, 6.0)
    >>> inherit([new(30.0, 8.0)], 1.5)[1] == SIGMA
    True
    """
    weights = weights or [1.0] * len(parents)
    mu = sum(w * p.mu for w, p in zip(weights, parents)) / sum(weights)
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
