"""The compute ledger: what every adapter spent each step, measured from the rollouts and the update, not claimed.

Per member run, per step and cumulative: tokens it generated (proposals and answers), completion tokens its
update trained on, and its rollouts. The parent run gets the sums, and the cumulative sums divided by the number
of adapters alive (``compute/per_adapter/*``): the number a population and its baseline must match for a
compute-matched comparison. In-training evaluation's compute has its own ledger (``EvalLedger``,
``compute/eval/*``), so evaluating along the way never changes that number.
"""

from __future__ import annotations

from collections import defaultdict

from populora.platform.store import runlayout as rl
from populora.training.phases.rollout import Rollout

QUANTITIES = rl.COMPUTE_QUANTITIES
STEP, CUMULATIVE, PER_ADAPTER = rl.COMPUTE_STEP, rl.COMPUTE_CUMULATIVE, rl.COMPUTE_PER_ADAPTER  # metric names
EVAL_QUANTITIES, EVAL_STEP, EVAL_CUMULATIVE = rl.EVAL_COMPUTE_QUANTITIES, rl.EVAL_COMPUTE_STEP, rl.EVAL_COMPUTE_CUMULATIVE


def step_compute(rollouts: list[Rollout], train_stats: dict[str, dict]) -> dict[str, dict[str, float]]:
    """{member: {generated_tokens, trained_tokens, rollouts}} of one step.

    >>> r = Rollout("T0", "teacher", "code_o", "t", [1, 2], [3, 4, 5], "")
    >>> step_compute([r, r], {"T0": {"tokens": 6.0}})
    {'T0': {'generated_tokens': 6.0, 'trained_tokens': 6.0, 'rollouts': 2.0}}
    """
    out: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(QUANTITIES, 0.0))
    for r in rollouts:
        out[r.member]["generated_tokens"] += len(r.completion_ids)
        out[r.member]["rollouts"] += 1
    for member, stats in train_stats.items():
        out[member]["trained_tokens"] += float(stats.get("tokens", 0.0))
    return dict(out)


class ComputeLedger:
    """Cumulative compute per member (checkpointed with the run, so a resume keeps counting)."""

    def __init__(self, totals: dict[str, dict[str, float]] | None = None):
        self.totals: dict[str, dict[str, float]] = totals or {}

    def record(self, spent: dict[str, dict[str, float]], alive: list[str], played: list[str] = ()) -> tuple[dict[str, dict], dict]:
        """Add one step; return (member metrics, run metrics). Every member that spent compute, played in the
        step (``played``: alive at its start, replaced since) or is alive now gets its metrics, zeros included, so
        every member run carries the ledger for every step it lived.

        >>> ledger = ComputeLedger()
        >>> members, run = ledger.record({"T0": {"generated_tokens": 10, "trained_tokens": 10, "rollouts": 2}}, ["T0", "S0"])
        >>> members["S0"]["compute/cumulative/rollouts"], run["compute/rollouts"], run["compute/per_adapter/generated_tokens"]
        (0.0, 2.0, 5.0)
        """
        members: dict[str, dict] = {}
        for member in sorted(set(spent) | set(alive) | set(played)):
            step = {q: float(spent.get(member, {}).get(q, 0.0)) for q in QUANTITIES}
            total = self.totals.setdefault(member, dict.fromkeys(QUANTITIES, 0.0))
            for q in QUANTITIES:
                total[q] += step[q]
            members[member] = {**{STEP[q]: step[q] for q in QUANTITIES}, **{CUMULATIVE[q]: total[q] for q in QUANTITIES}}
        run = {}
        for q in QUANTITIES:
            run[STEP[q]] = sum(m[STEP[q]] for m in members.values())
            run[CUMULATIVE[q]] = sum(t[q] for t in self.totals.values())
            run[PER_ADAPTER[q]] = run[CUMULATIVE[q]] / max(1, len(alive))
        return members, run

    def to_dict(self) -> dict:
        return {m: dict(t) for m, t in self.totals.items()}

    @classmethod
    def from_dict(cls, data: dict | None) -> "ComputeLedger":
        return cls({m: dict(t) for m, t in (data or {}).items()})


def add_to_record(record: dict, members: dict[str, dict], run: dict) -> None:
    """Merge the ledger's metrics into a step record (run_log.step_record's layout)."""
    for member, metrics in members.items():
        record["member_metrics"].setdefault(member, {}).update(metrics)
    record["run_metrics"].update(run)


class EvalLedger:
    """In-training evaluation's compute per member (``compute/eval/*``), kept apart from the training ledger: the
    compute-matching of a population and its baseline (``compute/per_adapter/*``) reads training compute only,
    whether or not either run evaluated along the way. Checkpointed with the run.

    >>> ledger = EvalLedger()
    >>> members, run = ledger.record({"S0": {"generated_tokens": 12, "completions": 2}})
    >>> members, run = ledger.record({"S0": {"generated_tokens": 8, "completions": 2}, "S1": {"generated_tokens": 4, "completions": 2}})
    >>> members["S0"]["compute/eval/cumulative/generated_tokens"], run["compute/eval/generated_tokens"], run["compute/eval/cumulative/completions"]
    (20.0, 12.0, 6.0)
    """

    def __init__(self, totals: dict[str, dict[str, float]] | None = None):
        self.totals: dict[str, dict[str, float]] = totals or {}

    def record(self, spent: dict[str, dict[str, float]]) -> tuple[dict[str, dict], dict]:
        """Add one evaluated step; return (member metrics, run metrics) of the members that were evaluated."""
        members: dict[str, dict] = {}
        for member in sorted(spent):
            step = {q: float(spent[member].get(q, 0.0)) for q in EVAL_QUANTITIES}
            total = self.totals.setdefault(member, dict.fromkeys(EVAL_QUANTITIES, 0.0))
            for q in EVAL_QUANTITIES:
                total[q] += step[q]
            members[member] = {**{EVAL_STEP[q]: step[q] for q in EVAL_QUANTITIES},
                               **{EVAL_CUMULATIVE[q]: total[q] for q in EVAL_QUANTITIES}}
        run = {}
        for q in EVAL_QUANTITIES:
            run[EVAL_STEP[q]] = sum(m[EVAL_STEP[q]] for m in members.values())
            run[EVAL_CUMULATIVE[q]] = sum(t[q] for t in self.totals.values())
        return members, run

    def to_dict(self) -> dict:
        return {m: dict(t) for m, t in self.totals.items()}

    @classmethod
    def from_dict(cls, data: dict | None) -> "EvalLedger":
        return cls({m: dict(t) for m, t in (data or {}).items()})
