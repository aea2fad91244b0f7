"""Evolution: within each role, the weakest members (by mu - k*sigma) are replaced by children of the strongest,
made in LoRA weight space (mutation or crossover), same rank, inheriting a widened rating and a lineage record."""

from __future__ import annotations

import numpy as np
import torch

from populora.training import operators, rating
from populora.training.lineage import Lineage, LineageEvent
from populora.training.member import Member, Population


def evolve(population: Population, backend, lineage: Lineage, cfg, step: int, rng: np.random.Generator,
           torch_gen: torch.Generator, archive) -> list[tuple[Member, Member]]:
    """Evolve teachers and students separately; return (dead, child) pairs. Each child starts with a fresh
    optimizer (its parents' Adam moments belong to other weights).

    A replaced member's adapter is saved to ``archive / <id>`` first: lineage and evaluation still need it.
    """
    ec = cfg.evolution
    replaced = []
    for role in ("teacher", "student"):
        members = [m for m in population.alive() if m.role == role]
        n = replace_count(len(members), ec.replace_fraction)
        if n == 0:
            continue
        ranked = sorted(members, key=lambda m: m.conservative(ec.conservative_k), reverse=True)
        elite, weakest = ranked[: len(ranked) - n], ranked[len(ranked) - n:]
        for dead in weakest:
            child, state = _make_child(population, backend, lineage, elite, members, dead, ec, step, rng, torch_gen)
            # the dead member leaves before the child arrives: its slot is reused, so the batched multi-LoRA
            # backend never grows its stacked adapters and AdamW moments (2x at the first evolution otherwise)
            dead.adapter_dir = str(backend.save_adapter(dead.id, archive / dead.id))
            backend.remove_adapter(dead.id)
            backend.add_adapter(child.id)
            backend.set_adapter_state(child.id, state)
            backend.init_optimizer(child.id, cfg.optim.lr, cfg.optim.weight_decay)
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


def pick_parents(elite: list[Member], members: list[Member], crossover: bool, rng: np.random.Generator) -> list[Member]:
    """One parent from the elite; for a crossover a second one, from the rest of the elite when it has two or
    more members, else from the whole role (the member being replaced included): in a role of two the elite is
    one member, and crossover would otherwise never happen. ``crossover_weights`` keeps the stronger parent's
    share the larger, so a weak partner adds variation without dragging the child down."""
    first = elite[int(rng.integers(len(elite)))]
    if not crossover:
        return [first]
    partners = [m for m in (elite if len(elite) >= 2 else members) if m is not first]
    return [first, partners[int(rng.integers(len(partners)))]]


def crossover_weights(a: Member, b: Member, k: float) -> tuple[float, float]:
    """Shares of parents a and b in a crossover child: the softmax of their mu - k*sigma (``rating.fitness_weight``)."""
    w = rating.fitness_weight(a, b, k)
    return w, 1.0 - w


def _make_child(population, backend, lineage, elite, members, dead, ec, step, rng, torch_gen):
    """(child, its LoRA state): the child is in the population and lineage; its adapter is the caller's to add."""
    use_crossover = len(members) >= 2 and rng.random() < ec.crossover_prob
    parents = pick_parents(elite, members, use_crossover, rng)
    states = [backend.adapter_state(p.id) for p in parents]
    weights = None
    if use_crossover:
        weights = crossover_weights(parents[0], parents[1], ec.conservative_k)
        if ec.crossover == "svd":
            state = operators.crossover_svd(states[0], states[1], weights[0])
        else:
            state = operators.crossover_swap(states[0], states[1], torch_gen, weights[0])
        operator, details = "crossover", {"method": ec.crossover, "weight": weights[0]}
    else:
        state, operator, details = operators.mutate(states[0], ec.mutation_scale, torch_gen), "mutation", {"scale": ec.mutation_scale}
    mu, sigma = rating.inherit(parents, ec.sigma_widen, weights)
    child = Member(
        id=population.new_id(dead.role), role=dead.role, rank=dead.rank,
        generation=1 + max(p.generation for p in parents), parents=[p.id for p in parents],
        operator=operator, born_step=step, mu=mu, sigma=sigma,
    )
    dead.alive = False
    population.add(child)
    lineage.record(LineageEvent(child.id, child.parents, operator, step, child.generation, child.role, dead.id, details))
    return child, state
