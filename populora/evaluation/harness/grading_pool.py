"""A bound on grading time that works in any thread: a few worker processes, each call with a wall-clock limit.

Math-Verify guards its ``parse`` and ``verify`` with ``signal.alarm``, which only works in the main thread: called
from a worker thread (batched evaluation scores each target in its own thread) it raises, and a grader that
catches that grades something else. So we switch those timeouts off (``parsing_timeout=None``,
``timeout_seconds=None``, as Math-Verify's docstrings ask) and bound the time here instead: every call runs in a
worker process; a call that overruns kills its worker (a fresh one takes its place) and reports a timeout. The
verdict is then the same in the main thread, a worker thread or a Ray actor: it is always computed in a worker
process by the same code.

Workers are started lazily, on the first call; ``close()`` (also run at exit) stops them.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading

START_TIMEOUT_S = 120.0  # a loaded 2-core machine can take seconds to start Python and import the grader
TIMEOUT = "timeout"
CRASH = "crash"


def _serve(fd: int, target: str) -> None:
    """Worker loop: receive args, send ("ok", fn(*args)) or ("error", message); None ends it."""
    import importlib
    from multiprocessing.connection import Connection

    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    conn = Connection(fd)
    conn.send("ready")  # the caller's time limit starts with the first call, not with our start-up
    while True:
        try:
            args = conn.recv()
        except EOFError:
            return
        if args is None:
            return
        try:
            conn.send(("ok", fn(*args)))
        except Exception as err:  # noqa: BLE001 - reported to the caller, which decides what an error means
            conn.send(("error", f"{type(err).__name__}: {err}"[:300]))


class _Worker:
    """A plain ``python -c`` child on one end of a socket pair. Not ``multiprocessing``: its spawn re-imports the
    caller's ``__main__``, which fails for any script without a ``__main__`` guard, and forking a process that
    holds a model and threads is unsafe."""

    def __init__(self, target: str):
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        mine, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the caller's imports
        code = "import sys; from populora.evaluation.harness.grading_pool import _serve; _serve(int(sys.argv[1]), sys.argv[2])"
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(theirs.fileno()), target],
                                     pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(mine.detach())
        try:
            ready = self.conn.poll(START_TIMEOUT_S) and self.conn.recv() == "ready"
        except (EOFError, OSError):  # it died while importing
            ready = False
        if not ready:
            self.stop(kill=True)
            raise RuntimeError(f"a grading worker for {target} did not start within {START_TIMEOUT_S:.0f} s")

    def stop(self, kill: bool = False) -> None:
        try:
            if not kill:
                self.conn.send(None)
                self.proc.wait(2)
        except (OSError, BrokenPipeError, Exception):  # noqa: BLE001 - stopping must not raise
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(2)
        self.conn.close()


class BoundedPool:
    """``call(*args)`` -> ("ok", value) | ("error", message) | ("timeout", None) | ("crash", None); thread-safe.

    ``target``: "module:function", imported by each worker."""

    def __init__(self, target: str, workers: int, timeout_s: float):
        self.target, self.size, self.timeout_s = target, max(1, workers), timeout_s
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0
        self.timeouts = 0  # calls that overran (tests and reports read it)

    def _take(self) -> _Worker:
        with self._lock:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                if self._started < self.size:
                    self._started += 1
                    try:
                        return _Worker(self.target)
                    except BaseException:
                        self._started -= 1
                        raise
        return self._idle.get()

    def _drop(self, w: _Worker) -> None:
        w.stop(kill=True)
        with self._lock:
            self._started -= 1

    def call(self, *args) -> tuple[str, object]:
        w = self._take()
        try:
            w.conn.send(args)
            if not w.conn.poll(self.timeout_s):
                self.timeouts += 1
                self._drop(w)
                return TIMEOUT, None
            status, value = w.conn.recv()
        except (EOFError, OSError):  # the worker died (out of memory, a C crash)
            self._drop(w)
            return CRASH, None
        self._idle.put(w)
        return status, value

    def close(self) -> None:
        with self._lock:
            while True:
                try:
                    self._idle.get_nowait().stop()
                except queue.Empty:
                    break
            self._started = 0


_pools: dict[str, BoundedPool] = {}
_pools_lock = threading.Lock()


def shared(target: str, timeout_s: float, workers: int | None = None) -> BoundedPool:
    """The process's one pool for ``target`` ("module:function"; made on first use, closed at exit)."""
    with _pools_lock:
        if target not in _pools:
            n = workers or max(1, min(4, (os.cpu_count() or 2) // 2))
            _pools[target] = BoundedPool(target, n, timeout_s)
            atexit.register(_pools[target].close)
        return _pools[target]
