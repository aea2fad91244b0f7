"""The League page's tables and charts, from a league's results (``league.json``, written by ``populora league``).

Display only: every number here is the league's (``evaluation.league_summary``); these functions lay them out as
frames and Altair charts and compute nothing new."""

from __future__ import annotations

import json
import time
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from populora.platform.jobs import jobs, queue, state
from populora.training import LEAGUE_PROGRESS_FILE
from populora.ui import common
from populora.ui.charts import STEP_AXIS

# the tables' columns by how they are shown (``table``)
LOGITS = ("ability", "strength", "difficulty", "ci low", "ci high")
RATES = ("solve rate", "validity rate", "solved by the league")
MU = "TrueSkill mu (in its run)"
# the arms apart at a glance, in colour and in marker (the page drew them as two near-identical blues)
ARM_COLORS = {"population": "#4e79a7", "baseline": "#e15759", "base": "#79706e"}
ARM_SHAPES = {"population": "circle", "baseline": "square", "base": "triangle-up"}
NOTE = "why a bound is 0"


def _ci(est: dict) -> tuple:
    lo, hi = (est.get("ci95") or [None, None])
    return est.get("value"), lo, hi


def ci_text(lo, hi) -> str:
    """An interval as the text says it, "–" where there is none (the anchor: the scale's zero).

    >>> ci_text(-1.2, 2.5), ci_text(None, None)
    ('-1.20 to +2.50', '–')
    """
    return "–" if lo is None or hi is None else f"{lo:+.2f} to {hi:+.2f}"


def abilities(data: dict) -> pd.DataFrame:
    """One row per student, strongest first: ability with its interval (text: the anchor has none, and a blank
    number cell reads "None"), solve rate, the within-run TrueSkill."""
    rows = []
    for s in data["students"]:
        v, lo, hi = _ci(s["ability"])
        rows.append({"student": s["id"], "arm": s["arm"], "step": s["step"], "member": s["member"], "ability": v,
                     "95% CI": ci_text(lo, hi), "solve rate": s["solve_rate"], "answers": s["answers"],
                     MU: mu_text(s), NOTE: s["ability"].get("note", "")})
    return pd.DataFrame(rows).sort_values("ability", ascending=False, ignore_index=True)


def mu_text(entrant: dict) -> str:
    """The within-run TrueSkill mu to two decimals, "–" where none was rated (the base model; the single-agent
    baseline, whose self-play is not rated: ``league_plan.rated``; leagues from before that kept its 25.00 prior).

    >>> mu_text({"mu": 27.123, "arm": "population"}), mu_text({"mu": None, "arm": "base"}), mu_text({"mu": 25.0, "arm": "baseline"})
    ('27.12', '–', '–')
    """
    mu = entrant.get("mu")
    return "–" if mu is None or entrant.get("arm") == "baseline" and mu == 25.0 else f"{mu:.2f}"


def rate_ci_text(lo, hi) -> str:
    """A rate's interval in %, with the decimals its ends need to read apart ("0% to 0%" of 0 valid of 1,000).

    >>> rate_ci_text(0.0, 0.5615), rate_ci_text(0.0, 0.0038), rate_ci_text(None, None)
    ('0% to 56%', '0.0% to 0.4%', '-')
    """
    if lo is None or hi is None:
        return "-"
    digits = next((d for d in range(0, 4) if f"{lo:.{d}%}" != f"{hi:.{d}%}"), 4)
    return f"{lo:.{digits}%} to {hi:.{digits}%}"


def without_strength(data: dict) -> list[str]:
    """The teachers with no valid task on the panel, hence no strength: "id (valid v/p)" each, for a line under the
    table (in it, their empty cells read "None")."""
    return [f"{t['id']} (valid {t.get('valid', 0)}/{t.get('proposed', 0)})" for t in data["teachers"]
            if t["strength"].get("value") is None]


def teachers(data: dict) -> pd.DataFrame:
    """One row per teacher with a strength (mean difficulty of its valid panel tasks) with its interval, and
    validity; those without one: ``without_strength``."""
    rows = []
    for t in data["teachers"]:
        if t["strength"].get("value") is None:
            continue
        v, lo, hi = _ci(t["strength"])
        vlo, vhi = t.get("validity_ci95") or [None, None]
        rows.append({"teacher": t["id"], "arm": t["arm"], "step": t["step"], "member": t["member"], "strength": v,
                     "ci low": lo, "ci high": hi, "panel tasks": t["tasks"], "validity rate": t["validity_rate"],
                     "validity ci": rate_ci_text(vlo, vhi),
                     "valid / proposed": f"{t.get('valid', 0)}/{t.get('proposed', 0)}",
                     "solved by the league": t["solve_rate"], MU: mu_text(t), NOTE: t["strength"].get("note", "")})
    return pd.DataFrame(rows)


def table(df: pd.DataFrame) -> None:
    """One of the tables above, its numbers as the text says them: logits signed to two decimals, rates in %,
    TrueSkill to two decimals (the frame keeps the full values: sorting and download)."""
    config = {c: st.column_config.NumberColumn(c, format="%+.2f") for c in LOGITS if c in df}
    config |= {c: st.column_config.NumberColumn(c, format="percent") for c in RATES if c in df}
    if NOTE in df and not df[NOTE].astype(bool).any():
        df = df.drop(columns=NOTE)  # no bound is a tie at 0: no empty column
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
            rows.append({"run": f"{c['arm']} {c['run'][:8]}", "arm": c["arm"], "step": c["step"], "value": v,
                         "low": lo, "high": hi})
    df = pd.DataFrame(rows)
    if df.empty:
        st.caption(f"{title}: nothing to draw")
        return
    st.altair_chart(curves_chart(df, title).properties(height=height), width="stretch", height=height + 60)


def arm_scales(arms: list[str]) -> tuple[alt.Scale, alt.Scale]:
    """(colour, marker) scales of the arms: ``ARM_COLORS`` / ``ARM_SHAPES``, the same arm the same everywhere."""
    arms = [a for a in ARM_COLORS if a in arms] + sorted(set(arms) - set(ARM_COLORS))
    return (alt.Scale(domain=arms, range=[ARM_COLORS.get(a, "#bab0ac") for a in arms]),
            alt.Scale(domain=arms, range=[ARM_SHAPES.get(a, "diamond") for a in arms]))


def curves_chart(df: pd.DataFrame, title: str) -> alt.LayerChart:
    """The curves: one line per run (``detail``), coloured and marked by its arm, with its interval as a band."""
    color, shape = arm_scales(list(df["arm"].unique()))
    legend = alt.Legend(orient="top", title=None)
    base = alt.Chart(df, title=title).encode(x=alt.X("step:Q", title="checkpoint step", axis=STEP_AXIS),
                                             color=alt.Color("arm:N", scale=color, legend=legend), detail="run:N")
    band = base.mark_area(opacity=0.15).encode(
        y=alt.Y("low:Q", title="logits vs the base model", axis=alt.Axis(format="+.2~f")), y2="high:Q")
    line = base.mark_line(strokeWidth=2.5).encode(y="value:Q")
    points = base.mark_point(size=90, filled=True).encode(
        y="value:Q", shape=alt.Shape("arm:N", scale=shape, legend=legend),
        tooltip=["run", alt.Tooltip("step:Q", format="d"), alt.Tooltip("value:Q", format="+.2f"),
                 alt.Tooltip("low:Q", format="+.2f"), alt.Tooltip("high:Q", format="+.2f")])
    return band + line + points


# ====================================================================== leagues on their way (the job queue)
def league_jobs() -> list[jobs.Job]:
    """League jobs (``populora league`` queues one) still queued or running, newest first."""
    return [j for j in jobs.list_jobs() if j.kind == "league" and j.status in queue.ACTIVE]


def job_out(job: jobs.Job) -> Path | None:
    """The league's out dir, as its argv names it (``--out``: the CLI always passes one to the job)."""
    argv = list(job.argv)
    return Path(argv[argv.index("--out") + 1]) if "--out" in argv[:-1] else None


def job_line(job: jobs.Job, now: float | None = None) -> tuple[str, float | None]:
    """(one line on a queued or running league: its status, place in line, phase and (student, task) pairs
    answered, ETA at its pace; the fraction done, None before the answers start)."""
    status = state.of_job(job)  # one state machine (platform/jobs/state.py): "stopping" once a stop was sent
    line = f"{state.icon(status)} **{job.name or job.id}** · {status}"
    if status == state.QUEUED:
        place = queue.position(job)
        return line + (f" · #{place} in line" if place else "") + f" for one of {job.slots} slot(s)", None
    if status == state.STOPPING:
        return line + " · its panel and finished answers are kept (the same command resumes it)", None
    out = job_out(job)
    try:
        progress = json.loads((out / LEAGUE_PROGRESS_FILE).read_text()) if out else None
    except (OSError, ValueError):
        progress = None
    if not progress or not progress.get("pairs"):
        phase = "writing the task panel" if out and (out / "entrants.json").is_file() else "loading the entrants"
        return line + f" · {phase} · {common.fmt_duration((now or time.time()) - job.created)} so far", None
    done, total = int(progress["pairs_done"]), int(progress["pairs"])
    return line + f" · answered {done}/{total} (student, task) pairs", done / total
