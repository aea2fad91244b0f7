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
    """Evolve teachers and students separately; return (dead, child) pairs. The caller gives children fresh optimizers.

    A replaced member's adapter is saved to ``archive / <id>`` first: lineage and evaluation still need it.
    """
    ec = cfg.evolution
    replaced = []
    for role in ("teacher", "student"):
        members = [m for m in population.alive() if m.role == role]
        n = min(len(members) // 2, max(1, round(ec.replace_fraction * len(members)))) if ec.replace_fraction > 0 else 0
        if n == 0:
            continue
        ranked = sorted(members, key=lambda m: m.conservative(ec.conservative_k), reverse=True)
        elite, weakest = ranked[: len(ranked) - n], ranked[len(ranked) - n:]
        for dead in weakest:
            child = _make_child(population, backend, lineage, elite, dead, ec, step, rng, torch_gen)
            dead.adapter_dir = str(backend.save_adapter(dead.id, archive / dead.id))
            backend.remove_adapter(dead.id)
            replaced.append((dead, child))
    return replaced


def _make_child(population, backend, lineage, elite, dead, ec, step, rng, torch_gen) -> Member:
    use_crossover = len(elite) >= 2 and rng.random() < ec.crossover_prob
    parents = list(rng.choice(elite, size=2 if use_crossover else 1, replace=False))
    states = [backend.adapter_state(p.id) for p in parents]
    if use_crossover and ec.crossover == "svd":
        w = rating.fitness_weight(parents[0], parents[1], ec.conservative_k)
        state, operator, details = operators.crossover_svd(states[0], states[1], w), "crossover", {"method": "svd", "weight": w}
    elif use_crossover:
        state, operator, details = operators.crossover_swap(states[0], states[1], torch_gen), "crossover", {"method": "swap"}
    else:
        state, operator, details = operators.mutate(states[0], ec.mutation_scale, torch_gen), "mutation", {"scale": ec.mutation_scale}
    mu, sigma = rating.inherit(parents, ec.sigma_widen)
    child = Member(
        id=population.new_id(dead.role), role=dead.role, rank=dead.rank,
        generation=1 + max(p.generation for p in parents), parents=[p.id for p in parents],
        operator=operator, born_step=step, mu=mu, sigma=sigma,
    )
    backend.add_adapter(child.id)
    backend.set_adapter_state(child.id, state)
    dead.alive = False
    population.add(child)
    lineage.record(LineageEvent(child.id, child.parents, operator, step, child.generation, child.role, dead.id, details))
    return child

