"""What a league says, from its verdicts: abilities and difficulties on one scale with intervals, teachers'
strength, the teacher x student solve rates, curves over checkpoints, and population vs baseline, paired.

Pure: count matrices and plain records in, one JSON-ready dict out (``summarise``). The league runner
(``training/league.py``) writes it as ``league.json`` and logs it; the League page and ``populora league`` only
show it. The fit and the bootstrap are ``league_fit``'s.

Records: a student is ``{"id", "arm", "run", "step", "member", ...}`` (arm: population | baseline | base; any
other keys, such as the within-run TrueSkill ``mu`` / ``sigma``, are passed through); a teacher the same plus
``proposed`` and ``valid`` (its proposals under the panel's protocol); a task ``{"id", "teacher", "kind"}``
(teacher: a teacher's id, or ``seed`` for the run's seed tasks, which no teacher's strength counts).
"""

from __future__ import annotations

import warnings

import numpy as np

from populora.evaluation.statistics import league_fit as F

POPULATION, BASELINE, BASE = "population", "baseline", "base"


TIE = 1e-6  # a replicate's value this close to 0: a tie with the anchor (identical answers), not a small estimate
TIE_WHY = ("the answers in those replicates were the base model's on the tasks drawn: alike answers, alike ability")


def zero_bound(samples: np.ndarray, lo: float, hi: float, why: str = TIE_WHY) -> str | None:
    """Why an interval stops at 0 (shown as [+0.00, ...]) where it does: a share of the bootstrap replicates sits
    exactly at 0 (an entrant tied with the anchor, the base model, at 0 by construction), at least the tail the
    bound is read at; so the bound is that tie, neither a prior nor a clip. None where no bound is such a tie.

    >>> zero_bound(np.array([0.0] * 10 + [1.0, 2.0] * 45), 0.0, 2.0)
    "bound at 0: a tie, not a prior or a clip: 10% of the bootstrap replicates are exactly 0 (the answers in those replicates were the base model's on the tasks drawn: alike answers, alike ability)"
    >>> zero_bound(np.linspace(-1, 3, 100), -0.9, 2.9) is None
    True
    """
    s = np.asarray(samples, dtype=float)
    s = s[~np.isnan(s)]
    if s.size == 0 or not any(b is not None and abs(b) < 0.005 for b in (lo, hi)):
        return None
    share = float(np.mean(np.abs(s) < TIE))
    if share < (1 - F.CONFIDENCE) / 2:
        return None
    return f"bound at 0: a tie, not a prior or a clip: {share:.0%} of the bootstrap replicates are exactly 0 ({why})"


REFERENCE = "the scale's zero: every ability is read against this student, so it has no interval of its own"


class Contrasts:
    """Variances of the league's reported quantities under the Laplace posterior (``league_fit.covariance``): each
    is a linear contrast of (ability (S), difficulty (I)) against the anchor's ability."""

    def __init__(self, cov: np.ndarray, students: int, anchor: int):
        self.cov, self.S, self.anchor = cov, students, anchor

    def ability(self, members) -> np.ndarray:
        """The mean ability of ``members`` (student indices) minus the anchor's."""
        c = np.zeros(len(self.cov))
        c[list(members)] += 1 / len(members)
        c[self.anchor] -= 1
        return c

    def difficulty(self, tasks) -> np.ndarray:
        """The mean difficulty of ``tasks`` (task indices, repeats allowed) minus the anchor's ability."""
        c = np.zeros(len(self.cov))
        np.add.at(c, self.S + np.asarray(list(tasks), dtype=int), 1 / len(tasks))
        c[self.anchor] -= 1
        return c

    def var(self, c: np.ndarray) -> float:
        return float(c @ self.cov @ c)


def _estimate(point: float, samples: np.ndarray, var: float | None) -> dict:
    """Value and 95% interval: the bootstrap's, widened to the Laplace posterior's (``league_fit.widen``: never a
    zero-width interval); ``note``: why a bound is 0 (``zero_bound``). ``var`` None: the anchor, the scale's zero
    by definition, reported without an interval."""
    if var is None:
        return {"value": _num(point), "ci95": [None, None], "note": REFERENCE}
    lo, hi = F.widen(float(point), *F.interval(samples), var)
    out = {"value": _num(point), "ci95": [_num(lo), _num(hi)]}
    note = zero_bound(samples, lo, hi)
    return out | ({"note": note} if note else {})


def _num(v) -> float | None:
    v = float(v)
    return None if np.isnan(v) else round(v, 4)


def _rate(k: float, n: float) -> float | None:
    return round(float(k) / float(n), 4) if n else None


def summarise(solved, tries, students: list[dict], teachers: list[dict], tasks: list[dict], anchor: str,
              model: str = "rasch", n_boot: int = F.N_BOOT, seed: int = 0) -> dict:
    """The league's results (see the module doc); ``anchor``: the id of the student held at ability 0."""
    k, n = np.asarray(solved, dtype=float), np.asarray(tries, dtype=float)
    ids = [s["id"] for s in students]
    if anchor not in ids:
        raise ValueError(f"anchor {anchor!r} is not a student of the league ({', '.join(ids)})")
    if k.shape != (len(students), len(tasks)):
        raise ValueError(f"verdicts are {k.shape}, but the league has {len(students)} students and {len(tasks)} tasks")
    a = ids.index(anchor)
    point = F.fit(k, n, a, model)
    boot = F.bootstrap(k, n, a, model, n_boot, seed, point)
    con = Contrasts(F.covariance(k, n, point, model), len(students), a)
    t_index = {t["id"]: j for j, t in enumerate(teachers)}
    groups = np.array([t_index.get(t["teacher"], len(teachers)) for t in tasks])  # seed tasks: their own group
    # a teacher's mean over the tasks each replicate drew (a task drawn twice counts twice; bootstrap keeps the
    # mean of a task's copies, which summed over its copies is their sum)
    strength_boot = np.stack([F.group_mean_difficulty(d[items], items, groups, len(teachers) + 1)
                              for d, items in zip(boot.difficulty, boot.items)])
    strength_point = F.group_mean_difficulty(point.difficulty, np.arange(len(tasks)), groups, len(teachers) + 1)

    out = {"model": model, "anchor": anchor, "n_boot": n_boot, "seed": seed, "converged": point.converged,
           "students": [], "teachers": [], "tasks": [], "heatmap": [], "curves": [], "comparisons": []}
    for s, rec in enumerate(students):
        out["students"].append({**rec, "ability": _estimate(point.ability[s], boot.ability[:, s],
                                                            con.var(con.ability([s])) if s != a else None),
                                "solved": int(k[s].sum()), "answers": int(n[s].sum()), "solve_rate": _rate(k[s].sum(), n[s].sum())})
    for j, rec in enumerate(teachers):
        mine = groups == j
        lo, hi = F.wilson(int(rec.get("valid", 0)), int(rec.get("proposed", 0)))
        strength = _estimate(strength_point[j], strength_boot[:, j],
                             con.var(con.difficulty(np.flatnonzero(mine))) if mine.any() else 0.0)
        out["teachers"].append({**rec, "strength": strength, "tasks": int(mine.sum()),
                                "validity_rate": _rate(rec.get("valid", 0), rec.get("proposed", 0)),
                                "validity_ci95": [_num(lo), _num(hi)],
                                "solve_rate": _rate(k[:, mine].sum(), n[:, mine].sum())})
    for i, rec in enumerate(tasks):
        d = _estimate(point.difficulty[i], boot.difficulty[:, i], con.var(con.difficulty([i])))
        out["tasks"].append({**rec, "difficulty": {"value": d["value"], "ci95": d["ci95"]},
                             "solve_rate": _rate(k[:, i].sum(), n[:, i].sum())})
    for j, t in enumerate(list(teachers) + [{"id": "seed"}]):
        mine = groups == j
        if not mine.any():
            continue
        for s, st in enumerate(students):
            out["heatmap"].append({"teacher": t["id"], "student": st["id"], "solve_rate": _rate(k[s, mine].sum(), n[s, mine].sum()),
                                   "answers": int(n[s, mine].sum())})
    teacher_tasks = [np.flatnonzero(groups == j) for j in range(len(teachers))]
    out["curves"] = _curves(students, teachers, point, boot, strength_point, strength_boot, con, teacher_tasks)
    out["comparisons"] = _comparisons(students, teachers, point, boot, strength_point, strength_boot, con, teacher_tasks)
    return out


def _nanmean(values: np.ndarray, axis=None):
    """Mean over what is there: a replicate that drew none of a group's tasks gives NaN, not a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def _group_estimate(members: list[int], point_vals: np.ndarray, boot_vals: np.ndarray) -> tuple[float, np.ndarray]:
    return float(_nanmean(point_vals[members])), _nanmean(boot_vals[:, members], axis=1)


def _contrast(con: Contrasts, side: str, members: list[int], teacher_tasks: list[np.ndarray]) -> np.ndarray:
    """The contrast of a group's mean: students' abilities, or teachers' strengths (each its tasks' mean)."""
    if side == "students":
        return con.ability(members)
    return np.mean([con.difficulty(teacher_tasks[j]) for j in members], axis=0)


def _curves(students, teachers, point, boot, strength_point, strength_boot, con, teacher_tasks) -> list[dict]:
    """Per (run, step): the mean ability of its students and the mean strength of its teachers."""
    out = []
    keys = sorted({(r["run"], r["step"], r["arm"]) for r in students + teachers if r["arm"] != BASE},
                  key=lambda x: (x[0], x[1]))
    for run, step, arm in keys:
        ss = [i for i, r in enumerate(students) if (r["run"], r["step"]) == (run, step)]
        ts = [j for j, r in enumerate(teachers) if (r["run"], r["step"]) == (run, step) and not np.isnan(strength_point[j])]
        row = {"run": run, "step": step, "arm": arm}
        if ss:
            v, b = _group_estimate(ss, point.ability, boot.ability)
            row["student_ability"] = _estimate(v, b, con.var(_contrast(con, "students", ss, teacher_tasks)))
        if ts:
            v, b = _group_estimate(ts, strength_point, strength_boot)
            row["teacher_strength"] = _estimate(v, b, con.var(_contrast(con, "teachers", ts, teacher_tasks)))
        out.append(row)
    return out


def _comparisons(students, teachers, point, boot, strength_point, strength_boot, con, teacher_tasks) -> list[dict]:
    """Population vs baseline, paired (every replicate resamples the same tasks for both): at each step both arms
    have, else the latest of each. Students: mean ability; teachers: mean difficulty of their tasks."""
    def steps(arm):
        return {r["step"] for r in students + teachers if r["arm"] == arm}

    pop, base = steps(POPULATION), steps(BASELINE)
    if not pop or not base:
        return []
    pairs = [(s, s) for s in sorted(pop & base)] or [(max(pop), max(base))]
    out = []
    for sp, sb in pairs:
        for side, rows, pv, bv in (("students", students, point.ability, boot.ability),
                                   ("teachers", teachers, strength_point, strength_boot)):
            p = [i for i, r in enumerate(rows) if r["arm"] == POPULATION and r["step"] == sp and not np.isnan(pv[i])]
            b = [i for i, r in enumerate(rows) if r["arm"] == BASELINE and r["step"] == sb and not np.isnan(pv[i])]
            if not p or not b:
                continue
            delta = float(np.mean(pv[p]) - np.mean(pv[b]))
            samples = _nanmean(bv[:, p], axis=1) - _nanmean(bv[:, b], axis=1)
            c = _contrast(con, side, p, teacher_tasks) - _contrast(con, side, b, teacher_tasks)
            lo, hi = F.widen(delta, *F.interval(samples), con.var(c))
            note = zero_bound(samples, lo, hi, "both arms' answers in those replicates were alike on the tasks drawn")
            out.append({"side": side, "population_step": sp, "baseline_step": sb, "delta": _num(delta),
                        "ci95": [_num(lo), _num(hi)], "population": len(p), "baseline": len(b),
                        "words": words(side, sp, sb, delta, lo, hi) + (f" ({note})" if note else "")})
    return out


def words(side: str, sp: int, sb: int, delta: float, lo: float, hi: float) -> str:
    """The comparison in one sentence.

    >>> words("students", 2, 2, 0.5, 0.1, 0.9)
    "population's students vs the baseline at step 2: +0.50 logits (95% CI +0.10 to +0.90): the population's students solve more of the same panel"
    """
    at = f"step {sp}" if sp == sb else f"step {sp} (population) and {sb} (baseline)"
    what = ("population's students vs the baseline" if side == "students"
            else "population's teachers' tasks vs the baseline's proposals")
    head = f"{what} at {at}: {delta:+.2f} logits (95% CI {lo:+.2f} to {hi:+.2f})"
    if np.isnan(lo) or lo <= 0 <= hi:
        return head + ": the interval includes 0, no difference this panel can tell from noise"
    if side == "students":
        return head + (": the population's students solve more of the same panel" if delta > 0
                       else ": the baseline solves more of the same panel")
    return head + (": the population's teachers write harder tasks for the same solvers" if delta > 0
                   else ": the baseline writes harder tasks for the same solvers")
