"""Each member's checkpoints as MLflow 3 LoggedModels: which models a checkpoint adds and what their parents are.

One model per alive member and checkpoint step (the weights that checkpoint holds), and one per replaced member at
its death (the weights evolution archived), so every evaluated or exported adapter has a model id. A model's parents
are models too, so the lineage reads as models in MLflow's own UI:

- ``trained``: the member's previous model (the same adapter, trained on since);
- a birth (``<operator>``, an evolution child's first model): the models of its lineage parents holding the weights
  it was made from (a parent's model at the birth step when one was written then, else its newest before it);
- ``init``: an initial member's first model, no parents.

A fork's state holds the parent run's newest model per member (``latest``), so the fork's first models have the
parent run's models at the fork step as parents. ``plan`` is pure (the trainer's population and lineage in, the
models to create out); ``training.run_log.RunLog.log_models`` creates them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TRAINED, INIT, DIED = "trained", "init", "died"


@dataclass
class PlannedModel:
    member: str
    step: int                  # the step whose weights it holds
    origin: str                # TRAINED | INIT | DIED | the birth's operator
    parents: list[str] = field(default_factory=list)  # parent models' ids (resolved by ``plan``'s caller in order)
    adapter_dir: str = ""
    parent_members: list[str] = field(default_factory=list)  # the lineage parents the birth's models stand for


def plan(step: int, alive: list[dict], dead: dict[str, dict], latest: dict[str, dict], births: dict[str, dict]) -> list[PlannedModel]:
    """The models checkpoint ``step`` adds, in creation order: members with a model already first (their new model
    continues it), then first models, oldest member first (a birth's parents may be models created just before it).

    ``alive``: [{"id", "adapter_dir"}] (the checkpoint's members); ``dead``: member -> {"step": death step,
    "adapter_dir"}; ``latest``: member -> {"id", "step"} (the newest model of each member so far); ``births``:
    member -> {"parents": [member ids], "operator", "step"} (lineage). A member whose newest model is of this step
    already (a fork's first checkpoint: the parent run's models) gets none. Parent ids of a birth are resolved
    later (``resolve``), since they may be models of this very checkpoint.

    >>> p = plan(2, [{"id": "S0", "adapter_dir": "a"}, {"id": "S2", "adapter_dir": "c"}], {"S1": {"step": 2, "adapter_dir": "b"}},
    ...          {"S0": {"id": "m0", "step": 1}, "S1": {"id": "m1", "step": 1}},
    ...          {"S2": {"parents": ["S0", "S1"], "operator": "ties", "step": 2}})
    >>> [(m.member, m.step, m.origin, m.parents, m.parent_members) for m in p]
    [('S0', 2, 'trained', ['m0'], []), ('S1', 2, 'died', ['m1'], []), ('S2', 2, 'ties', [], ['S0', 'S1'])]
    """
    out, later = [], []
    todo = [(m["id"], step, m.get("adapter_dir", ""), False) for m in alive]
    todo += [(m, d["step"], d.get("adapter_dir", ""), True) for m, d in dead.items()]
    for member, at, adapter, died in todo:
        prev = latest.get(member)
        if prev is not None and prev["step"] >= at:
            continue
        if prev is not None:
            out.append(PlannedModel(member, at, DIED if died else TRAINED, [prev["id"]], adapter))
            continue
        birth = births.get(member) or {}
        parents = list(birth.get("parents") or [])
        # born and replaced between two checkpoints: still one model, at its death, standing for its birth
        later.append(PlannedModel(member, at, birth.get("operator", INIT) if parents else INIT, [], adapter, parents))
    # older members first: a crossover's partner may be a member replaced at the child's birth, itself without a
    # model before its death (born and replaced between two checkpoints)
    return out + sorted(later, key=lambda m: (births.get(m.member) or {}).get("step", 0))


def resolve(model: PlannedModel, born_step: int, before: dict[str, dict], now: dict[str, dict]) -> list[str]:
    """A birth's parent model ids: each lineage parent's model of this checkpoint (``now``) if it holds the weights
    of the birth step or earlier, else its newest before this checkpoint (``before``); a parent with no model at
    all (a run from before models were logged) is left out.

    >>> resolve(PlannedModel("S2", 3, "ties", parent_members=["S0", "S1"]), 3,
    ...         {"S0": {"id": "a", "step": 2}, "S1": {"id": "b", "step": 2}}, {"S0": {"id": "c", "step": 3}, "S1": {"id": "b", "step": 2}})
    ['c', 'b']
    >>> resolve(PlannedModel("S2", 4, "gaussian", parent_members=["S0"]), 3, {"S0": {"id": "a", "step": 2}}, {"S0": {"id": "c", "step": 4}})
    ['a']
    """
    out = []
    for p in model.parent_members:
        pick = now.get(p) if now.get(p) and now[p]["step"] <= born_step else before.get(p)
        if pick:
            out.append(pick["id"])
    return out
