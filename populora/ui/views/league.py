"""League: members of runs at checkpoints, their baseline and the base model on one scale of student ability and
task difficulty, measured on a fixed task panel (``populora league``)."""

from __future__ import annotations

import streamlit as st

from populora.platform.jobs import state
from populora.platform.store import runlayout as rl
from populora.ui import league_view as V
from populora.ui import store

st.title("League")
st.caption("Every entrant student answers the same fixed panel of tasks written by the entrant teachers; a Rasch fit "
           "puts abilities and difficulties on one scale in logits, the base model at 0 (P(solve) = "
           "sigmoid(ability − difficulty)). Intervals: 95% bootstrap over tasks and answers, widened where the "
           "fit's own curvature (the answers' noise) says more, so alike answers never read as a zero-width interval.")

uri = store.uri()


def on_their_way() -> None:
    """Leagues in the queue or playing (their MLflow run exists only once the fit is done): each with its
    progress, refreshed while any is; the page reloads when one ends (its results are in the store then)."""
    running = V.league_jobs()
    for job in running:
        line, fraction = V.job_line(job)
        ends = "" if state.of_job(job) == state.STOPPING else " Its results appear here when the fit is done."
        st.info(line + "." + ends)
        if fraction is not None:
            st.progress(min(1.0, fraction))
    if st.session_state.get("league_jobs") and not running:
        st.session_state["league_jobs"] = 0
        st.cache_data.clear()
        st.rerun(scope="app")
    st.session_state["league_jobs"] = len(running)


playing = V.league_jobs()
st.fragment(on_their_way, run_every="3s" if playing else None)()
leagues = store.league_runs(uri)
if not leagues:
    if not playing:
        st.info("No league yet. Play one with `populora league --runs POPULATION_RUN,BASELINE_RUN`.")
    st.stop()

shown = {lg["run_id"]: state.of_mlflow(lg["status"]) for lg in leagues}  # one state machine: KILLED reads stopped
labels = {lg["run_id"]: f"{lg['league']} · runs {lg['runs']} · {state.icon(shown[lg['run_id']])} {shown[lg['run_id']]}"
          for lg in leagues}
wanted = st.query_params.get("league")
ids = list(labels)
chosen = st.selectbox("league", ids, index=ids.index(wanted) if wanted in ids else 0, format_func=labels.get)
data = store.artifact_json(uri, chosen, rl.LEAGUE_RESULTS)
if not data:
    st.warning("This league has no results yet (it is still playing, or it stopped before the fit).")
    st.stop()

spec = data.get("spec", {})
st.markdown(f"**{len(data['students'])} students, {len(data['teachers'])} teachers, panel of {data['panel_size']} tasks** "
            f"({spec.get('answers')} answers per student and task, model {data['model']}, {data['n_boot']} bootstrap "
            f"replicates, seed {data['seed']}); runs read: {', '.join(data['runs'])}")

st.subheader("Population vs baseline")
if not data["comparisons"]:
    st.info("No population-vs-baseline line: this league has no population or no baseline.")
for c in data["comparisons"]:
    lo, hi = c["ci95"]
    (st.info if lo is None or lo <= 0 <= hi else st.success)(c["words"])

left, right = st.columns(2)
with left:
    V.curves(data, "student_ability", "students' mean ability over checkpoints")
with right:
    V.curves(data, "teacher_strength", "teachers' mean task difficulty over checkpoints")

st.subheader("Students: ability")
V.table(V.abilities(data))
st.subheader("Teachers: strength and validity")
st.caption("Strength: the mean difficulty of the teacher's valid panel tasks; validity: the share of its proposals "
           "the sandbox accepted. A teacher can be strong by writing hard tasks and weak by writing few valid ones.")
if not V.teachers(data).empty:
    V.table(V.teachers(data))
if V.without_strength(data):
    st.caption("No valid task on the panel, so no strength: " + ", ".join(V.without_strength(data)))
st.subheader("Teacher × student solve rate")
V.heatmap(data)
with st.expander(f"Task difficulties ({data['panel_size']} panel tasks)"):
    V.table(V.difficulties(data))
