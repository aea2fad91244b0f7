"""Evolution: within each role, the weakest members (by mu - k*sigma) are replaced by children of the strongest,
made in LoRA weight space (mutation or crossover), same rank, inheriting a widened rating and a lineage record."""

from __future__ import annotations

import time

import numpy as np
import torch

from populora.training.evolve import operators
from populora.training import rating
from populora.training.evolve.lineage import Lineage, LineageEvent
from populora.training.member import Member, Population, ranked


def evolve(population: Population, backend, lineage: Lineage, cfg, step: int, rng: np.random.Generator,
           torch_gen: torch.Generator, archive, distance=None) -> list[tuple[Member, Member]]:
    """Evolve teachers and students separately; return (dead, child) pairs. Each child starts with a fresh
    optimizer (its parents' Adam moments belong to other weights).

    A replaced member's adapter is saved to ``archive / <id>`` first: lineage and evaluation still need it.
    ``distance(parent_id, child_id)``: the functional distance parent -> child (``probe.ProbeKL``), recorded in the
    child's lineage event; None: not measured.
    """
    ec = cfg.evolution
    replaced = []
    for role in ("teacher", "student"):
        members = [m for m in population.alive() if m.role == role]
        n = replace_count(len(members), ec.replace_fraction)
        if n == 0:
            continue
        order = ranked(members, ec.conservative_k)
        elite, weakest = order[: len(order) - n], order[len(order) - n:]
        for dead in weakest:
            child, state, event = _make_child(population, backend, lineage, elite, members, dead, ec, step, rng, torch_gen)
            # the dead member leaves before the child arrives: its slot is reused, so the batched multi-LoRA
            # backend never grows its stacked adapters and AdamW moments (2x at the first evolution otherwise)
            dead.adapter_dir = str(backend.save_adapter(dead.id, archive / dead.id))
            backend.remove_adapter(dead.id)
            backend.add_adapter(child.id)
            backend.set_adapter_state(child.id, state)
            backend.init_optimizer(child.id, cfg.optim)
            if distance is not None:
                event.details["kl"] = float(distance(child.parents[0], child.id))
            replaced.append((dead, child))
    return replaced


def replace_count(size: int, fraction: float) -> int:
    """Members of a role replaced per evolution: ``fraction`` of them, at least one, at most half.

    >>> [replace_count(n, 0.25) for n in (1, 2, 4, 8, 9)]
    [0, 1, 1, 2, 2]
    >>> replace_count(8, 0.0)
    0
    """
    return min(size // 2, max(1, round(fraction * size))) if fraction > 0 else 0


def select(candidates: list[Member], ec, rng: np.random.Generator) -> Member:
    """One parent from ``candidates`` by ``evolution.selection``: truncation (uniform: the candidates are what
    truncation kept), tournament (the fittest of ``tournament_size`` drawn without replacement) or FUSS
    (fitness-uniform selection, Hutter 2002: a fitness drawn uniformly between the lowest and the highest, the
    member nearest to it, so rare fitness levels are picked as often as crowded ones)."""
    fit = [m.conservative(ec.conservative_k) for m in candidates]
    if ec.selection == "tournament":
        drawn = rng.choice(len(candidates), size=min(ec.tournament_size, len(candidates)), replace=False)
        return candidates[max(drawn, key=lambda i: fit[i])]
    if ec.selection == "fuss":
        target = rng.uniform(min(fit), max(fit))
        gaps = np.abs(np.array(fit) - target)
        return candidates[int(rng.choice(np.flatnonzero(gaps == gaps.min())))]
    return candidates[int(rng.integers(len(candidates)))]


def pick_parents(elite: list[Member], members: list[Member], operator: str, ec, rng: np.random.Generator) -> list[Member]:
    """One parent from the elite (the members this evolution keeps), drawn by ``select``; a crossover's partner
    from the rest of the elite when it has two or more members, else from the whole role (the member being
    replaced included): in a role of two the elite is one member, and crossover would otherwise never happen.
    xes takes the first parent and the fittest others of that pool, up to ``xes_parents``. Parents are returned
    fittest first: ``crossover_weights`` keeps the stronger parent's share the larger, and extrapolation goes
    past the first."""
    first = select(elite, ec, rng)
    if operators.FAMILY[operator].kind == "mutation":
        return [first]
    partners = [m for m in (elite if len(elite) >= 2 else members) if m is not first]
    if operator == "xes":
        chosen = [first, *sorted(partners, key=lambda m: m.conservative(ec.conservative_k), reverse=True)[: ec.xes_parents - 1]]
    else:
        chosen = [first, select(partners, ec, rng)]
    return sorted(chosen, key=lambda m: m.conservative(ec.conservative_k), reverse=True)


def crossover_weights(parents: list[Member], operator: str, k: float) -> list[float]:
    """Shares of the parents in a crossover child: for two, the softmax of their mu - k*sigma
    (``rating.fitness_weight``); xes: the softmax of their z-scored mu - k*sigma (``operators.fitness_shares``)."""
    if operator == "xes":
        return operators.fitness_shares([p.conservative(k) for p in parents])
    w = rating.fitness_weight(parents[0], parents[1], k)
    return [w, 1.0 - w]


def draw_operator(ec, can_cross: bool, rng: np.random.Generator) -> str:
    """A crossover with probability ``crossover_prob`` (when the role has two members), else a mutation; the
    operator by the kind's weights in ``evolution.operators``."""
    mix = ec.mix("crossover" if can_cross and rng.random() < ec.crossover_prob else "mutation")
    names, weights = list(mix), np.array(list(mix.values()), dtype=float)
    return names[int(rng.choice(len(names), p=weights / weights.sum()))]


def _make_child(population, backend, lineage, elite, members, dead, ec, step, rng, torch_gen):
    """(child, its LoRA state, its lineage event): the child is in the population and lineage; its adapter is
    the caller's to add."""
    operator = draw_operator(ec, len(members) >= 2, rng)
    parents = pick_parents(elite, members, operator, ec, rng)
    states = [backend.adapter_state(p.id) for p in parents]
    op = operators.FAMILY[operator]
    weights = crossover_weights(parents, operator, ec.conservative_k) if op.kind == "crossover" else None
    strength = ec.strength_of(operator)
    t0 = time.perf_counter()
    state = operators.apply(operator, states, weights, torch_gen, strength)
    seconds = time.perf_counter() - t0
    mu, sigma = rating.inherit(parents, ec.sigma_widen, weights)
    child = Member(
        id=population.new_id(dead.role), role=dead.role, rank=dead.rank,
        generation=1 + max(p.generation for p in parents), parents=[p.id for p in parents],
        operator=operator, born_step=step, mu=mu, sigma=sigma,
    )
    details = {"kind": op.kind, "strength": strength, "seconds": seconds, "mu_at_birth": mu, "sigma_at_birth": sigma,
               "parent_mu_at_birth": parents[0].mu}
    if weights is not None:
        details.update(weights=weights, weight=weights[0])
    dead.alive = False
    population.add(child)
    event = LineageEvent(child.id, child.parents, operator, step, child.generation, child.role, dead.id, details)
    lineage.record(event)
    return child, state, event
