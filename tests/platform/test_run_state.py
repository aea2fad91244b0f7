"""The one state machine of runs and jobs (platform/jobs/state.py), over its whole input space (hypothesis): every
input gives one of its states, a stop sent to an active job reads stopping (unless the trainer is silent: it holds
the run whatever waits), a resume waiting or loading reads resume queued / resuming, a run the store says running
whose job ended without ending it reads crashed, and nothing else overrides the store."""

from hypothesis import given
from hypothesis import strategies as st

from populora.platform.jobs import state as S

stores = st.sampled_from([None, *S.STORE])
job_statuses = st.sampled_from([None, *S.JOB])


@given(store=stores, job=job_statuses, stop=st.booleans(), resume=st.booleans())
def test_run_state_over_its_inputs(store, job, stop, resume):
    got = S.run_state(store, job, stop, resume)
    assert got in S.STATES and got != S.LOST  # lost is a job's only
    active = job in S.ACTIVE_JOB
    if store == S.SILENT:
        assert got == S.SILENT
    elif active and stop:
        assert got == S.STOPPING
    elif store is None:
        assert got in (S.QUEUED, S.STARTING, S.FINISHED, S.FAILED, S.STOPPED)
        assert (got == S.QUEUED) == (job == S.QUEUED)
    elif store == S.RUNNING:
        assert got == (S.CRASHED if job in (S.FAILED, S.LOST, S.STOPPED) else S.RUNNING)
    elif active and resume and store in S.RESUMABLE:
        assert got == (S.RESUME_QUEUED if job == S.QUEUED else S.RESUMING)
    else:
        assert got == store  # the store's word stands


@given(job=st.sampled_from(S.JOB), stop=st.booleans())
def test_job_state_over_its_inputs(job, stop):
    got = S.job_state(job, stop)
    assert got == (S.STOPPING if stop and job in S.ACTIVE_JOB else job)


@given(state=st.sampled_from(S.STATES), place=st.one_of(st.none(), st.integers(1, 99)))
def test_every_state_has_an_icon_and_a_label_that_reads_back(state, place):
    text = S.label(state, place)
    assert text.split(" (#")[0] == state and S.icon(text) == S.ICONS[state]
    assert ("(#" in text) == (place is not None and state in (S.QUEUED, S.RESUME_QUEUED))
