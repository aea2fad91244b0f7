"""Lineage: the DAG of every member a run ever had (crossover children have two parents, so not a tree)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from populora.platform.store import operator_table
from populora.platform.store import runlayout as rl
from populora.ui import charts, common, experiments, store, sweeps
from populora.ui.lineage_graph import birth_words, graph_data, kind, lineage_dot

st.title("Lineage")

def member_panel(uri: str, run_id: str, node: dict, nodes: list[dict], members: pd.DataFrame, forks: list[dict]) -> None:
    children = [n["id"] for n in nodes if node["id"] in n["parents"]]
    row = members.set_index("member").loc[node["id"]] if node["id"] in set(members["member"]) else None
    cols = st.columns(4)
    cols[0].metric("role", node["role"])
    cols[1].metric("generation", node["generation"])
    last = "at replacement" if not node["alive"] else "latest"
    cols[2].metric(f"rating μ ± σ ({last})", "–" if node["mu"] is None else f"{node['mu']:.2f} ± {node['sigma'] or 0:.2f}",
                   help="The trainer's own record (population.json): a replaced member keeps the rating it had when "
                        "evolution replaced it")
    cols[3].metric("status", "alive" if node["alive"] else "removed" if node.get("removed") else "replaced")
    born = birth_words(node, forks, run_id)
    died = ""
    then = "" if node["mu"] is None else f", with rating μ {node['mu']:.2f} ± {node['sigma'] or 0:.2f} then"
    if not node["alive"] and node.get("removed"):
        died = (f"  \n**removed** at step {node['removed']['step']} by the fork's resize "
                f"(**{node['removed']['operator']}**: the weakest of its role leave){then}")
    elif not node["alive"] and node.get("replaced_by"):
        died = f"  \n**replaced** at step {node['replaced_at']} by **{node['replaced_by']}**{then}"
    st.markdown(born + died + f"  \n**children**: {', '.join(children) or 'none'}")
    if row is None:
        st.caption("no member run logged yet")
        return
    experiments.ancestry_download(uri, run_id, node["id"])
    experiment = (store.run_info(uri, run_id) or {}).get("experiment_id")
    model = row.get("model_id") if isinstance(row.get("model_id"), str) else ""  # NaN: a member run without one
    st.markdown(f"**adapter**: `{row['adapter_dir'] or '(saved at the end of the run)'}`  \n"
                f"**member run**: {common.mlflow_link(row['member_run_id'], experiment)}"
                + (f"  \n**newest model** (MLflow LoggedModel of its last checkpoint; its parents are its earlier "
                   f"models and its lineage parents'): {common.mlflow_link(model, experiment, 'models')}" if model else ""))
    if row["adapter_dir"]:
        sweeps.export_form(run_id, node["id"])
    record = row.to_dict() | {"member": node["id"]}
    mu = store.member_history(uri, record, "rating/mu").rename(columns={"value": "mu"})
    sigma = store.member_history(uri, record, "rating/sigma").rename(columns={"value": "sigma"})
    charts.rating_band(mu.merge(sigma, on="step", how="left").fillna({"sigma": 0.0}).assign(member=node["id"]) if not mu.empty else mu, height=220)
    scores = {k: v for k, v in row.items() if isinstance(k, str) and "/" in k and not pd.isna(v)}
    evals = eval_scores(scores)
    if evals:
        st.markdown("**Evaluation scores** (the latest evaluation of this member)")
        st.table(pd.DataFrame(evals).set_index("benchmark"))
    rest = {k: v for k, v in scores.items() if not k.startswith(rl.EVAL_PREFIX)}
    if rest:
        with st.expander("every latest metric of this member"):
            st.dataframe(pd.DataFrame({"metric": list(rest), "latest": list(rest.values())}), hide_index=True, width="stretch")


def eval_scores(metrics: dict) -> list[dict]:
    """A member's ``eval/<benchmark>/<metric>`` values as rows of benchmark, metric and score (rates in %).

    >>> eval_scores({"eval/gsm8k/accuracy": 0.25, "rating/mu": 25.0})
    [{'benchmark': 'gsm8k', 'metric': 'accuracy', 'score': '25.0%'}]
    """
    rows = []
    for key, value in sorted(metrics.items()):
        parts = key.split("/")
        if key.startswith(rl.EVAL_PREFIX) and len(parts) == 3:
            rows.append({"benchmark": parts[1], "metric": parts[2],
                         "score": common.fmt_pct(value, 1) if 0 <= value <= 1 else f"{value:.3g}"})
    return rows


def operators_panel(metrics: dict) -> None:
    """The per-operator table (``evolution/<operator>/*``, the latest values): what each operator made and how
    its children fared."""
    table = operator_table.rows(metrics)
    if not table:
        return
    st.subheader("Operators")
    st.caption("children made; judged = faced an evolution since birth; survival = share of the judged that "
               "survived their first; rating change = the child's mu change minus its parent's over its life; "
               "KL = parent -> child on the probe prompts (docs/evolution.md)")
    formats = {"children": "{:.0f}", "judged": "{:.0f}", "survival": "{:.2f}", "rating_change": "{:+.2f}", "kl": "{:.2e}",
               "seconds": "{:.3f}"}
    st.dataframe(common.text_table(pd.DataFrame(table), formats), hide_index=True, width="stretch")


def pick_member(ids: list[str], column) -> str:
    """The member selectbox, mirrored in the URL (``?member=T1``): a link, a refresh or a click on a node (a link
    to the same page with that member) opens that member."""
    wanted = st.query_params.get("member")
    selected = column.selectbox("Member", ids, index=ids.index(wanted) if wanted in ids else 0, key="lin_member",
                                help="Or click a node of the graph")
    if st.query_params.get("member") != selected:
        st.query_params["member"] = selected
    return selected


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
    selected = pick_member(ids, cols[0])
    show_dead = cols[1].toggle("show replaced", value=len(nodes) <= 40, key="lin_dead")
    n_cross, n_mut = (sum(kind(n) == k for n in nodes) for k in ("crossover", "mutation"))
    cols[2].caption(f"{len(nodes)} member{'s' * (len(nodes) != 1)}, {sum(n['alive'] for n in nodes)} alive, "
                    f"{n_mut} mutation{'s' * (n_mut != 1)}, {n_cross} crossover{'s' * (n_cross != 1)} · "
                    "orange = teacher, blue = student, green = baseline (both roles); dashed grey = replaced (or removed at a fork); "
                    "edges name the operator")
    tags = (store.run_info(uri, run_id) or {}).get("tags", {})
    experiments.fork_origin(tags)
    forks = store.lineage(uri, run_id).get("forks") or []
    st.graphviz_chart(lineage_dot(nodes, selected, show_dead, href=f"?run={run_id}&member={{member}}", forks=forks, run_id=run_id))
    kept = rl.checkpoint_steps(rl.run_dir_of(tags))
    if kept:
        common.link("runs", f"Fork from here (a checkpoint of step {', '.join(map(str, kept))})", run_id, "🍴",
                    query={"fork": kept[-1]})
    st.subheader(f"Member {selected}")
    member_panel(uri, run_id, next(n for n in nodes if n["id"] == selected), nodes, members, forks)
    with st.expander(f"Diff: {selected} against another member"):
        experiments.members_diff(uri, run_id, selected, ids)
    operators_panel((store.run_info(uri, run_id) or {}).get("metrics", {}))


main()
