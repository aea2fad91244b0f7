"""A run family: a run, its forks, their forks, ... (every run tagged ``populora.family`` with the root run's id).
Member ids name one member in the whole family: a fork starts from its parent's checkpoint, whose id counters say
nothing of the ids the parent (or another fork of it) gave out after that step, so every run of a family
publishes the ids it has used (tag ``populora.next_ids``: the next index per id prefix) and a run about to give
out ids (a fork's grow, evolution, a resume) first raises its counters to the family's (``floor``): the family's
numbering goes on (``T0, T1, S0, S1, S2`` in the parent; the fork's new student ``S5`` if the parent went on to
``S4``).

What is left: two runs of one family giving out an id in the same instant (between one's allocation and its tag
write, a few milliseconds; the trainer publishes right after evolution) can still collide; a store shared by
machines would need a lock server for that.

The pure part (``used``, ``floor``, ``encode``/``decode``) is what the property test checks; ``floor_of`` reads
the store.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from populora.platform.store import runlayout as rl

FAMILY = "populora.family"      # the root run's id: every run of a family has it (the root too)
NEXT_IDS = "populora.next_ids"  # JSON {prefix: next index}: the ids this run has given out are below these

_ID = re.compile(r"^([A-Za-z]+)(\d+)$")


def family_of(run_id: str, tags: dict[str, str]) -> str:
    """The family (root run id) of a run: its tag; a run from before the tag: its parent's id if a fork (a fork
    of a fork from then is seen as its own family), else itself.

    >>> family_of("b", {FAMILY: "a"}), family_of("b", {rl.FORKED_FROM: "a"}), family_of("b", {})
    ('a', 'a', 'b')
    """
    return tags.get(FAMILY) or tags.get(rl.FORKED_FROM) or run_id


def used(next_index: dict[str, int], member_ids: Iterable[str] = ()) -> dict[str, int]:
    """Per id prefix, the next index no member of this state has: the counters, raised past every member id
    (a state written before the counters existed, or hand-edited, still counts).

    >>> used({"S": 3}, ["T0", "T1", "S0", "S7"])
    {'S': 8, 'T': 2}
    """
    out = dict(next_index)
    for m in member_ids:
        match = _ID.match(m)
        if match:
            out[match[1]] = max(out.get(match[1], 0), int(match[2]) + 1)
    return dict(sorted(out.items()))


def floor(states: Iterable[dict[str, int]]) -> dict[str, int]:
    """Per prefix, the highest next index of ``states``: the family's numbering goes on from there.

    >>> floor([{"S": 3, "T": 2}, {"S": 5}, {}])
    {'S': 5, 'T': 2}
    """
    out: dict[str, int] = {}
    for state in states:
        for prefix, index in state.items():
            out[prefix] = max(out.get(prefix, 0), int(index))
    return dict(sorted(out.items()))


def encode(next_index: dict[str, int]) -> str:
    """The ``populora.next_ids`` tag's value.

    >>> decode(encode({"T": 2, "S": 5}))
    {'S': 5, 'T': 2}
    """
    return json.dumps(dict(sorted(next_index.items())), separators=(",", ":"))


def decode(text: str | None) -> dict[str, int] | None:
    """The tag's value back (None when absent or not a JSON object of ints)."""
    try:
        data = json.loads(text or "")
        return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else None
    except (ValueError, TypeError, AttributeError):
        return None


def relatives(client, run_id: str, include_self: bool = False) -> list[Any]:
    """The other runs of ``run_id``'s family (any experiment): the runs tagged with its family, and the root
    (and ``run_id`` itself if ``include_self``)."""
    family = family_of(run_id, dict(client.get_run(run_id).data.tags))
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, filter_string=f"tags.`{FAMILY}` = '{family}'", max_results=5000)
    found = {r.info.run_id: r for r in runs}
    if family not in found and family != run_id:
        try:
            found[family] = client.get_run(family)  # a root from before the tag
        except Exception:  # noqa: BLE001 - a deleted root: its forks still count
            pass
    if include_self:
        found.setdefault(run_id, client.get_run(run_id))
    else:
        found.pop(run_id, None)
    return list(found.values())


def state_of(store: str, run) -> dict[str, int]:
    """What a run has used: its tag, else (a run from before the tag) its population.json."""
    tagged = decode(run.data.tags.get(NEXT_IDS))
    if tagged is not None:
        return tagged
    try:
        data = rl.read_json(store, run.info.run_id, rl.POPULATION_FILE)
    except Exception:  # noqa: BLE001 - no population written yet: it has given out nothing beyond its parent's
        return {}
    return used(data.get("next_index") or {}, [m.get("id", "") for m in data.get("members") or []])


def floor_of(client, store: str, run_id: str, include_self: bool = False) -> dict[str, int]:
    """The family's numbering as the store says it, without ``run_id``'s own state (what it must go on from), or
    with it (``include_self``: what a fork of ``run_id`` goes on from, as the fork form previews it)."""
    return floor(state_of(store, r) for r in relatives(client, run_id, include_self))


def default_baseline(run_id: str, runs: list[dict]) -> str | None:
    """The baseline a page picks by itself for ``run_id`` (``runs``: run rows with run_id, kind, baseline_run,
    forked_from, base_model): its linked baseline, else the one linked to its nearest ancestor (a fork's family),
    and only one on the same base model; None otherwise. Never the store's newest baseline: Arms race of an
    embedded run without a baseline silently drew a tiny random run's.

    >>> rows = [{"run_id": "p", "kind": "population", "baseline_run": "b", "forked_from": "", "base_model": "embedded"},
    ...         {"run_id": "b", "kind": "baseline", "baseline_run": "", "forked_from": "", "base_model": "embedded"},
    ...         {"run_id": "f", "kind": "population", "baseline_run": "", "forked_from": "p", "base_model": "embedded"},
    ...         {"run_id": "t", "kind": "baseline", "baseline_run": "", "forked_from": "", "base_model": "tiny random model shaped like embedded"},
    ...         {"run_id": "e", "kind": "population", "baseline_run": "", "forked_from": "", "base_model": "embedded"}]
    >>> default_baseline("p", rows), default_baseline("f", rows), default_baseline("e", rows)
    ('b', 'b', None)
    """
    by_id = {r["run_id"]: r for r in runs}
    run = by_id.get(run_id)
    seen = set()
    node = run
    while node is not None and node["run_id"] not in seen:
        seen.add(node["run_id"])
        linked = by_id.get(node.get("baseline_run") or "")
        if linked is not None and linked.get("kind") == rl.BASELINE and linked.get("base_model") == run.get("base_model"):
            return linked["run_id"]
        node = by_id.get(node.get("forked_from") or "")
    return None


def unrelated(run: dict, baseline: dict) -> str:
    """Why ``baseline`` is not ``run``'s to compare with, in words ("" when it is its linked one or its family's on
    the same base model): another base model, or another run family.

    >>> unrelated({"run_id": "e", "base_model": "embedded", "baseline_run": ""}, {"run_id": "t", "base_model": "tiny"})
    'another base model (tiny, not embedded)'
    >>> unrelated({"run_id": "e", "base_model": "x", "baseline_run": ""}, {"run_id": "b", "base_model": "x"})
    'not linked to this run or its family: check that it was trained to match'
    """
    if baseline.get("base_model") != run.get("base_model"):
        return f"another base model ({baseline.get('base_model')}, not {run.get('base_model')})"
    if baseline["run_id"] != run.get("baseline_run"):
        return "not linked to this run or its family: check that it was trained to match"
    return ""
