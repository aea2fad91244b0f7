"""A population resized at a fork (``populora train --fork RUN --step N --set population.students=4``), by named
operators, each change recorded in the lineage:

- **shrink** (``shrink_weakest``): a role's weakest members by the rule evolution replaces by (lowest
  ``mu - evolution.conservative_k * sigma``, ``fork.resize_choices``) leave the population; their adapters are kept
  in the fork's ``adapters/`` (as evolution archives a replaced member's), and ``lineage.json``'s ``removed``
  records each (member, operator, step, rating).
- **grow** (``population.grow``): ``mutation`` adds children of the strongest members of the role (the strongest
  first, then the next, round the role), each made by a mutation operator drawn from ``evolution.operators``'s
  mutations at its strength, with a widened inherited rating, as evolution makes a mutation child; ``init`` adds
  fresh adapters, as at step 0. Each is a lineage event at the fork step (``details.resize``: ``grow``); the
  per-operator statistics of evolution (``operator_stats``) leave them out: no evolution made them.

``fork.resize_preview`` says what both will do before a fork runs (no torch: the UI's fork form shows it).

A single-agent baseline has one adapter and is never resized; no role can be emptied (at least one member each).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import torch

from populora.training.evolve import operators
from populora.training import rating
from populora.training.evolve.evolution import draw_operator
from populora.training.run.fork import resize_choices, role_sizes
from populora.training.evolve.lineage import Lineage, LineageEvent
from populora.training.member import STUDENT, TEACHER, Member, Population

SHRINK = "shrink_weakest"  # the operator name a removal is recorded under


def shrink(population: Population, lineage: Lineage, sizes: dict[str, int], k: float, step: int, checkpoint: Path,
           archive: Path) -> list[dict]:
    """Remove each role's weakest members down to ``sizes`` (before their adapters are loaded): marked not alive,
    their adapter copied from ``checkpoint`` into ``archive``, recorded in ``lineage.removed``. Returns the records."""
    out = []
    for role, (gone, _) in resize_choices(population, sizes, k).items():
        for m in gone:
            src = checkpoint / "adapters" / m.id
            shutil.copytree(src, archive / m.id, dirs_exist_ok=True)
            m.alive, m.adapter_dir = False, str(archive / m.id)
            record = {"member": m.id, "role": role, "operator": SHRINK, "step": step, "mu": m.mu, "sigma": m.sigma,
                      "conservative": m.conservative(k)}
            lineage.removed.append(record)
            out.append(record)
    return out


def grow(population: Population, backend, lineage: Lineage, cfg, step: int, rng: np.random.Generator,
         torch_gen: torch.Generator, run_id: str = "") -> list[dict]:
    """Add members to each role up to the config's sizes by ``population.grow`` (after the adapters are loaded),
    born in the fork ``run_id`` at its fork ``step`` (their lineage events name it: the step alone would place
    them in the parent run). Their ids go on from the population's counters: the fork raises those to its run
    family's first (``platform.family``), so no run of the family used them. Returns one record per new member:
    member, role, operator, parents, step."""
    ec, how, out = cfg.evolution, cfg.population.grow, []
    for role, (_, parents) in resize_choices(population, role_sizes(cfg), ec.conservative_k).items():
        for parent in parents:
            if how == "init":
                child = population.add(Member(population.new_id(role), role, cfg.model.lora_rank, born_step=step))
                backend.add_adapter(child.id, seed=cfg.seed * 1000 + len(population.members))
                details = {"resize": "grow", "init_mu": child.mu, "init_sigma": child.sigma}
            else:
                operator = draw_operator(ec, False, rng)
                strength = ec.strength_of(operator)
                t0 = time.perf_counter()
                state = operators.apply(operator, [backend.adapter_state(parent.id)], None, torch_gen, strength)
                seconds = time.perf_counter() - t0
                mu, sigma = rating.inherit([parent], ec.sigma_widen)
                child = population.add(Member(population.new_id(role), role, parent.rank, parent.generation + 1,
                                              [parent.id], operator, step, mu, sigma))
                backend.add_adapter(child.id)
                backend.set_adapter_state(child.id, state)
                details = {"resize": "grow", "kind": "mutation", "strength": strength, "seconds": seconds, "mu_at_birth": mu,
                           "sigma_at_birth": sigma, "parent_mu_at_birth": parent.mu}
            backend.init_optimizer(child.id, cfg.optim)
            lineage.record(LineageEvent(child.id, child.parents, child.operator, step, child.generation, role,
                                        details=details, run=run_id))
            out.append({"member": child.id, "role": role, "operator": child.operator, "parents": child.parents, "step": step})
    return out


def summary(before: dict[str, int], after: dict[str, int], removed: list[dict], added: list[dict]) -> str:
    """The fork note's part on resizing.

    >>> summary({"teacher": 2, "student": 2}, {"teacher": 3, "student": 1},
    ...         [{"member": "S1", "operator": "shrink_weakest"}], [{"member": "T4", "operator": "gaussian", "parents": ["T0"]}])
    'resized: teachers 2 -> 3 (T4 = gaussian of T0), students 2 -> 1 (S1 removed: shrink_weakest)'
    >>> summary({"teacher": 2, "student": 2}, {"teacher": 2, "student": 2}, [], [])
    ''
    """
    parts = []
    for role in (TEACHER, STUDENT):
        if before[role] == after[role]:
            continue
        what = [f"{a['member']} = {a['operator']}" + (f" of {','.join(a['parents'])}" if a["parents"] else "")
                for a in added if a["member"].startswith(Population.PREFIX[role])]
        what += [f"{r['member']} removed: {r['operator']}" for r in removed if r["member"].startswith(Population.PREFIX[role])]
        parts.append(f"{role}s {before[role]} -> {after[role]} ({', '.join(what)})")
    return "resized: " + ", ".join(parts) if parts else ""
