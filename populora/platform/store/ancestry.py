"""A member's whole ancestry as one exportable record: the member and every ancestor up to the base, each with
its parents, operator and strength, birth step, ratings at birth and at death, the run it lived in (a fork's
lineage goes on in the parent runs), its adapter path and evaluation scores; and the settings in force in each run
of the chain. ``populora runs RUN --ancestry MEMBER``, ``populora export`` (beside the adapter) and the Lineage page
write it; ``member_facts`` is what ``populora diff RUN/M RUN/M`` compares.

``record`` is pure (lineage.json's and population.json's dicts in, a dict out); ``read`` gathers its inputs from
the MLflow store (the run layout of ``populora.platform.store.runlayout``).
"""

from __future__ import annotations

from typing import Any

from populora.platform.store import runlayout as rl

VERSION = 2  # of the record's layout (2: scores tied to the run of the adapter shown, scores_by_run)


def birth_run(step: int, forks: list[dict], run_id: str, born_in: str = "") -> str:
    """The run a member born at ``step`` was born in: ``born_in`` where its lineage event names it (a fork's
    grown members: born in the fork at the fork step), else the oldest run of the fork chain whose fork step is
    at or after its birth, else this run.

    >>> birth_run(0, [{"run": "a", "step": 2}, {"run": "b", "step": 4}], "c"), birth_run(3, [{"run": "a", "step": 2}, {"run": "b", "step": 4}], "c")
    ('a', 'b')
    >>> birth_run(5, [{"run": "a", "step": 2}], "c"), birth_run(2, [{"run": "a", "step": 2}], "c", born_in="c")
    ('c', 'c')
    """
    return born_in or next((f["run"] for f in forks if step <= f["step"]), run_id)


def born_in(member: str, lineage: dict, run_id: str) -> str:
    """The run of the fork chain ``member`` of run ``run_id`` was born in (``birth_run`` of its lineage event).

    >>> lin = {"events": [{"child": "S3", "step": 2, "run": "c"}, {"child": "S0", "step": 0}], "forks": [{"run": "a", "step": 2}]}
    >>> born_in("S3", lin, "c"), born_in("S0", lin, "c")
    ('c', 'a')
    """
    event = next((e for e in lineage.get("events", []) if e["child"] == member), {})
    return birth_run(event.get("step", 0), list(lineage.get("forks") or []), run_id, event.get("run") or "")


def member_facts(member: str, lineage: dict, population: list[dict]) -> dict:
    """One member's own facts: role, generation, parents, operator, strength, birth step, whom it replaced,
    ratings at birth and at death (or latest), death step and successor. KeyError if the lineage lacks it."""
    events = lineage.get("events", [])
    event = next((e for e in events if e["child"] == member), None)
    if event is None:
        raise KeyError(f"member {member!r} is not in the run's lineage (members: {', '.join(e['child'] for e in events)})")
    details = event.get("details") or {}
    death = next((e for e in events if e.get("replaced") == member), None)
    # removed by a fork's shrink (training.resize): dead at the fork step, with no successor
    removal = next((r for r in lineage.get("removed") or [] if r["member"] == member), None)
    state = next((m for m in population if m.get("id") == member), {})
    rating = {"mu": state.get("mu"), "sigma": state.get("sigma")}
    return {
        "member": member, "role": event.get("role"), "generation": event.get("generation", 0),
        "parents": list(event.get("parents") or []), "operator": event.get("operator", "init"),
        "strength": details.get("strength"), "born_step": event.get("step", 0), "replaced": event.get("replaced") or None,
        # an evolution child's inherited rating; an initial member's prior (init_*: runs from before it was logged lack it)
        "rating_at_birth": {"mu": details.get("mu_at_birth", details.get("init_mu")),
                            "sigma": details.get("sigma_at_birth", details.get("init_sigma"))},
        "alive": death is None and removal is None and state.get("alive", True),
        "died_step": death["step"] if death else removal["step"] if removal else None,
        "replaced_by": death["child"] if death else None, "removed_by": removal["operator"] if removal else None,
        # population.json keeps a replaced (or removed) member's rating as it was when it was replaced
        "rating_at_death": rating if death or removal else None, "rating_latest": None if death or removal else rating,
        "adapter_dir": state.get("adapter_dir") or None,
    }


def owner(adapter_dir: str | None, run_dirs: dict[str, str] | None) -> str | None:
    """The run of the chain whose run dir holds ``adapter_dir`` (the deepest, should dirs nest), None if none.

    >>> owner("/r/fork/checkpoints/step_000003/adapters/S0", {"parent": "/r/parent", "fork": "/r/fork"})
    'fork'
    >>> owner("/elsewhere/S0", {"parent": "/r/parent"}) is None
    True
    """
    if not adapter_dir:
        return None
    found = [(len(d), r) for r, d in (run_dirs or {}).items()
             if d and (adapter_dir == d or adapter_dir.startswith(d.rstrip("/") + "/"))]
    return max(found)[1] if found else None


def record(member: str, run_id: str, lineage: dict, population: list[dict], settings: dict[str, dict],
           scores: dict[str, dict[str, dict]] | None = None, run_dirs: dict[str, str] | None = None) -> dict:
    """The ancestry record of ``member`` of run ``run_id``: the member first, then its ancestors (nearest first,
    each once), each with the run it was born in; ``runs``: the fork chain, oldest first, with each run's
    settings (``settings``: run id -> flattened config) and run dir. ``scores``: run -> member -> {eval metric:
    value}, each run's member run's own. An ancestor's ``scores`` are those of the run its ``adapter_dir`` lives
    in (``scores_run``): a fork-born member's parent read the fork's adapter with the parent run's scores; every
    run's scores of it are in ``scores_by_run``, each with that run's dir.

    >>> lin = {"events": [{"child": "S0", "parents": [], "operator": "init", "step": 0, "generation": 0, "role": "student"},
    ...                   {"child": "S1", "parents": ["S0"], "operator": "gaussian", "step": 2, "generation": 1,
    ...                    "role": "student", "replaced": "S0", "details": {"strength": 0.1, "mu_at_birth": 26.0}}]}
    >>> r = record("S1", "r1", lin, [{"id": "S1", "mu": 27.0, "sigma": 3.0}], {"r1": {"optim.lr": "1e-05"}})
    >>> [(a["member"], a["operator"], a["strength"], a["born_step"]) for a in r["ancestors"]]
    [('S1', 'gaussian', 0.1, 2), ('S0', 'init', None, 0)]
    >>> r["ancestors"][1]["replaced_by"], r["ancestors"][1]["died_step"], r["runs"][0]["settings"]
    ('S1', 2, {'optim.lr': '1e-05'})

    A fork ``f`` of run ``p``: S0 lives on in the fork, its adapter in the fork's dir; the parent scored S0 at 0.2,
    the fork at 0.5. The record gives S0 the fork's adapter with the fork's score, and the parent's beside it:

    >>> lin = {"events": [{"child": "S0", "parents": [], "operator": "init", "step": 0, "role": "student"},
    ...                   {"child": "S2", "parents": ["S0"], "operator": "gaussian", "step": 3, "role": "student", "run": "f"}],
    ...        "forks": [{"run": "p", "step": 2}]}
    >>> pop = [{"id": "S0", "adapter_dir": "/runs/f/checkpoints/step_000003/adapters/S0"}, {"id": "S2"}]
    >>> r = record("S2", "f", lin, pop, {}, {"p": {"S0": {"eval/x": 0.2}}, "f": {"S0": {"eval/x": 0.5}}},
    ...            {"p": "/runs/p", "f": "/runs/f"})
    >>> s0 = r["ancestors"][1]
    >>> s0["scores_run"], s0["scores"], [(x["run"], x["scores"]) for x in s0["scores_by_run"]]
    ('f', {'eval/x': 0.5}, [('p', {'eval/x': 0.2}), ('f', {'eval/x': 0.5})])
    """
    forks = list(lineage.get("forks") or [])
    chain = [f["run"] for f in forks] + [run_id]
    scores = scores or {}
    order, todo = [], [member]
    while todo:  # breadth first: parents before grandparents
        m = todo.pop(0)
        if m in order:
            continue
        order.append(m)
        todo += member_facts(m, lineage, population)["parents"]
    ancestors = []
    for m in order:
        facts = member_facts(m, lineage, population)
        facts["run"] = born_in(m, lineage, run_id)
        # the scores of the adapter shown: the run its dir lies in (else this run's, whose population names it)
        source = owner(facts["adapter_dir"], run_dirs) or run_id
        facts["scores_run"] = source
        facts["scores"] = dict(scores.get(source, {}).get(m, {}))
        facts["scores_by_run"] = [{"run": r, "run_dir": (run_dirs or {}).get(r), "scores": dict(scores[r][m])}
                                  for r in chain if m in scores.get(r, {})]
        ancestors.append(facts)
    runs = [{"run": r, "forked_from": forks[i - 1]["run"] if i else None, "fork_step": forks[i - 1]["step"] if i else None,
             "run_dir": (run_dirs or {}).get(r), "settings": dict(settings.get(r, {}))} for i, r in enumerate(chain)]
    return {"version": VERSION, "member": member, "run": run_id, "ancestors": ancestors, "runs": runs}


def scores_of(metrics: dict[str, float]) -> dict[str, float]:
    """A member run's evaluation scores: its ``eval/<benchmark>/<metric>`` metrics (latest values).

    >>> scores_of({"eval/gsm8k/accuracy": 0.5, "rating/mu": 25.0})
    {'eval/gsm8k/accuracy': 0.5}
    """
    return {k: v for k, v in sorted(metrics.items()) if k.startswith(rl.EVAL_PREFIX)}


def read(client, store: str, run_id: str, member: str) -> dict:
    """``record`` of a run in the store: lineage.json and population.json of the run, the settings (params) and
    run dirs of every run of its fork chain, the evaluation scores of every member run of the chain."""
    lineage = rl.lineage_of(artifact_or_none(store, run_id, rl.LINEAGE))
    population = rl.population_of(artifact_or_none(store, run_id, rl.POPULATION_FILE))
    chain = [f["run"] for f in lineage.get("forks") or []] + [run_id]
    settings, run_dirs, scores = {}, {}, {}
    for r in chain:
        run = client.get_run(r)
        settings[r], run_dirs[r] = dict(run.data.params), str(rl.run_dir(run))
    for r in chain:  # each run's scores of its members, kept apart (``record`` ties them to the adapter shown)
        for m, child in rl.members_by_id(rl.member_runs(client, r)).items():
            found = scores_of(child.data.metrics)
            if found:
                scores.setdefault(r, {})[m] = found
    return record(member, run_id, lineage, population, settings, scores, run_dirs)


def artifact_or_none(store: str, run_id: str, path: str) -> Any:
    """The JSON artifact ``path`` of ``run_id``, or None when the run has not written it yet (before its first
    checkpoint: no lineage, no population file)."""
    try:
        return rl.read_json(store, run_id, path)
    except Exception:  # noqa: BLE001 - not written yet (before the first checkpoint): an empty lineage
        return None
