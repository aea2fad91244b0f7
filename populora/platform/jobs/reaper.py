"""Processes that must not outlive the process that started them: ``python -m populora.platform.jobs.reaper``.

vLLM's engine core and its worker are child processes of the process that builds the engine (the trainer, or a
data-parallel Ray worker). A clean end closes them (``VllmBackend.close``), but a process killed outright (kill -9,
the UI's Stop escalating to SIGKILL, ``ray.kill`` of a lost or stopped worker, the OOM killer) runs no code, and
the engine's processes were measured to live on as orphans (vLLM 0.32.0's CPU build: still up a minute after
their parent's SIGKILL), holding on a GPU the memory the next run needs.

So whoever starts such processes calls ``follow()`` before the call that starts them: a small detached process
that polls the starter, keeps the list of the starter's descendants that appeared since (refreshed each poll), and
once the starter is gone ends them (SIGTERM, then SIGKILL after a grace period), then exits. Started *before* the
engine is built, it also covers a starter killed while the engine was starting (a minute or more; a Stop right after
Launch, a Ray worker lost then): a reaper started after the call with the pids it made left those engines running
(seen when a killed Ray cluster took the data-parallel workers with it mid-start). Each process is named by pid and
start time, so a reused pid is never signalled.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

POLL_S = 0.5
GRACE_S = 5.0


def _identity(pid: int) -> str | None:
    try:
        return f"{pid}:{psutil.Process(pid).create_time()!r}"
    except psutil.Error:
        return None


def _process(identity: str) -> psutil.Process | None:
    """The process named by ``pid:start_time``, or None if it ended (or its pid now names another process)."""
    pid, started = identity.split(":", 1)
    try:
        proc = psutil.Process(int(pid))
        if repr(proc.create_time()) != started or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def follow(parent: int | None = None, log: str | None = None) -> subprocess.Popen:
    """Start a reaper now that ends every descendant ``parent`` (default: this process) starts from now on, once
    ``parent`` is gone; it exits with ``parent``. ``log``: a file it appends each pid it has noted to (tests wait on
    it)."""
    owner = _identity(parent or os.getpid())
    skip = [str(p) for p in children()]
    return subprocess.Popen([sys.executable, "-m", __name__, owner, log or "", *skip],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop(watcher: subprocess.Popen) -> None:
    """End a reaper from ``follow()`` whose processes were closed cleanly (it ends none of them: SIGTERM ends the
    reaper at once, before it has any code of its own to run)."""
    watcher.terminate()
    try:
        watcher.wait(timeout=10)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.wait()


def follow_and_reap(owner: str, skip: set[int], log: str = "") -> int:
    """While ``owner`` lives, note its descendants (but ``skip`` and this reaper) by pid and start time; once it is
    gone, end those still alive. Returns how many it had to end."""
    seen: set[str] = set()
    skip = skip | {os.getpid()}
    while (proc := _process(owner)) is not None:
        try:
            new = {i for c in proc.children(recursive=True) if c.pid not in skip and (i := _identity(c.pid))} - seen
        except psutil.Error:
            new = set()
        if new and log:
            with open(log, "a") as f:
                f.writelines(f"{i.split(':')[0]}\n" for i in sorted(new))
        seen |= new
        time.sleep(POLL_S)
    return end([p for p in (_process(i) for i in seen) if p is not None])


def new_children(before: set[int]) -> list[int]:
    """This process's descendants that were not in ``before`` (pids): what a call just started."""
    return [c.pid for c in psutil.Process().children(recursive=True) if c.pid not in before]


def children() -> set[int]:
    return {c.pid for c in psutil.Process().children(recursive=True)}


def end(alive: list[psutil.Process], grace: float = GRACE_S) -> int:
    """SIGTERM each of ``alive``, SIGKILL those still up ``grace`` seconds later; returns how many there were."""
    for p in alive:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(alive, timeout=grace)
    for p in still:
        try:
            p.kill()
        except psutil.Error:
            pass
    return len(alive)


if __name__ == "__main__":
    follow_and_reap(sys.argv[1], {int(p) for p in sys.argv[3:]}, sys.argv[2])
