"""The supervisor's restart rule over its input space (hypothesis): whatever failures come, in whatever order, it
restarts only transient ones, at most N times, never the same failure at the same step twice; its backoff doubles
from the base and never exceeds 10 minutes."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

from populora.platform.jobs.restart import BACKOFF_MAX_S, Failure, backoff_s, decide  # noqa: E402

failures = st.builds(Failure, cause=st.sampled_from(["killed (SIGKILL)", "worker lost", "store unreachable", "exit 1"]),
                     step=st.one_of(st.none(), st.integers(1, 5)), message=st.just("m"), transient=st.booleans())


@given(seq=st.lists(failures, max_size=12), max_restarts=st.integers(0, 6))
def test_restarts_are_transient_bounded_and_never_repeat_a_failure_at_a_step(seq, max_restarts):
    history: list[dict] = []
    for failure in seq:  # each attempt's failure, as long as the supervisor restarts
        go, why = decide(failure, history, max_restarts)
        if not go:
            assert why or (failure.transient and max_restarts == 0)  # each refusal says why (none asked: silent)
            break
        assert failure.transient
        assert (failure.cause, failure.step) not in {(h["cause"], h["step"]) for h in history}
        history.append({"cause": failure.cause, "step": failure.step})
    assert len(history) <= max_restarts
    if seq and max_restarts > len(history) and len(history) < len(seq):  # it stopped early: a reason it can name
        stopped_at = seq[len(history)]
        assert not stopped_at.transient or (stopped_at.cause, stopped_at.step) in {(h["cause"], h["step"]) for h in history}


@given(base=st.floats(min_value=0.01, max_value=1000, allow_nan=False), n=st.integers(1, 40))
def test_backoff_doubles_from_its_base_up_to_ten_minutes(base, n):
    assert backoff_s(1, base) == min(base, BACKOFF_MAX_S)
    assert backoff_s(n, base) <= BACKOFF_MAX_S
    assert backoff_s(n + 1, base) == min(BACKOFF_MAX_S, 2 * backoff_s(n, base)) or backoff_s(n, base) == BACKOFF_MAX_S
