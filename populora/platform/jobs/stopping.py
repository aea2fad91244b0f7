"""A stop, one meaning everywhere: Ctrl-C and the UI's Stop (SIGINT to the job's process group), ``kill``,
``docker stop`` and Ray's stop_job (SIGTERM) all reach Python as a KeyboardInterrupt, which the trainer and
``populora eval`` treat as a stop (the run ended KILLED, one line saying how to resume), and the process exits
with the shell's code of the signal, 128 + signum: 130 for SIGINT, 143 for SIGTERM. ``populora train`` / ``eval``
(cli/training.py, evaluation/cli.py) and the job supervisor (supervisor.py) stop through here; a job's status reads the codes back
with ``is_stop_code``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
# a stop a finalizer swallowed is sent again after this long, to land outside the finalizer (``quiet_swallowed_stop``)
RESEND_S = 0.25


class Stopped(KeyboardInterrupt):
    """A stop signal turned into the KeyboardInterrupt the trainer treats as a stop; remembers its signal."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


_received: int | None = None  # the stop signal this process got (kept: a raise can be swallowed, see check())
_resend = threading.Lock()    # held while a resend is decided and sent, so none lands after the stop was raised
_resend_armed = False         # a swallowed stop is waiting to be sent again


def raise_stopped(signum, frame) -> None:
    """A signal handler: the signal becomes ``Stopped``, and is remembered for ``check``."""
    global _received
    _received = signum
    _disarm()
    raise Stopped(signum)


def check() -> None:
    """Raise ``Stopped`` again if a stop signal came and the process carried on anyway.

    A signal handler runs between two bytecodes of whatever the main thread is executing; when that is a finalizer
    (``__del__``, a weakref callback: garbage collection runs them anywhere, model loading makes plenty) Python prints
    "Exception ignored in ..." and goes on, so the stop is lost (seen in CI: a SIGTERM while the model loaded, then 50
    steps trained and exit 0). With ``stop_on_sigterm`` installed the stop is sent again after ``RESEND_S`` (the next
    bytecode outside a finalizer raises it); without, or if that raise is swallowed too, the trainer calls this at its step
    boundaries, so a lost stop is honoured there at the latest."""
    if _received is not None:
        _disarm()
        raise Stopped(_received)


def _disarm() -> None:
    global _resend_armed
    with _resend:
        _resend_armed = False


def _resend_stop(signum: int) -> None:
    """Send the swallowed stop again, unless it was raised meanwhile (by the handler or ``check``)."""
    global _resend_armed
    with _resend:
        if _resend_armed:
            _resend_armed = False
            os.kill(os.getpid(), signum)


def stop_on_sigterm() -> None:
    """SIGTERM stops the process like Ctrl-C, and both are remembered for ``check``.

    SIGINT goes through the same handler only where Python's own handler has it (a process started with SIGINT
    ignored keeps ignoring it). A stop whose raise a finalizer swallowed is not printed as "Exception ignored in
    ... Traceback" (``quiet_swallowed_stop``): it is not an error, and ``check`` raises it again."""
    signal.signal(signal.SIGTERM, raise_stopped)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, raise_stopped)
    if getattr(sys.unraisablehook, "__wrapped__", None) is None:  # installed once
        sys.unraisablehook = quiet_swallowed_stop(sys.unraisablehook)


def quiet_swallowed_stop(hook):
    """``sys.unraisablehook`` that drops a ``Stopped`` raised inside a finalizer and sends that stop again after
    ``RESEND_S``, from a timer thread: the handler then runs at the main thread's next bytecode, almost always
    outside a finalizer, so a stop is not held until the step ends (a paper-scale step is minutes, past any grace:
    Ray's SIGKILL would leave the run RUNNING). ``_received`` keeps it for ``check`` all the same. Every other
    unraisable exception goes to ``hook``."""

    def quiet(unraisable) -> None:
        global _resend_armed
        if not isinstance(unraisable.exc_value, Stopped):
            hook(unraisable)
            return
        with _resend:
            _resend_armed = True
        timer = threading.Timer(RESEND_S, _resend_stop, (unraisable.exc_value.signum,))
        timer.daemon = True
        timer.start()

    quiet.__wrapped__ = hook
    return quiet


def stop_code(err: KeyboardInterrupt) -> int:
    """The shell's exit code of the stop: 128 + the signal (130 for Ctrl-C / SIGINT, 143 for SIGTERM).

    >>> stop_code(KeyboardInterrupt()), stop_code(Stopped(signal.SIGTERM))
    (130, 143)
    """
    return 128 + getattr(err, "signum", signal.SIGINT)


def is_stop_code(code: int) -> bool:
    """A process's exit code (``Popen.returncode``: -N when killed by signal N) that means it was stopped: it ended
    on the stop's KeyboardInterrupt (130 / 143), or the signal killed it before Python could catch it.

    >>> [is_stop_code(c) for c in (130, 143, -signal.SIGINT, -signal.SIGKILL, 1)]
    [True, True, True, False, False]
    """
    return code in {128 + s for s in STOP_SIGNALS} | {-s for s in STOP_SIGNALS}
