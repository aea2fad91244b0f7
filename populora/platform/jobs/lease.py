"""One writer per run: the lease a trainer holds on its run, and what a resume (or a restart) asks of it first.

Two trainers on one run write the same steps and checkpoints and one of them is lost (measured: a trainer paused
by SIGSTOP read "crashed" after two minutes, a resume started beside it, and when the first woke both trained step
3 from the same checkpoint). So a trainer holds a lease on its run from the moment it writes to it:

    run tag   populora.lease       {"pid", "started", "host", "since"}: who holds it, written once when a trainer
                                   takes the run (create, fork, resume), never by the beats
    run tag   populora.heartbeat   the holder's beat (``heartbeat.py``): how fresh its liveness is
    file      <run dir>/lease.lock an flock the holder keeps open while it runs: the OS frees it when the process
                                   ends however it ends (kill -9 included) and keeps it while it is suspended, so
                                   two resumes on one machine cannot both take the run

A holder is named by host, pid and process start time (psutil), so a reused pid is never taken for it. What a
resume does (``refusal``), from the holder's ``verdict``:

    free     no holder, the run ended, or its process is gone from this machine: resume
    self     this very process (a resume inside the trainer that holds it): resume
    live     alive on this machine and beating: refused, with how to stop it
    silent   alive on this machine, not beating (SIGSTOP, a hung filesystem, a swap storm): refused, with how to
             stop it; readers show the run "silent", never "crashed" (``state.py``)
    remote   on another machine and beating: refused; ``--force`` if you know better
    unknown  on another machine and silent past the limit: nothing here can tell a dead machine from a suspended
             one; readers show "crashed", and a resume is refused unless ``--force`` (you know it is dead)

A fork of a held run (``held_by``) reads a pinned copy of its checkpoint (``checkpoint.pinned``): the holder may
prune the step while the fork loads it, and a step it has not finished writing is refused, naming the newest
complete one.

A holder that wakes to find the lease taken (a forced resume beside it) stops before its next checkpoint or step
record (``LeaseLost``) and writes nothing more to the run: the run is the new holder's.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from populora.platform.jobs import heartbeat

TAG = "populora.lease"
LOCK_FILE = "lease.lock"
FREE, SELF, LIVE, SILENT, REMOTE, UNKNOWN = "free", "self", "live", "silent", "remote", "unknown"
VERDICTS = (FREE, SELF, LIVE, SILENT, REMOTE, UNKNOWN)


class LeaseLost(RuntimeError):
    """This trainer's run was taken by another trainer (a forced resume): it must write nothing more to it."""


@dataclass(frozen=True)
class Holder:
    pid: int
    started: float
    host: str

    def text(self, since: float | None = None) -> str:
        return json.dumps({"pid": self.pid, "started": self.started, "host": self.host,
                           "since": round(time.time() if since is None else since, 3)})

    @classmethod
    def parse(cls, text: str | None) -> "Holder | None":
        """The holder a lease tag names; None when absent or unreadable (a run from before leases).

        >>> Holder.parse('{"pid": 3, "started": 1.5, "host": "h"}'), Holder.parse("")
        (Holder(pid=3, started=1.5, host='h'), None)
        """
        try:
            d = json.loads(text or "")
            return cls(int(d["pid"]), float(d["started"]), str(d["host"]))
        except (ValueError, TypeError, KeyError):
            return None

    @classmethod
    def this_process(cls) -> "Holder":
        pid, started, host = heartbeat.this_process()
        return cls(pid, started, host)

    def same(self, other: "Holder | heartbeat.Beat | None") -> bool:
        return (other is not None and (self.pid, self.host) == (other.pid, other.host)
                and abs(self.started - other.started) < 0.05)


# ====================================================================== the verdict (pure)
def decide(running: bool, has_beat: bool, stale: bool, alive: bool | None, is_self: bool) -> str:
    """The holder's verdict from what a reader knows: the run says ``running``; it has a beat (``has_beat``), older
    than the limit (``stale``); its process is ``alive`` on this machine (True / False; None: another machine);
    it is this very process (``is_self``).

    >>> decide(True, True, True, True, False), decide(True, True, True, None, False), decide(True, True, False, False, False)
    ('silent', 'unknown', 'free')
    """
    if not running or not has_beat or alive is False:
        return FREE
    if is_self:
        return SELF
    if alive is True:
        return SILENT if stale else LIVE
    return UNKNOWN if stale else REMOTE


def verdict(status: str, tags: dict, now: float | None = None, limit: float | None = None) -> str:
    """``decide`` for a run with store status ``status`` and ``tags`` (its heartbeat names the holder)."""
    beat = heartbeat.Beat.parse(tags.get(heartbeat.TAG))
    if beat is None:
        return decide(status == "running", False, False, None, False)
    now = time.time() if now is None else now
    stale = heartbeat.is_stale(beat, now, heartbeat.limit_s() if limit is None else limit)
    is_self = (beat.pid, beat.host) == (os.getpid(), socket.gethostname())
    return decide(status == "running", True, stale, heartbeat.process_alive(beat), is_self)


def refusal(status: str, tags: dict, force: bool = False, now: float | None = None,
            limit: float | None = None) -> str | None:
    """Why a resume of this run must not start now (None: it may). ``force`` overrides a holder on another machine
    only (one on this machine is checked, never guessed)."""
    found = verdict(status, tags, now, limit)
    if found in (FREE, SELF) or (force and found in (REMOTE, UNKNOWN)):
        return None
    beat = heartbeat.Beat.parse(tags.get(heartbeat.TAG))
    age = heartbeat.describe_silence(max((time.time() if now is None else now) - beat.t, 0.0))
    who = f"its trainer (pid {beat.pid} on {beat.host}, started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(beat.started))})"
    stop = (f"stop it first (populora jobs --stop JOB, or kill {beat.pid}; a process paused with SIGSTOP or Ctrl-Z "
            f"needs kill -CONT {beat.pid} to take the stop), then resume")
    if found == LIVE:
        return f"{who} is alive and beat {age} ago: {stop}"
    if found == SILENT:
        return (f"{who} is alive on this machine but silent for {age} (suspended or hung, not dead; "
                f"populora runs shows it silent): {stop}")
    where = f"on {beat.host}, which this machine cannot check"
    if found == REMOTE:
        return (f"{who} beat {age} ago {where}: stop it there first; if you know it is dead, resume with --force")
    return (f"{who} has been silent for {age} {where}: a dead machine and a suspended one look the same from here; "
            f"if you know it is dead (rebooted, killed), resume with --force")


def held_by(status: str, tags: dict, now: float | None = None, limit: float | None = None) -> str | None:
    """Words naming the trainer that holds the run and may still write it (prune a checkpoint, write the next one),
    for a reader of its checkpoints (a fork) to say why it copies one first or cannot have one yet; None when no
    other process can write it (``FREE``, or ``SELF``).

    >>> held_by("finished", {}) is None
    True
    """
    found = verdict(status, tags, now, limit)
    if found in (FREE, SELF):
        return None
    beat = heartbeat.Beat.parse(tags.get(heartbeat.TAG))
    how = {LIVE: "alive", SILENT: "alive but silent (suspended or hung)", REMOTE: "alive on another machine",
           UNKNOWN: "silent on another machine (perhaps alive)"}[found]
    return f"its trainer (pid {beat.pid} on {beat.host}) is {how}"


# ====================================================================== the holder's side
class Lease:
    """The lease this process holds on a run: the tag (``take``) and the run dir's flock (``lock``), released by
    ``release`` (or by the OS when the process ends). ``check`` raises ``LeaseLost`` once another trainer took it."""

    _held: dict[str, int] = {}  # run dir -> the fd this process holds its flock on (one per run dir, per process)

    def __init__(self, write_tags, read_tags, run_id: str):
        self.write_tags, self.read_tags, self.run_id = write_tags, read_tags, run_id
        self.me = Holder.this_process()
        self.lock_path: Path | None = None

    def take(self) -> None:
        self.write_tags({TAG: self.me.text()})

    def lock(self, run_dir: Path | None) -> None:
        """Hold ``<run dir>/lease.lock``; ``LeaseLost`` naming the holder if another process on this machine holds
        it (a second resume that lost the race)."""
        if run_dir is None or not Path(run_dir).is_dir():
            return
        path = str(Path(run_dir) / LOCK_FILE)
        if path in Lease._held:  # this process holds it already (a resume in the same process)
            self.lock_path = Path(path)
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 500, 0).decode(errors="replace").strip()
            os.close(fd)
            raise LeaseLost(f"run {self.run_id} is held by another trainer on this machine ({holder or 'unknown'}): "
                            f"stop it first, then resume") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.me.text().encode(), 0)
        Lease._held[path] = fd
        self.lock_path = Path(path)

    def check(self) -> None:
        """Raise ``LeaseLost`` if the run's lease tag names another trainer now (a forced resume took it)."""
        holder = Holder.parse(self.read_tags().get(TAG))
        if holder is not None and not self.me.same(holder):
            raise LeaseLost(f"run {self.run_id} was taken by another trainer (pid {holder.pid} on {holder.host}, "
                            f"a forced resume): this one stops and writes nothing more to it")

    def release(self) -> None:
        if self.lock_path is not None and (fd := Lease._held.pop(str(self.lock_path), None)) is not None:
            os.close(fd)  # closing the fd drops the flock
        self.lock_path = None
