"""The League page's tables and charts, from a league's results (``league.json``, written by ``populora league``).

Display only: every number here is the league's (``evaluation.league_summary``); these functions lay them out as
frames and Altair charts and compute nothing new."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from populora.ui.charts import STEP_AXIS

# the tables' columns by how they are shown (``table``)
LOGITS = ("ability", "strength", "difficulty", "ci low", "ci high")
RATES = ("solve rate", "validity rate", "solved by the league")
MU = "TrueSkill mu (in its run)"


def _ci(est: dict) -> tuple:
    lo, hi = (est.get("ci95") or [None, None])
    return est.get("value"), lo, hi


def abilities(data: dict) -> pd.DataFrame:
    """One row per student, strongest first: ability with its interval, solve rate, the within-run TrueSkill."""
    rows = []
    for s in data["students"]:
        v, lo, hi = _ci(s["ability"])
        rows.append({"student": s["id"], "arm": s["arm"], "step": s["step"], "member": s["member"], "ability": v,
                     "ci low": lo, "ci high": hi, "solve rate": s["solve_rate"], "answers": s["answers"],
                     MU: s.get("mu")})
    return pd.DataFrame(rows).sort_values("ability", ascending=False, ignore_index=True)


def teachers(data: dict) -> pd.DataFrame:
    """One row per teacher: strength (mean difficulty of its valid panel tasks) with its interval, and validity."""
    rows = []
    for t in data["teachers"]:
        v, lo, hi = _ci(t["strength"])
        vlo, vhi = t.get("validity_ci95") or [None, None]
        rows.append({"teacher": t["id"], "arm": t["arm"], "step": t["step"], "member": t["member"], "strength": v,
                     "ci low": lo, "ci high": hi, "panel tasks": t["tasks"], "validity rate": t["validity_rate"],
                     "validity ci": f"{vlo:.0%} to {vhi:.0%}" if vlo is not None else "-",
                     "valid / proposed": f"{t.get('valid', 0)}/{t.get('proposed', 0)}",
                     "solved by the league": t["solve_rate"], MU: t.get("mu")})
    return pd.DataFrame(rows)


def table(df: pd.DataFrame) -> None:
    """One of the tables above, its numbers as the text says them: logits signed to two decimals, rates in %,
    TrueSkill to two decimals (the frame keeps the full values: sorting and download)."""
    config = {c: st.column_config.NumberColumn(c, format="%+.2f") for c in LOGITS if c in df}
    config |= {c: st.column_config.NumberColumn(c, format="percent") for c in RATES if c in df}
    if MU in df:
        config[MU] = st.column_config.NumberColumn(MU, format="%.2f")
    st.dataframe(df, hide_index=True, width="stretch", column_config=config)


def difficulties(data: dict) -> pd.DataFrame:
    rows = [{"task": t["id"], "teacher": t["teacher"], "kind": t["kind"], "difficulty": t["difficulty"]["value"],
             "ci low": t["difficulty"]["ci95"][0], "ci high": t["difficulty"]["ci95"][1], "solve rate": t["solve_rate"]}
            for t in data["tasks"]]
    return pd.DataFrame(rows).sort_values("difficulty", ascending=False, ignore_index=True) if rows else pd.DataFrame()


def heatmap(data: dict, height: int = 360) -> None:
    """Teacher x student solve rate (the raw verdicts, before any fit)."""
    df = pd.DataFrame(data["heatmap"])
    if df.empty:
        st.caption("no verdicts")
        return
    chart = (alt.Chart(df, title="solve rate: student (columns) on each teacher's panel tasks (rows)")
             .mark_rect()
             .encode(x=alt.X("student:N", title="student", sort=None), y=alt.Y("teacher:N", title="teacher", sort=None),
                     color=alt.Color("solve_rate:Q", title="solve rate", scale=alt.Scale(domain=[0, 1], scheme="viridis"),
                                     legend=alt.Legend(format=".0%")),
                     tooltip=["teacher", "student", alt.Tooltip("solve_rate:Q", format=".0%"), "answers"])
             .properties(height=height))
    st.altair_chart(chart, width="stretch", height=height + 120)


def curves(data: dict, side: str, title: str, height: int = 260) -> None:
    """Mean student ability (``side`` student_ability) or teacher strength (teacher_strength) of each run at each
    checkpoint, with its interval as a band: over training, against the fixed panel."""
    rows = []
    for c in data["curves"]:
        if side in c:
            v, lo, hi = _ci(c[side])
            rows.append({"run": f"{c['arm']} {c['run'][:8]}", "step": c["step"], "value": v, "low": lo, "high": hi})
    df = pd.DataFrame(rows)
    if df.empty:
        st.caption(f"{title}: nothing to draw")
        return
    base = alt.Chart(df, title=title).encode(x=alt.X("step:Q", title="checkpoint step", axis=STEP_AXIS),
                                             color=alt.Color("run:N", title=None, legend=alt.Legend(orient="top")))
    band = base.mark_area(opacity=0.18).encode(
        y=alt.Y("low:Q", title="logits vs the base model", axis=alt.Axis(format="+.2~f")), y2="high:Q")
    line = base.mark_line(point=True, strokeWidth=2.5).encode(
        y="value:Q", tooltip=["run", alt.Tooltip("step:Q", format="d"), alt.Tooltip("value:Q", format="+.2f"),
                              alt.Tooltip("low:Q", format="+.2f"), alt.Tooltip("high:Q", format="+.2f")])
    st.altair_chart((band + line).properties(height=height), width="stretch", height=height + 60)
