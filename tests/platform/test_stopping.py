"""A stop signal is honoured even where its KeyboardInterrupt was swallowed (populora.platform.jobs.stopping)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from populora.platform.jobs import stopping

# A finalizer that receives SIGTERM: the handler's raise happens inside __del__, where Python prints
# "Exception ignored in ..." and carries on, as it did in CI while the model loaded.
SWALLOWED = """
import gc, os, signal, sys, time
from populora.platform.jobs import stopping
signal.signal(signal.SIGTERM, stopping.raise_stopped)
if sys.argv[1:2] == ["installed"]:
    stopping.stop_on_sigterm()

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the handler runs at the loop's next check, still inside __del__
            pass

Finalized()
gc.collect()
if sys.argv[1:] == ["installed", "check-first"]:  # a step boundary right after: check raises before the resend
    try:
        stopping.check()
    except KeyboardInterrupt:
        for _ in range(40):  # the stop's cleanup, well past the resend's time: the resend must not land here
            time.sleep(0.05)
        print("cleaned up", flush=True)
        sys.exit(143)
# the rest of a step: long with the stop installed (its resend must end it), a moment without (only check can)
try:
    for _ in range(2400 if sys.argv[1:2] == ["installed"] else 5):
        time.sleep(0.05)
except KeyboardInterrupt as err:
    print("stopped in the step", type(err).__name__, stopping.stop_code(err), flush=True)
    for _ in range(40):  # what a stop does next (end the run): no second stop may land here
        time.sleep(0.05)
    stopping.check()  # and the trainer's next check raises it again, as before
    print("not reached", flush=True)
print("carried on", flush=True)
try:
    stopping.check()
except KeyboardInterrupt as err:
    print("check raised", type(err).__name__, stopping.stop_code(err), flush=True)
    sys.exit(stopping.stop_code(err))
print("check passed", flush=True)
"""


def test_a_stop_swallowed_by_a_finalizer_is_raised_again_by_check():
    out = subprocess.run([sys.executable, "-c", SWALLOWED], capture_output=True, text=True, timeout=120)
    assert "Exception ignored" in out.stderr and "Stopped: signal 15" in out.stderr, out.stderr  # the raise was lost
    assert out.stdout.splitlines() == ["carried on", "check raised Stopped 143"], (out.stdout, out.stderr)
    assert out.returncode == 128 + signal.SIGTERM


def test_with_the_stop_installed_a_swallowed_stop_prints_nothing_and_is_raised_in_the_step():
    """``stop_on_sigterm``'s unraisable hook: no "Exception ignored ... Traceback" in a stopped run's log (seen in
    CI: a SIGTERM while the model loaded), and the stop is sent again and raised in the code that follows, not held
    until the step ends (up to 120 s here: only the resend can end it; a paper-scale step is minutes, past Ray's
    30 s grace). It lands once: the cleanup after it is not interrupted again."""
    out = subprocess.run([sys.executable, "-c", SWALLOWED, "installed"], capture_output=True, text=True, timeout=300)
    assert out.stderr.strip().splitlines()[-1:] == ["populora.platform.jobs.stopping.Stopped: signal 15"], out.stderr
    assert "Exception ignored" not in out.stderr, out.stderr
    assert out.stdout.splitlines() == ["stopped in the step Stopped 143"], (out.stdout, out.stderr)
    assert out.returncode == 1  # the check after the cleanup raised the stop again, uncaught


def test_a_swallowed_stop_raised_by_check_first_is_not_sent_again_into_its_cleanup():
    out = subprocess.run([sys.executable, "-c", SWALLOWED, "installed", "check-first"], capture_output=True, text=True,
                         timeout=300)
    assert (out.stdout, out.stderr, out.returncode) == ("cleaned up\n", "", 143)


# Any other exception a finalizer raises is still printed (the hook hands it on), and SIGINT is remembered like
# SIGTERM where Python's own handler had it, left ignored where it was ignored. The child sets the disposition it
# starts with itself: Python installs its handler only where SIGINT was not ignored at exec, and a shell starts a
# background job (`make test &`, nohup, a CI runner without job control) with SIGINT ignored.
OTHERS = """
import gc, signal, sys
from populora.platform.jobs import stopping
signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[1] == "ignored" else signal.default_int_handler)
stopping.stop_on_sigterm()
stopping.stop_on_sigterm()  # twice: one hook, not two
class Broken:
    def __del__(self):
        raise ValueError("a finalizer's own error")
Broken()
gc.collect()
handler = signal.getsignal(signal.SIGINT)
print("raise_stopped" if handler is stopping.raise_stopped else "ignored" if handler is signal.SIG_IGN else handler)
"""


@pytest.mark.parametrize("start, handler", [("default", "raise_stopped"), ("ignored", "ignored")])
def test_other_finalizer_errors_still_print_and_sigint_is_kept_as_started(start, handler):
    out = subprocess.run([sys.executable, "-c", OTHERS, start], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == handler, (out.stdout, out.stderr)
    assert out.stderr.count("Exception ignored") == 1 and "ValueError: a finalizer's own error" in out.stderr, out.stderr


def test_check_passes_while_no_stop_came():
    stopping.check()  # this process installed no handler and got no signal


def test_the_handler_raises_at_once_and_check_raises_after(monkeypatch):
    monkeypatch.setattr(stopping, "_received", None)
    with pytest.raises(stopping.Stopped) as first:
        stopping.raise_stopped(signal.SIGINT, None)
    assert first.value.signum == signal.SIGINT
    with pytest.raises(stopping.Stopped) as again:
        stopping.check()
    assert stopping.stop_code(again.value) == 130
