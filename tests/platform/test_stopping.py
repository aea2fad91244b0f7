"""A stop signal is honoured even where its KeyboardInterrupt was swallowed (populora.platform.stopping)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from populora.platform import stopping

# A finalizer that receives SIGTERM: the handler's raise happens inside __del__, where Python prints
# "Exception ignored in ..." and carries on, as it did in CI while the model loaded.
SWALLOWED = """
import gc, os, signal, sys
from populora.platform import stopping
signal.signal(signal.SIGTERM, stopping.raise_stopped)

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the handler runs at the loop's next check, still inside __del__
            pass

Finalized()
gc.collect()
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
