"""The lineage DAG of a run as data and as Graphviz DOT (pure functions; the Lineage page draws them)."""

from __future__ import annotations

import pandas as pd

from populora.platform.store.ancestry import birth_run
from populora.ui import common, store

OPERATOR_STYLE = {"mutation": 'color="#555555"', "crossover": 'color="#b07aa1", penwidth=2, style=bold'}


def kind(node: dict) -> str:
    """mutation | crossover | init of a node, whatever its operator's name (runs before the operator family
    logged "mutation" / "crossover"): a crossover has two or more parents."""
    parents = node.get("parents") or []
    return "init" if not parents else "crossover" if len(parents) >= 2 else "mutation"


def fate_of(node: dict) -> str:
    """A member's fate in words: alive, replaced (by whom, when), or removed by a fork's resize.

    >>> fate_of({"alive": False, "replaced_by": "S4", "replaced_at": 2})
    'replaced by S4 at step 2'
    >>> fate_of({"alive": False, "removed": {"step": 3, "operator": "shrink_weakest"}})
    'removed at the fork at step 3 (shrink_weakest)'
    >>> fate_of({"alive": True})
    'alive'
    """
    if node["alive"]:
        return "alive"
    if node.get("removed"):
        return f'removed at the fork at step {node["removed"]["step"]} ({node["removed"]["operator"]})'
    return "replaced" + (f' by {node["replaced_by"]} at step {node["replaced_at"]}' if node.get("replaced_by") else "")


def birth_words(node: dict, forks: list[dict], run_id: str) -> str:
    """Where and how a member was born, in words (markdown). A fork's lineage holds members of its parent runs
    (up to each fork step) and the members its resize added at the fork step: the step alone does not say which,
    so the run is named wherever the lineage has forks.

    >>> node = {"step": 1, "operator": "layer_gaussian", "parents": ["S0"], "replaced": "", "run": "fork1234ab"}
    >>> print(birth_words(node, [{"run": "parent12ab", "step": 1}], "fork1234ab"))
    **born** in this fork at its step 1, added by the fork's resize: **layer_gaussian** of S0
    >>> print(birth_words(node | {"run": ""}, [{"run": "parent12ab", "step": 1}], "fork1234ab"))
    **born** in run parent12 (a run this fork descends from) at its step 1 by **layer_gaussian** of S0
    >>> print(birth_words(node | {"run": "", "step": 2, "replaced": "S1"}, [], "r"))
    **born** at step 2 by **layer_gaussian** of S0, replacing S1
    """
    made = (f"**{node['operator']}**" + (f" of {', '.join(node['parents'])}" if node["parents"] else "")
            + (f", replacing {node['replaced']}" if node["replaced"] else ""))
    where = birth_run(node["step"], forks, run_id, node.get("run", ""))
    if node.get("run") == run_id and forks:
        return f"**born** in this fork at its step {node['step']}, added by the fork's resize: {made}"
    if where != run_id:
        return f"**born** in run {where[:8]} (a run this fork descends from) at its step {node['step']} by {made}"
    return f"**born** at step {node['step']} by {made}" if not forks else f"**born** in this fork at step {node['step']} by {made}"


def graph_data(uri: str, run_id: str, members: pd.DataFrame) -> list[dict]:
    """One dict per member: id, role, parents, operator, step, generation, alive, replaced (whom it replaced),
    replaced_by and replaced_at (who replaced it, at which step), removed ({"step", "operator"}: removed by a
    fork's resize, ``lineage.json``'s ``removed``; {} otherwise), mu, sigma, run (the run it was born in where its
    step does not say: a fork's grown members; "" otherwise).

    lineage.json is the source of truth (the trainer's own record); before its first checkpoint the member runs'
    tags carry the same facts. Ratings are the trainer's record (``store.members``: population.json first, so a
    replaced member shows the rating it had when it was replaced)."""
    lineage = store.lineage(uri, run_id)
    events = lineage.get("events", [])
    removed = {r["member"]: {"step": r.get("step"), "operator": r.get("operator", "")} for r in lineage.get("removed", [])}
    rec = store.recorded(uri, run_id)
    by_member = members.set_index("member") if not members.empty else pd.DataFrame()
    if not events:
        events = [{"child": r.member, "parents": r.parents, "operator": r.operator, "step": r.born_step,
                   "generation": r.generation, "role": r.role, "replaced": ""} for r in members.itertuples()]
    nodes = []
    for e in events:
        m, p = e["child"], rec.get(e["child"], {})
        row = by_member.loc[m] if m in by_member.index else {}
        # a member replaced before its first checkpoint has no member run yet: population.json still has it
        mu = _num(row.get("rating/mu")) if len(row) else None
        sigma = _num(row.get("rating/sigma")) if len(row) else None
        mu, sigma = (mu, sigma) if mu is not None else (p.get("mu"), p.get("sigma"))
        alive = bool(row.get("alive", p.get("alive", True))) if len(row) else p.get("alive", True)
        nodes.append({"id": m, "role": e.get("role", "?"), "parents": list(e.get("parents") or []), "operator": e.get("operator", "init"),
                      "step": e.get("step", 0), "generation": e.get("generation", 0), "alive": alive,
                      "replaced": e.get("replaced", ""), "replaced_by": p.get("replaced_by", ""),
                      "replaced_at": p.get("replaced_at"), "removed": removed.get(m, {}), "mu": _num(mu),
                      "sigma": _num(sigma), "run": e.get("run") or ""})
    return nodes


def fork_clusters(nodes: list[dict], shown: set[str], forks: list[dict], run_id: str) -> list[str]:
    """One dashed box per parent run of a fork chain around the members born there (up to the fork's step).

    >>> fork_clusters([{"id": "T0", "step": 0}, {"id": "T2", "step": 3}], {"T0", "T2"}, [{"run": "abcdef123", "step": 1}], "r2")
    ['subgraph "cluster_fork0" { label="run abcdef12, up to its step 1: forked here"; style=dashed; color="#777777"; fontname="Helvetica"; fontsize=10; "T0"; }']
    """
    out = []
    for i, fork in enumerate(forks):
        inside = [n["id"] for n in nodes if n["id"] in shown and birth_run(n["step"], forks, run_id, n.get("run", "")) == fork["run"]]
        if inside:
            out.append(f'subgraph "cluster_fork{i}" {{ label="run {fork["run"][:8]}, up to its step {fork["step"]}: '
                       f'forked here"; style=dashed; color="#777777"; fontname="Helvetica"; fontsize=10; '
                       + " ".join(f'"{m}";' for m in inside) + " }")
    return out


def _num(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if pd.isna(value) else value


def lineage_dot(nodes: list[dict], selected: str | None = None, show_dead: bool = True, href: str | None = None,
                forks: list[dict] = (), run_id: str = "") -> str:
    """Graphviz DOT: generations left to right, colour = role, label = id and rating, dashed = replaced.
    ``href``: a link template with ``{member}`` (e.g. ``?run=ID&member={member}``): clicking a node opens it.
    ``forks`` (lineage.json's, of run ``run_id``): the members born in each parent run are boxed, labelled with
    that run and the step this lineage was forked at."""
    shown = {n["id"] for n in nodes if show_dead or n["alive"] or n["id"] == selected}
    lines = ["digraph lineage {", "rankdir=LR; nodesep=0.25; ranksep=0.6;",
             'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11, fontcolor="white"];',
             'edge [fontname="Helvetica", fontsize=9];']
    boxed = {n["id"] for n in nodes if forks and birth_run(n["step"], forks, run_id, n.get("run", "")) != run_id}
    for gen in sorted({n["generation"] for n in nodes}):  # (a node in a fork's box too: Graphviz drops the box)
        same = " ".join(f'"{n["id"]}";' for n in nodes if n["generation"] == gen and n["id"] in shown - boxed)
        if same:
            lines.append(f"{{ rank=same; {same} }}")
    for n in nodes:
        if n["id"] not in shown:
            continue
        rating = "" if n["mu"] is None else f"\\nμ {n['mu']:.1f} ± {n['sigma'] or 0:.1f}"
        style = '"rounded,filled"' if n["alive"] else '"rounded,filled,dashed"'
        color = common.ROLE_COLORS.get(n["role"], "#999999") if n["alive"] else "#bbbbbb"
        border = ', penwidth=3, color="black"' if n["id"] == selected else ""
        fate = fate_of(n)
        tooltip = f'{n["role"]}, generation {n["generation"]}, {fate}' + (" (click to open)" if href else "")
        link = f', href="{href.format(member=n["id"])}", target="_self"' if href else ""
        lines.append(f'"{n["id"]}" [label="{n["id"]}{rating}", fillcolor="{color}", style={style}, tooltip="{tooltip}"{border}{link}];')
    lines += fork_clusters(nodes, shown, forks, run_id)
    for n in nodes:
        for parent in n["parents"]:
            if parent in shown and n["id"] in shown:
                style = OPERATOR_STYLE.get(kind(n), "")
                lines.append(f'"{parent}" -> "{n["id"]}" [label="{n["operator"]} @{n["step"]}", {style}];')
    lines.append("}")
    return "\n".join(lines)
