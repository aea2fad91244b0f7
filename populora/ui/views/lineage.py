"""Lineage: the DAG of every member a run ever had (crossover children have two parents, so not a tree)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from populora.ui import charts, common, store

st.title("Lineage")

OPERATOR_STYLE = {"mutation": 'color="#555555"', "crossover": 'color="#b07aa1", penwidth=2, style=bold'}


def graph_data(uri: str, run_id: str, members: pd.DataFrame) -> list[dict]:
    """One dict per member: id, role, parents, operator, step, generation, alive, mu, sigma.

    lineage.json is the source of truth (the trainer's own record); before its first checkpoint the member runs'
    tags carry the same facts."""
    events = store.lineage(uri, run_id).get("events", [])
    pop = {m["id"]: m for m in store.population(uri, run_id)}
    by_member = members.set_index("member") if not members.empty else pd.DataFrame()
    if not events:
        events = [{"child": r.member, "parents": r.parents, "operator": r.operator, "step": r.born_step,
                   "generation": r.generation, "role": r.role, "replaced": ""} for r in members.itertuples()]
    nodes = []
    for e in events:
        m, p = e["child"], pop.get(e["child"], {})
        row = by_member.loc[m] if m in by_member.index else {}
        mu = row.get("rating/mu", p.get("mu")) if len(row) else p.get("mu")
        sigma = row.get("rating/sigma", p.get("sigma")) if len(row) else p.get("sigma")
        alive = bool(row.get("alive", p.get("alive", True))) if len(row) else p.get("alive", True)
        nodes.append({"id": m, "role": e.get("role", "?"), "parents": list(e.get("parents") or []), "operator": e.get("operator", "init"),
                      "step": e.get("step", 0), "generation": e.get("generation", 0), "alive": alive,
                      "replaced": e.get("replaced", ""), "mu": _num(mu), "sigma": _num(sigma)})
    return nodes


def _num(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if pd.isna(value) else value


def lineage_dot(nodes: list[dict], selected: str | None = None, show_dead: bool = True) -> str:
    """Graphviz DOT: generations left to right, colour = role, label = id and rating, dashed = replaced."""
    shown = {n["id"] for n in nodes if show_dead or n["alive"] or n["id"] == selected}
    lines = ["digraph lineage {", "rankdir=LR; nodesep=0.25; ranksep=0.6;",
             'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11, fontcolor="white"];',
             'edge [fontname="Helvetica", fontsize=9];']
    for gen in sorted({n["generation"] for n in nodes}):
        same = " ".join(f'"{n["id"]}";' for n in nodes if n["generation"] == gen and n["id"] in shown)
        if same:
            lines.append(f"{{ rank=same; {same} }}")
    for n in nodes:
        if n["id"] not in shown:
            continue
        rating = "" if n["mu"] is None else f"\\nμ {n['mu']:.1f} ± {n['sigma'] or 0:.1f}"
        style = '"rounded,filled"' if n["alive"] else '"rounded,filled,dashed"'
        color = common.ROLE_COLORS.get(n["role"], "#999999") if n["alive"] else "#bbbbbb"
        border = ', penwidth=3, color="black"' if n["id"] == selected else ""
        tooltip = f'{n["role"]}, generation {n["generation"]}, {"alive" if n["alive"] else "replaced"}'
        lines.append(f'"{n["id"]}" [label="{n["id"]}{rating}", fillcolor="{color}", style={style}, tooltip="{tooltip}"{border}];')
    for n in nodes:
        for parent in n["parents"]:
            if parent in shown and n["id"] in shown:
                style = OPERATOR_STYLE.get(n["operator"], "")
                lines.append(f'"{parent}" -> "{n["id"]}" [label="{n["operator"]} @{n["step"]}", {style}];')
    lines.append("}")
    return "\n".join(lines)


def member_panel(uri: str, run_id: str, node: dict, nodes: list[dict], members: pd.DataFrame) -> None:
    children = [n["id"] for n in nodes if node["id"] in n["parents"]]
    row = members.set_index("member").loc[node["id"]] if node["id"] in set(members["member"]) else None
    cols = st.columns(4)
    cols[0].metric("role", node["role"])
    cols[1].metric("generation", node["generation"])
    cols[2].metric("rating mu ± sigma", "–" if node["mu"] is None else f"{node['mu']:.2f} ± {node['sigma'] or 0:.2f}")
    cols[3].metric("status", "alive" if node["alive"] else "replaced")
    st.markdown(f"**born** at step {node['step']} by **{node['operator']}**"
                + (f" of {', '.join(node['parents'])}" if node["parents"] else "")
                + (f", replacing {node['replaced']}" if node["replaced"] else "")
                + f"  \n**children**: {', '.join(children) or 'none'}")
    if row is None:
        st.caption("no member run logged yet")
        return
    st.markdown(f"**adapter**: `{row['adapter_dir'] or '(saved at the end of the run)'}`  \n**member run**: `{row['member_run_id']}`")
    mu = store.history(uri, row["member_run_id"], "rating/mu").rename(columns={"value": "mu"})
    sigma = store.history(uri, row["member_run_id"], "rating/sigma").rename(columns={"value": "sigma"})
    charts.rating_band(mu.merge(sigma, on="step", how="left").fillna({"sigma": 0.0}).assign(member=node["id"]) if not mu.empty else mu, height=220)
    scores = {k: v for k, v in row.items() if isinstance(k, str) and "/" in k and not pd.isna(v)}
    if scores:
        st.dataframe(pd.DataFrame({"metric": list(scores), "latest": list(scores.values())}), hide_index=True, width="stretch")


def main() -> None:
    runs = common.load_runs()
    if runs.empty:
        common.empty_state()
        return
    run_id = common.pick_run(runs)
    uri = store.uri()
    members = store.members(uri, run_id)
    nodes = graph_data(uri, run_id, members)
    if not nodes:
        st.info("This run has no members logged yet: they appear at its first checkpoint (step 1).")
        return
    ids = [n["id"] for n in nodes]
    cols = st.columns([2, 1, 3])
    selected = cols[0].selectbox("Member", ids, key="lin_member", help="Its parents, children and history are shown below")
    show_dead = cols[1].toggle("show replaced", value=len(nodes) <= 40, key="lin_dead")
    n_cross = sum(n["operator"] == "crossover" for n in nodes)
    cols[2].caption(f"{len(nodes)} members, {sum(n['alive'] for n in nodes)} alive, "
                    f"{sum(n['operator'] == 'mutation' for n in nodes)} mutations, {n_cross} crossovers · "
                    "orange = teacher, blue = student, green = baseline (both roles); dashed grey = replaced")
    st.graphviz_chart(lineage_dot(nodes, selected, show_dead))
    st.subheader(f"Member {selected}")
    member_panel(uri, run_id, next(n for n in nodes if n["id"] == selected), nodes, members)


main()
