"""Per-operator statistics of evolution, from the lineage and the population (pure, but for ``settle``, which
freezes the rating change of children that die at this step). Names: ``populora.platform.store.operator_table``."""

from __future__ import annotations

import numpy as np

from populora.platform.store import operator_table
from populora.training.evolve.lineage import Lineage
from populora.training.member import Population


def settle(lineage: Lineage, population: Population, step: int) -> None:
    """For each child replaced at ``step``: its rating change against its first parent's over its life, frozen
    now (the parent's rating goes on moving after the child is gone)."""
    dying = {e.replaced for e in lineage.events if e.step == step and e.replaced}
    for e in lineage.events:
        if e.child in dying and "mu_at_birth" in e.details and "rating_change" not in e.details:
            e.details["rating_change"] = rating_change(e, population)


def rating_change(event, population: Population) -> float:
    """(child's mu now - at birth) - (its first parent's mu now - at the child's birth)."""
    child, parent = population[event.child], population[event.parents[0]]
    return (child.mu - event.details["mu_at_birth"]) - (parent.mu - event.details["parent_mu_at_birth"])


def stats(lineage: Lineage, population: Population, step: int) -> dict[str, dict]:
    """Operator -> {children, judged, survival, rating_change, kl, seconds} over every child made up to ``step``
    (``populora.platform.store.operator_table`` says what each is). A child is judged once an evolution after its
    birth has run; it survived if that evolution did not replace it."""
    died = {e.replaced: e.step for e in lineage.events if e.replaced}
    # a fork's grown members (details.resize, training.resize) are no evolution's children: left out of both
    evolved = [e for e in lineage.events if not e.details.get("resize")]
    births = sorted({e.step for e in evolved if e.operator != "init" and e.step > 0})
    by_op: dict[str, list] = {}
    for e in evolved:
        if e.operator != "init" and "kind" in e.details:
            by_op.setdefault(e.operator, []).append(e)
    out = {}
    for op, events in by_op.items():
        judged, survived, changes = 0, 0, []
        for e in events:
            later = [s for s in births if s > e.step]  # evolutions after its birth (every one of them made children)
            death = died.get(e.child)
            if later or death is not None:
                judged += 1
                survived += death is None or (later and death > later[0])
            if step > e.step:
                changes.append(e.details.get("rating_change", None) if death is not None else rating_change(e, population))
        kls = [e.details["kl"] for e in events if "kl" in e.details]
        out[op] = {"children": len(events), "judged": judged, "survival": survived / judged if judged else None,
                   "rating_change": _mean([c for c in changes if c is not None]), "kl": _mean(kls),
                   "seconds": _mean([e.details["seconds"] for e in events])}
    return out


def metrics(lineage: Lineage, population: Population, step: int) -> dict[str, float]:
    """``stats`` as run metrics, ``evolution/<operator>/<stat>`` (absent values left out)."""
    return {operator_table.key(op, k): float(v) for op, row in stats(lineage, population, step).items()
            for k, v in row.items() if v is not None}


def _mean(values) -> float | None:
    return float(np.mean(values)) if values else None
