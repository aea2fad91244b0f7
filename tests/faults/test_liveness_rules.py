"""The liveness rule over its input space (hypothesis): when a reader calls a run crashed, and that a kill -9'd
trainer with the default settings is shown crashed within the issue's 3 minutes and never while it beats."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

from populora.platform.jobs import heartbeat
from populora.platform.jobs.heartbeat import BEATS, Beat, is_stale, shown_status  # noqa: E402

seconds = st.floats(min_value=0.01, max_value=1e6, allow_nan=False)
times = st.floats(min_value=0, max_value=2e9, allow_nan=False)
STATUSES = ("running", "finished", "failed", "stopped", "killed")


@given(t=times, every=seconds, limit=seconds, age=st.floats(min_value=-1e6, max_value=1e7, allow_nan=False))
def test_stale_exactly_past_the_limit_and_three_beats(t, every, limit, age):
    beat = Beat(t, every, 1, 0.0, "h")
    assert is_stale(beat, t + age, limit) == (t + age - t > max(limit, BEATS * every))


@given(t=times, age=st.floats(min_value=0, max_value=1e7, allow_nan=False), status=st.sampled_from(STATUSES),
       limit=seconds)
def test_only_a_running_run_is_ever_shown_crashed(t, age, status, limit):
    tags = {heartbeat.TAG: Beat(t, 20.0, 1, 0.0, "h").text()}
    shown = shown_status(status, tags, t + age, limit)
    assert shown == status or (status == "running" and shown == heartbeat.CRASHED)
    assert shown_status(status, {}, t + age, limit) == status  # no beat (older runs): nothing to go by


@given(kill=times, since_beat=st.floats(min_value=0, max_value=heartbeat.EVERY_S, allow_nan=False),
       alive_for=st.floats(min_value=0, max_value=heartbeat.EVERY_S, allow_nan=False))
def test_defaults_show_a_killed_trainer_crashed_within_3_minutes_and_a_live_one_never(kill, since_beat, alive_for):
    """A live trainer's last beat is at most ``EVERY_S`` old; a killed one's last beat was at most ``EVERY_S``
    before the kill. With the defaults it is crashed by ``LIMIT_S`` + a tick after the kill, under 180 s."""
    last = kill - since_beat
    beat = Beat(last, heartbeat.EVERY_S, 1, 0.0, "h")
    assert not is_stale(beat, last + alive_for, heartbeat.LIMIT_S)
    assert is_stale(beat, kill + heartbeat.LIMIT_S + 1, heartbeat.LIMIT_S)
    assert heartbeat.LIMIT_S + 1 <= 180


@given(text=st.text(max_size=60).filter(lambda s: not s.lstrip().startswith("{")))
def test_a_garbled_tag_is_no_beat_and_never_an_error(text):
    assert Beat.parse(text) is None
    assert shown_status("running", {heartbeat.TAG: text}, 1e9, 1.0) == "running"


@given(t=times, every=seconds, pid=st.integers(1, 2**22), started=times, host=st.text(min_size=1, max_size=20))
def test_a_beat_reads_back_as_written(t, every, pid, started, host):
    back = Beat.parse(Beat(t, every, pid, started, host).text())
    assert (back.every, back.pid, back.started, back.host) == (every, pid, started, host) and abs(back.t - t) <= 5e-4
