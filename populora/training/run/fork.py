"""Forks: a new run that continues another run's checkpoint N with changed settings.

A fork starts from the checkpoint's full state (adapters, optimizer moments, ratings, buffers, RNG, lineage) and
trains steps N+1 ... ``steps`` under its own MLflow run, tagged with its origin (``populora.forked_from``,
``populora.fork_step``). Its lineage is the parent's at step N plus a fork record, so a fork of a fork carries
the whole chain. This module owns which settings may change at a fork (``FROZEN``: the ones the checkpoint's
state was built with; ``population.teachers`` / ``.students`` may change, by ``training.resize``'s operators) and
the fork's config; ``Trainer.fork`` does the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from populora.platform import config as config_io
from populora.platform.store import runlayout as rl
from populora.platform.config import ConfigError
from populora.training.config import TrainConfig
from populora.training.member import STUDENT, TEACHER, Member, Population, ranked

# setting (a dotted key, or a section prefix ending in ".") -> why a fork cannot change it
FROZEN = {
    "model.base": "the checkpoint's adapters were trained on this base; they do not transfer to another",
    "model.gguf_file": "the checkpoint's adapters were trained on this base; they do not transfer to another",
    "model.tiny_random": "the checkpoint's adapters were trained on this base; they do not transfer to another",
    "model.dtype": "the checkpoint's adapters and optimizer moments were trained in this dtype",
    "model.lora_rank": "the checkpoint's adapters and optimizer moments have this rank",
    "model.lora_alpha": "the checkpoint's adapters were trained with this scale (alpha / rank)",
    "model.target_modules": "the checkpoint's adapters hold these modules",
    "population.single_agent": "a single-agent baseline and a population have different members",
    "tasks.kinds": "the checkpoint's task buffers hold these kinds",
}


def frozen_reason(key: str) -> str | None:
    """Why setting ``key`` cannot change at a fork, or None if it may.

    >>> frozen_reason("model.lora_rank")
    "the checkpoint's adapters and optimizer moments have this rank"
    >>> frozen_reason("optim.lr") is None
    True
    """
    return FROZEN.get(key)


FORK_MARK = " · fork of "


def fork_name(parent_name: str, parent_run: str, step: int) -> str:
    """A fork's default run name: the parent's, saying it is a fork of which run at which step (a fork of a fork
    names its nearest parent only: the chain is on the Runs page and in the lineage).

    >>> fork_name("smoke", "e22bd58e0c1f", 3)
    'smoke · fork of e22bd58e @3'
    >>> fork_name("smoke · fork of e22bd58e @3", "77aa01bc99", 5)
    'smoke · fork of 77aa01bc @5'
    """
    return f"{parent_name.split(FORK_MARK)[0]}{FORK_MARK}{parent_run[:8]} @{step}"


def fork_config(parent: TrainConfig, overrides: list[str], step: int, parent_run: str = "") -> TrainConfig:
    """The fork's config: the parent's config at checkpoint ``step`` with ``key=value`` overrides, validated like
    any config (unknown keys, bounds); a frozen setting changed, or ``steps`` not beyond ``step``, is refused
    with the reason. The fork is not the other half of the parent's population/baseline pair (``pair`` cleared
    unless set). Its ``name``: ``fork_name`` of ``parent_run`` (given), unless an override sets it."""
    data = parent.model_dump(mode="json")
    data["pair"] = None
    if parent_run:
        data["name"] = fork_name(parent.name, parent_run, step)
    for text in overrides:
        path, value = config_io.parse_override(text)
        config_io.apply_override(data, path, value, TrainConfig)
    for role in ("teachers", "students"):  # before the bounds' generic message: say what a resize can do
        size, was = data["population"][role], getattr(parent.population, role)
        if size != was and parent.population.single_agent:
            raise ConfigError(f"population.{role}: {was} -> {size} refused: this run is a single-agent baseline "
                              "(one adapter playing both roles); its population cannot be resized")
        if isinstance(size, int) and size < 1:
            raise ConfigError(f"population.{role}={size} refused: a fork's shrink removes a role's weakest members "
                              f"but keeps at least one; set population.{role} between 1 and {was} to shrink")
    cfg = config_io.build(TrainConfig, data, source="fork config")
    before, after = config_io.flatten(parent), config_io.flatten(cfg)
    refused = [f"{key}: {before.get(key)} -> {after.get(key)} refused: {reason}"
               for key, reason in FROZEN.items() if before.get(key) != after.get(key)]
    if refused:
        raise ConfigError("a fork continues the checkpoint's adapters, so these settings cannot change:\n  "
                          + "\n  ".join(refused))
    if cfg.steps <= step:
        raise ConfigError(f"steps={cfg.steps}: a fork at step {step} trains steps {step + 1} onwards; "
                          f"set steps above {step}, e.g. steps={step + max(1, parent.steps - step)} (--set on the command line)")
    return cfg


def role_sizes(cfg: TrainConfig) -> dict[str, int]:
    """{teacher: population.teachers, student: population.students}: the sizes a fork resizes to."""
    return {TEACHER: cfg.population.teachers, STUDENT: cfg.population.students}


def resize_choices(population: Population, sizes: dict[str, int], k: float) -> dict[str, tuple[list[Member], list[Member]]]:
    """Per role of ``sizes``: (the members a shrink to its size removes: the weakest by ``mu - k * sigma``; the
    parent of each member a grow to its size adds, in order: the strongest first, round the role). The one rule
    ``resize.shrink``, ``resize.grow`` and ``resize_preview`` follow.

    >>> pop = Population([Member("S0", STUDENT, 8, mu=24.0), Member("S1", STUDENT, 8, mu=18.0)])
    >>> {r: ([m.id for m in gone], [m.id for m in parents]) for r, (gone, parents) in resize_choices(pop, {STUDENT: 5}, 0.0).items()}
    {'student': ([], ['S0', 'S1', 'S0'])}
    >>> [m.id for m in resize_choices(pop, {STUDENT: 1}, 0.0)[STUDENT][0]]
    ['S1']
    """
    out = {}
    for role, size in sizes.items():
        members = ranked(population.alive(role), k)
        out[role] = (members[size:], [members[i % len(members)] for i in range(size - len(members))])
    return out


def resize_preview(population: Population, before: dict[str, int], after: dict[str, int], k: float, how: str) -> list[str]:
    """What a fork's resize will do, said before it runs (the fork form shows it): per role whose size changes,
    the members ``resize.shrink`` removes (the weakest, ranked as it ranks them) or those ``resize.grow`` adds (their ids, and
    for ``mutation`` the parent each child is made from, paired as it pairs them; the operator itself is drawn
    when the fork runs). ``population``: the checkpoint's; ``k``: the fork's ``evolution.conservative_k``;
    ``how``: its ``population.grow``.

    >>> pop = Population([Member("T0", TEACHER, 8, mu=20.0, sigma=2.0), Member("T1", TEACHER, 8, mu=25.0, sigma=2.0),
    ...                   Member("S0", STUDENT, 8, mu=24.0, sigma=1.0), Member("S1", STUDENT, 8, mu=18.0, sigma=1.0)],
    ...                  {"T": 2, "S": 2})
    >>> for line in resize_preview(pop, {"teacher": 2, "student": 2}, {"teacher": 5, "student": 1}, 0.0, "mutation"):
    ...     print(line)
    teachers 2 -> 5: adds T2, T3, T4, mutation children of T1, T0, T1 (the strongest first, round the role; each one's operator is drawn from evolution.operators' mutations when the fork runs)
    students 2 -> 1: removes S1 (the weakest by mu - 0*sigma: 18.00); its adapter is kept in the fork's adapters/
    >>> resize_preview(pop, {"teacher": 2, "student": 2}, {"teacher": 1, "student": 2}, 1.0, "init")
    ["teachers 2 -> 1: removes T0 (the weakest by mu - 1*sigma: 18.00); its adapter is kept in the fork's adapters/"]
    >>> pop.add(Member("T2", TEACHER, 8, mu=10.0, sigma=1.0)).id
    'T2'
    >>> resize_preview(pop, {"teacher": 3, "student": 2}, {"teacher": 1, "student": 2}, 0.0, "init")
    ["teachers 3 -> 1: removes T0 (20.00), T2 (10.00) (the weakest by mu - 0*sigma); their adapters are kept in the fork's adapters/"]
    >>> resize_preview(pop, {"teacher": 2, "student": 2}, {"teacher": 2, "student": 3}, 0.0, "init")
    ['students 2 -> 3: adds S2, a fresh adapter (as at step 0)']
    >>> resize_preview(pop, {"teacher": 2, "student": 2}, {"teacher": 2, "student": 2}, 0.0, "init")
    []
    """
    lines, choices = [], resize_choices(population, after, k)
    for role in (TEACHER, STUDENT):
        was, size = before[role], after[role]
        if was == size:
            continue
        gone, parents = choices[role]
        head = f"{role}s {was} -> {size}"
        if size < was:
            names = ", ".join(f"{m.id} ({m.conservative(k):.2f})" if len(gone) > 1 else m.id for m in gone)
            score = "" if len(gone) > 1 else f": {gone[0].conservative(k):.2f}"
            lines.append(f"{head}: removes {names} (the weakest by mu - {k:g}*sigma{score}); "
                         f"{'their adapters are' if len(gone) > 1 else 'its adapter is'} kept in the fork's adapters/")
            continue
        prefix = Population.PREFIX[role]
        start = population.next_index.get(prefix, 0)
        ids = ", ".join(f"{prefix}{start + j}" for j in range(len(parents)))
        one = len(parents) == 1
        if how == "init":
            what = "a fresh adapter" if one else "fresh adapters"
            lines.append(f"{head}: adds {ids}, {what} (as at step 0)")
        else:
            what, whose = ("a mutation child of", "its") if one else ("mutation children of", "each one's")
            lines.append(f"{head}: adds {ids}, {what} {', '.join(p.id for p in parents)} (the strongest first, round the "
                         f"role; {whose} operator is drawn from evolution.operators' mutations when the fork runs)")
    return lines


def checkpoint_population(run_dir: Path, step: int) -> Population:
    """The population (members, ratings, id counters) a run's checkpoint ``step`` holds: what a fork of it starts
    from and resizes (``resize_preview`` says how, before the fork runs)."""
    path = rl.checkpoint_dir(run_dir, step) / rl.CHECKPOINT_STATE
    try:
        return Population.from_dict(json.loads(path.read_text())["population"])
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"cannot read the population of checkpoint {path}: {err}") from err


def checkpoint_config(run_dir: Path, step: int) -> TrainConfig:
    """The config a run trained with, as its checkpoint ``step`` holds it; ConfigError if the run dir keeps no
    such checkpoint (naming the ones it keeps). No torch: the UI checks a fork with it before starting the job."""
    path = rl.checkpoint_dir(run_dir, step)
    if not (path / rl.CHECKPOINT_STATE).is_file():
        raise ConfigError(f"no checkpoint of step {step} under {str(run_dir)!r}; {rl.kept_note(run_dir)}")
    return config_io.build(TrainConfig, yaml.safe_load((path / rl.CONFIG_FILE).read_text()), source=f"checkpoint {path}")


def fork_note(parent_run: str, step: int, changed: list[tuple[str, object, object]], resized: str = "") -> str:
    """The fork's MLflow description: where it comes from and what changed (``resized``: ``resize.summary``).

    >>> fork_note("abc", 2, [("optim.lr", "1e-05", "3e-05")])
    'forked from run abc at step 2; changed: optim.lr 1e-05 -> 3e-05'
    >>> fork_note("abc", 2, [])
    'forked from run abc at step 2; no setting changed'
    """
    what = "; changed: " + ", ".join(f"{k} {a} -> {b}" for k, a, b in changed) if changed else "; no setting changed"
    return f"forked from run {parent_run} at step {step}{what}" + (f"; {resized}" if resized else "")
