"""A stop, one meaning everywhere: Ctrl-C and the UI's Stop (SIGINT to the job's process group), ``kill``,
``docker stop`` and Ray's stop_job (SIGTERM) all reach Python as a KeyboardInterrupt, which the trainer and
``populora eval`` treat as a stop (the run ended KILLED, one line saying how to resume), and the process exits
with the shell's code of the signal, 128 + signum: 130 for SIGINT, 143 for SIGTERM. ``populora train`` / ``eval``
(cli/training.py, evaluation/cli.py) and the job supervisor (supervisor.py) stop through here; a job's status reads the codes back
with ``is_stop_code``.
"""

from __future__ import annotations

import signal

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class Stopped(KeyboardInterrupt):
    """A stop signal turned into the KeyboardInterrupt the trainer treats as a stop; remembers its signal."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


_received: int | None = None  # the stop signal this process got (kept: a raise can be swallowed, see check())


def raise_stopped(signum, frame) -> None:
    """A signal handler: the signal becomes ``Stopped``, and is remembered for ``check``."""
    global _received
    _received = signum
    raise Stopped(signum)


def check() -> None:
    """Raise ``Stopped`` again if a stop signal came and the process carried on anyway.

    A signal handler runs between two bytecodes of whatever the main thread is executing; when that is a finalizer
    (``__del__``, a weakref callback: garbage collection runs them anywhere, model loading makes plenty) Python prints
    "Exception ignored in ..." and goes on, so the stop is lost (seen in CI: a SIGTERM while the model loaded, then 50
    steps trained and exit 0). The trainer calls this at its phase boundaries, so a lost stop is honoured there."""
    if _received is not None:
        raise Stopped(_received)


def stop_on_sigterm() -> None:
    """SIGTERM stops the process like Ctrl-C (Python already turns SIGINT into a KeyboardInterrupt)."""
    signal.signal(signal.SIGTERM, raise_stopped)


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
