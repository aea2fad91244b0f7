"""Tasks: browse what teachers proposed and how students answered, one page of tasks at a time.

Task and answer tables are logged per step, so only the chosen steps are read (a long run holds 10k+ tasks)."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from populora.platform.store import runlayout as rl
from populora.training import proposal_prefill
from populora.ui import common, store
from populora.ui.task_reasons import reason_counts, reason_kind, reason_text, task_title

st.title("Tasks")

METRIC_COLUMNS = ["metric_ast_depth", "metric_cyclomatic", "metric_loc", "metric_variables", "metric_novel_structure"]


ALL_STEPS_AT_ONCE = 20  # up to this many steps are all shown by default; longer runs start on the last step


def pick_steps(steps: list[int]) -> list[int]:
    """A range of steps, every logged step available (default: all of them, or the last one on a long run)."""
    if len(steps) == 1:
        st.caption(f"step {steps[0]} (the only step logged so far)")
        return steps
    default = (steps[0], steps[-1]) if len(steps) <= ALL_STEPS_AT_ONCE else (steps[-1], steps[-1])
    lo, hi = st.select_slider(f"Steps ({len(steps)} logged: {steps[0]}–{steps[-1]})", options=steps, value=default, key="tk_steps",
                              help="Only the chosen steps' tables are read from the store")
    return [s for s in steps if lo <= s <= hi]


def filters(tasks: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    cols = st.columns(4)
    kinds = cols[0].multiselect("kind", sorted(tasks["kind"].dropna().unique()), placeholder="all kinds", key="tk_kind")
    teachers = cols[1].multiselect("teacher", sorted(tasks["teacher"].dropna().unique()), placeholder="all teachers", key="tk_teacher")
    students = cols[2].multiselect("answered by student", sorted(answers["member"].unique()) if not answers.empty else [],
                                   placeholder="any student", key="tk_student")
    validity = cols[3].radio("validity", ["all", "valid", "invalid"], horizontal=True, key="tk_valid")
    cols = st.columns([3, 2, 3, 3])
    lo, hi = cols[0].slider("solve rate", 0.0, 1.0, (0.0, 1.0), step=0.05, key="tk_rate")
    unrated = cols[1].checkbox("unrated too", value=True, key="tk_unrated", help="Invalid or unanswered tasks have no solve rate")
    text = cols[2].text_input("program contains", key="tk_text")
    reasons = cols[3].multiselect("invalid because", sorted(tasks["reason_kind"].unique()) if "reason_kind" in tasks else [],
                                  placeholder="any reason", key="tk_reason")
    shown = tasks
    if kinds:
        shown = shown[shown["kind"].isin(kinds)]
    if teachers:
        shown = shown[shown["teacher"].isin(teachers)]
    if students:
        shown = shown[shown["task_id"].isin(set(answers.loc[answers["member"].isin(students), "task_id"]))]
    if validity != "all":
        shown = shown[shown["valid"].astype(bool) == (validity == "valid")]
    rate = pd.to_numeric(shown["solve_rate"], errors="coerce")
    in_range = rate.between(lo, hi)
    shown = shown[in_range | (rate.isna() & unrated)]
    if text:
        shown = shown[shown["program"].fillna("").str.contains(text, regex=False)]
    if reasons:
        shown = shown[shown["reason_kind"].isin(reasons)]
    return shown


def why_invalid(tasks: pd.DataFrame) -> None:
    """How many of the chosen steps' tasks were invalid, and why, grouped by kind of failure."""
    counts = reason_counts(tasks)
    n_invalid = int((~tasks["valid"].astype(bool)).sum())
    with st.container(border=True):
        st.markdown(f"**Why tasks were invalid**: {n_invalid} of {len(tasks)} tasks of these steps")
        if counts.empty:
            st.caption("every task of these steps was valid")
            return
        st.dataframe(counts, hide_index=True, width="stretch",
                     column_config={"reason": st.column_config.TextColumn("reason (the verifier's, grouped)", width="large"),
                                    "share": st.column_config.NumberColumn("share of invalid", format="percent")})
        st.caption("Pick a reason under *invalid because* to list those tasks; each task shows the verifier's full "
                   "reason and the teacher's raw completion.")


def paginate(df: pd.DataFrame) -> pd.DataFrame:
    cols = st.columns([1, 1, 4])
    size = cols[0].selectbox("per page", [10, 25, 50], key="tk_size")
    pages = max(1, -(-len(df) // size))
    page = cols[1].number_input(f"page (of {pages})", min_value=1, max_value=pages, value=1, step=1, key="tk_page")
    cols[2].caption(f"{len(df)} tasks match · showing {min(len(df), (page - 1) * size + 1)}–{min(len(df), page * size)}")
    return df.iloc[(page - 1) * size: page * size]


def _list(cell) -> list:
    if isinstance(cell, list):
        return cell
    try:
        value = json.loads(cell) if isinstance(cell, str) and cell.strip().startswith("[") else []
    except json.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []


def task_view(task, answers: pd.DataFrame, fmt: str = "direct") -> None:
    left, right = st.columns([3, 2])
    left.code(task.get("program") or "(no program parsed)", language="python", wrap_lines=True)
    with right:
        if task.get("kind") == "code_f":
            pairs = list(zip(_list(task.get("inputs")), _list(task.get("outputs"))))
            st.markdown("**inputs → outputs**")
            st.code("\n".join(f"f({i}) = {o}" for i, o in pairs) or "(none ran)", language="text")
            if task.get("message"):
                st.markdown(f"**message to the student**: {task['message']}")
        else:
            st.markdown("**input**")
            st.code(str(task.get("input", "")), language="text")
            st.markdown("**output** (computed in the sandbox)")
            st.code(str(task.get("output", "")), language="text")
        st.markdown("**verifier**")
        st.code(reason_text(task.get("reason")), language="text", wrap_lines=True)
        metrics = {c.removeprefix("metric_"): task.get(c) for c in METRIC_COLUMNS if c in task and not pd.isna(task.get(c))}
        if metrics:
            st.caption(" · ".join(f"{k} {v:g}" for k, v in metrics.items()))
    completion = task.get("completion")
    if isinstance(completion, str) and completion and st.toggle("show the teacher's raw completion", key=f"cmp_{task['task_id']}",
                                                                 value=not task.get("valid")):
        prefill = proposal_prefill(str(task.get("kind")), fmt)
        st.caption(f"what the teacher wrote, before parsing (reasoning included), after the prompt's prefill "
                   f"{common.code_span(prefill)}, shown first: the model continued from there ({fmt} format)")
        st.code(prefill + completion, language="text", wrap_lines=True)
    mine = answers[answers["task_id"] == task["task_id"]] if not answers.empty else answers
    if mine.empty:
        st.caption("no student answers (invalid tasks are not solved)")
        return
    st.dataframe(mine[[c for c in ["member", "answer", "correct", "verdict", "reward"] if c in mine.columns]],
                 hide_index=True, width="stretch")
    if st.toggle("show answer texts", key=f"txt_{task['task_id']}"):
        for a in mine.itertuples():
            st.caption(f"{a.member} · {'correct' if a.correct else 'wrong'} · {a.verdict}")
            st.code(str(getattr(a, "text", "")), language="text", wrap_lines=True)


def table_cells(df: pd.DataFrame) -> pd.DataFrame:
    """The task table as shown: rates in %, reasons with the status said once, "–" where nothing was measured
    (an invalid task has no solve rate; a NaN number cell reads "None")."""
    out = df.assign(solve_rate=df["solve_rate"].map(common.fmt_rate)) if "solve_rate" in df else df.copy()
    if "reason" in out:
        out["reason"] = [reason_text(r) if r else "" for r in out["reason"]]
    for col in METRIC_COLUMNS:
        if col in out:
            out[col] = [("–" if pd.isna(v) else f"{v:g}") for v in pd.to_numeric(out[col], errors="coerce")]
    return out


def main() -> None:
    runs = common.load_runs()
    if runs.empty:
        common.empty_state()
        return
    run_id = common.pick_run(runs)
    uri = store.uri()
    steps = store.table_steps(uri, run_id, "tasks")
    if not steps:
        st.info("No task tables yet: the trainer logs each step's tasks at its checkpoint.")
        return
    chosen = pick_steps(steps)
    tasks = store.tables(uri, run_id, "tasks", chosen)
    answers = store.tables(uri, run_id, "answers", chosen)
    if tasks.empty:
        st.info("These steps logged no tasks.")
        return
    tasks = tasks.assign(solve_rate=pd.to_numeric(tasks["solve_rate"], errors="coerce").astype(float),
                         reason=tasks["reason"] if "reason" in tasks else "")
    tasks = tasks.assign(reason_kind=[reason_kind(r) if not v else "" for r, v in zip(tasks["reason"], tasks["valid"].astype(bool))])
    why_invalid(tasks)
    shown = filters(tasks, answers)
    page = paginate(shown)
    st.dataframe(table_cells(page[[c for c in ["task_id", "step", "kind", "teacher", "valid", "reason", "solve_rate", *METRIC_COLUMNS]
                                   if c in page.columns]]),
                 hide_index=True, width="stretch",
                 column_config={"solve_rate": st.column_config.TextColumn("solve rate"),
                                "reason": st.column_config.TextColumn("verifier's reason", width="large"),
                                **{c: c.removeprefix("metric_").replace("_", " ") for c in METRIC_COLUMNS}})
    fmt = ((store.run_info(uri, run_id) or {}).get("tags") or {}).get(rl.TASKS_FORMAT, "direct")
    for i, (_, task) in enumerate(page.iterrows()):
        with st.expander(task_title(task), expanded=i == 0):
            task_view(task, answers, fmt)


main()
