"""Evaluation results, typed, and the one population summary: what the report, a sweep's statistics, the verdict,
in-training evaluation and the Compare page read.

``Results.from_dict`` is the one loader of a results.json (``results.build``'s layout): every fallback for files
written by older versions lives there (targets without a kind are members, ``alive`` as a string or missing,
a baseline run evaluated before runs knew their kind, samples files written on another machine), so no caller
guesses. Targets are named by their member id (T0, S1), "baseline (B0)" or "base model"; display labels
("weakest member (S0)", "T2 (retired)") are made by whoever displays them, from the ids here.

``population_summary`` returns member ids: the population mean, the weakest and the best member (cross-fitted
on held-out halves of the problems when per-problem tables are given, ``selection.py``; else by ``rank``, biased),
the members tied with them, and whether the pick was cross-fitted. Ties go to the member listed first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from populora.evaluation.harness import benchmarks
from populora.evaluation.statistics import selection
from populora.evaluation.per_problem import problem_scores
from populora.evaluation.targets import BASE, BASELINE, MEMBER
ENDS = ("weakest", "best")
__all__ = ["BASE", "BASELINE", "ENDS", "MEMBER", "BenchmarkScore", "Results", "Summary", "TargetInfo", "overall",
           "population_mean", "population_summary"]


# ====================================================================== typed results
@dataclass(frozen=True)
class TargetInfo:
    """One evaluated adapter: its id, kind (member | baseline | base), whether it is in the final population, and
    everything else results.json holds on it (mlflow_run, adapter_dir, role, compute tokens, ...)."""
    id: str
    kind: str = MEMBER
    alive: bool = True
    info: dict = field(default_factory=dict)

    @property
    def role(self) -> str | None:
        """teacher | student for a member (its ``role`` tag, else its id's T / S prefix), else None."""
        if self.kind != MEMBER:
            return None
        return self.info.get("role") or {"T": "teacher", "S": "student"}.get(self.id[:1])


@dataclass(frozen=True)
class BenchmarkScore:
    """One target's result on one benchmark: its primary score, n, the samples file (per-problem verdicts), and
    every metric results.json holds (``entry``)."""
    score: float | None
    n: int | None = None
    samples_file: str | None = None
    entry: dict = field(default_factory=dict)


@dataclass
class Results:
    """A results.json, typed: targets by id, {target: {benchmark: BenchmarkScore}}, the run's config."""
    targets: dict[str, TargetInfo]
    scores: dict[str, dict[str, BenchmarkScore]]
    config: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)  # the dict it was read from
    _tables: dict | None = field(default=None, repr=False, compare=False)  # read once: ``tables``

    @classmethod
    def of(cls, results: Results | dict) -> Results:
        """``results`` itself, or read from a results.json dict (``from_dict``)."""
        return results if isinstance(results, Results) else cls.from_dict(results)

    @classmethod
    def from_dict(cls, data: dict) -> Results:
        """The one loader of results.json, older layouts included: a target missing from ``targets`` or
        without a kind is a member; ``alive`` may be "true"/"false" strings (MLflow tags) or missing (alive).

        >>> r = Results.from_dict({"results": {"T0": {"gsm8k": {"score": 0.5}}, "S0": {}},
        ...                        "targets": {"S0": {"kind": "member", "alive": "false"}}})
        >>> r.targets["T0"].kind, r.targets["S0"].alive, r.score_table(["T0"])
        ('member', False, {'T0': {'gsm8k': 0.5}})
        """
        given = data.get("targets") or {}
        targets = {}
        for label in list(data.get("results", {})) + [t for t in given if t not in data.get("results", {})]:
            info = dict(given.get(label) or {})
            kind = info.pop("kind", None) or MEMBER
            alive = str(info.pop("alive", "true")).lower() != "false"
            targets[label] = TargetInfo(label, kind, alive, info)
        scores = {label: {b: BenchmarkScore(e.get("score"), e.get("n"), e.get("samples_file"), e)
                          for b, e in by.items()} for label, by in data.get("results", {}).items()}
        return cls(targets, scores, data.get("config") or {}, data)

    def of_kind(self, kind: str) -> list[str]:
        """Ids of the scored targets of ``kind``, in results.json's order."""
        return [t for t in self.scores if self.targets[t].kind == kind]

    def own_baseline(self) -> str | None:
        """The one adapter of a baseline run evaluated on its own: its target of kind baseline, or of kind member
        in results made before runs knew their kind (older stores); None when there is none."""
        listed = self.raw.get("targets") or {}
        return next((t for t in listed if t in self.scores and (listed[t] or {}).get("kind") in (BASELINE, MEMBER)), None)

    def final_members(self, among=None) -> list[str]:
        """The members (of ``among``, default all scored) alive at the end of training; all of them when none is
        marked alive (the summary rows describe the final population, the paper's comparison)."""
        members = [m for m in (self.scores if among is None else among)
                   if self.targets.get(m, TargetInfo(m)).kind == MEMBER]
        return [m for m in members if self.targets.get(m, TargetInfo(m)).alive] or members

    def score_table(self, labels=None) -> dict[str, dict[str, float]]:
        """{target: {benchmark: primary score}} of ``labels`` (default all scored targets)."""
        return {t: {b: s.score for b, s in self.scores[t].items()}
                for t in (self.scores if labels is None else labels) if t in self.scores}

    def samples_paths(self) -> dict[str, dict[str, Path]]:
        """{target: {benchmark: samples file}} of the samples files on this machine (files written on another
        machine, or by versions that wrote none, are left out)."""
        return {t: {b: Path(s.samples_file) for b, s in by.items() if s.samples_file and Path(s.samples_file).is_file()}
                for t, by in self.scores.items()}

    def tables(self) -> dict[str, selection.Table]:
        """{target: {benchmark: {problem: score}}} from the samples files on disk (``per_problem``), read once."""
        if self._tables is None:
            self._tables = {t: {b: problem_scores(p) for b, p in by.items()} for t, by in self.samples_paths().items()}
        return self._tables


# ====================================================================== the population summary
@dataclass
class Summary:
    """The population's mean and its weakest / best member, by member id (display labels are the caller's)."""
    mean: dict[str, float]                 # {key: mean over the members that have it}
    picks: dict[str, list[str]]            # {"weakest" | "best": the member(s) the row is made of}; {} = none ranked
    ties: dict[str, list[str]]             # {"weakest" | "best": other members equal to the pick (at ``places``)}
    scores: dict[str, dict[str, float]]    # {"weakest" | "best": {key: score}} of the pick (held-out when cross-fit)
    cross_fitted: bool = False
    selections: dict[str, selection.Selection] = field(default_factory=dict)  # per-problem tables of the picks

    @property
    def weakest(self) -> str | None:
        return self.picks["weakest"][0] if self.picks else None

    @property
    def best(self) -> str | None:
        return self.picks["best"][0] if self.picks else None


def population_mean(per: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean of each key over the members that have it (None and NaN left out): {member: {key: value}} -> {key: mean}.

    >>> population_mean({"T0": {"gsm8k": 0.5, "aime24": 0.1}, "S0": {"gsm8k": 0.25}})
    {'gsm8k': 0.375, 'aime24': 0.1}
    """
    keys = list(dict.fromkeys(k for scores in per.values() for k in scores))
    mean = {k: _mean([scores.get(k) for scores in per.values()]) for k in keys}
    return {k: v for k, v in mean.items() if v is not None}


def overall(scores: dict[str, float | None]) -> float | None:
    """The unweighted mean over the benchmarks scored (the report's "overall"); None when none was.

    >>> overall({"gsm8k": 0.5, "mbpp_plus": 0.25, "not_a_benchmark": 1.0})
    0.375
    """
    return _mean([scores.get(n) for n in benchmarks.BENCHMARKS])


def population_summary(per: dict[str, dict[str, float]], rank: dict[str, float | None] | None = None,
                       tables: dict[str, selection.Table] | None = None, exclude=frozenset(),
                       places: int | None = None) -> Summary:
    """``per``: {member: {key: score}} in the order ties are broken (the first listed wins). Mean over every
    member; weakest / best cross-fitted when ``tables`` (per-problem scores) cover every member's scored
    benchmarks and have problems to split, else by ``rank`` ({member: value}; default: each member's overall
    score), members in ``exclude`` or without a rank left out (biased: chosen on the problems they are scored on).
    ``ties``: members whose rank equals the pick's (rounded to ``places`` decimals when given).

    >>> s = population_summary({"T0": {"gsm8k": 0.5}, "T1": {"gsm8k": 0.5}, "S0": {"gsm8k": 0.25}, "S1": {"gsm8k": 0.25}})
    >>> s.mean, s.picks, s.ties, s.cross_fitted
    ({'gsm8k': 0.375}, {'weakest': ['S0'], 'best': ['T0']}, {'weakest': ['S1'], 'best': ['T1']}, False)
    >>> population_summary({"S3": {}}, rank={"S3": 19.0}, exclude={"S3"}).picks
    {}
    """
    summary = Summary(population_mean(per), {}, {}, {})
    members = list(per)
    if tables is not None and members and all(tables.get(m) and set(tables[m]) >= set(per[m]) for m in members):
        try:
            picks = [selection.cross_fit({m: tables[m] for m in members}, w) for w in ENDS]
        except ValueError:  # too few problems to split, or members on different problems: the biased pick
            picks = []
        if picks:
            summary.cross_fitted = True
            for p in picks:
                summary.selections[p.which], summary.picks[p.which], summary.ties[p.which] = p, p.members, []
                summary.scores[p.which] = {b: float(np.mean(list(ps.values()))) for b, ps in p.scores.items()}
            return summary
    rank = {m: overall(per[m]) for m in members} if rank is None else rank
    ranked = {m: rank[m] for m in members if m not in exclude and _number(rank.get(m))}
    if not ranked:
        return summary
    for which, choose in (("weakest", min), ("best", max)):
        m = choose(ranked, key=ranked.get)  # min / max keep the first of equals
        key = (lambda v: round(v, places)) if places is not None else (lambda v: v)
        summary.picks[which] = [m]
        summary.ties[which] = sorted(o for o, v in ranked.items() if o != m and key(v) == key(ranked[m]))
        summary.scores[which] = per[m]
    return summary


def _number(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _mean(values) -> float | None:
    xs = [v for v in values if v is not None]
    return float(np.mean(xs)) if xs else None
