"""Lineage: who descends from whom. MLflow's one-parent tag cannot hold crossover (two parents), so the full
DAG is kept here and logged as a JSON artifact (and as tags on each member's child run)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class LineageEvent:
    child: str
    parents: list[str]
    operator: str          # init or the operator's name (operators.FAMILY; older runs: mutation | crossover)
    step: int
    generation: int
    role: str
    replaced: str = ""     # the member this child replaced (evolution) or ""
    details: dict = field(default_factory=dict)
    # the run it was born in where its step does not say (``ancestry.birth_run``): a fork's grown members, born at
    # the fork step, in the fork, not in the parent whose checkpoint that step is; "" otherwise
    run: str = ""


class Lineage:
    """``forks``: the runs this run's lineage continues, oldest first, one ``{"run", "step"}`` per fork (a fork of
    a fork: two); members born at or before the last fork's step are the parent runs' members, except those whose
    event names its ``run`` (a fork's resize grew them there, at its fork step)."""

    def __init__(self, events: list[LineageEvent] | None = None, forks: list[dict] | None = None,
                 removed: list[dict] | None = None):
        self.events = list(events or [])
        self.forks = list(forks or [])
        # members a fork's shrink removed (``training.resize``): {"member", "role", "operator", "step", "mu", ...}
        self.removed = list(removed or [])

    def record(self, event: LineageEvent) -> None:
        self.events.append(event)

    def parents(self, member_id: str) -> list[str]:
        return next((e.parents for e in self.events if e.child == member_id), [])

    def children(self, member_id: str) -> list[str]:
        return [e.child for e in self.events if member_id in e.parents]

    def ancestors(self, member_id: str) -> set[str]:
        seen, todo = set(), list(self.parents(member_id))
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += self.parents(m)
        return seen

    def forked(self, run_id: str, step: int) -> None:
        """Record that this lineage continues run ``run_id``'s at its checkpoint ``step``."""
        self.forks.append({"run": run_id, "step": step})

    def dead_before_fork(self) -> set[str]:
        """The members the parent run(s) had replaced by the last fork's step, and those a fork's shrink removed
        there: they never lived in this run.

        >>> lin = Lineage([LineageEvent("T1", ["T0"], "gaussian", 2, 1, "teacher", replaced="T0")])
        >>> lin.forked("abc", 2); sorted(lin.dead_before_fork())
        ['T0']
        """
        if not self.forks:
            return set()
        at = self.forks[-1]["step"]
        return ({e.replaced for e in self.events if e.replaced and e.step <= at}
                | {r["member"] for r in self.removed if r["step"] <= at})

    def to_dict(self) -> dict:
        nodes = sorted({e.child for e in self.events})
        edges = [{"parent": p, "child": e.child, "operator": e.operator, "step": e.step} for e in self.events for p in e.parents]
        return {"events": [asdict(e) for e in self.events], "nodes": nodes, "edges": edges, "forks": list(self.forks),
                "removed": list(self.removed)}

    @classmethod
    def from_dict(cls, data: dict) -> "Lineage":
        return cls([LineageEvent(**e) for e in data["events"]], data.get("forks"), data.get("removed"))
