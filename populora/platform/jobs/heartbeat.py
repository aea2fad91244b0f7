"""Liveness: a running trainer's heartbeat, how a reader tells a live run from a dead one, and who may say so.

A trainer killed outright (kill -9, the OOM killer, a reboot, a lost machine) runs no code: its MLflow run stays
RUNNING forever, as MLflow itself has no liveness (W&B marks such a run "crashed" from its missing heartbeat). So a
trainer keeps a heartbeat from the moment its run exists (``Heartbeat``, a daemon thread):

    run tag  populora.heartbeat   {"t": unix time, "every": s, "pid", "started", "host"}: one small tag
                                  overwritten every ``every_s`` (``POPULORA_HEARTBEAT_S``, default 20 s), so its
                                  cost never grows with the run; what every reader of the store sees
    file     <run dir>/heartbeat.json (and <job dir>/heartbeat.json inside a local job): the same, plus the step
                                  the trainer is on, rewritten at each step too (the job supervisor reads the
                                  step a killed trainer was on from it; platform/jobs/restart.py)

A reader (``populora runs``, the Runs page, Compare, the sweep table) shows a run whose status says running but
whose heartbeat is older than ``limit_s()`` (``POPULORA_HEARTBEAT_LIMIT_S``, default 120 s, never less than three
of the run's own beats) as **crashed**, with the resume command, when its trainer is gone or on a machine it cannot
check; as **silent** when the trainer is alive on this machine (SIGSTOPped, hung): a resume is then refused
(``lease.py``: one writer per run). A resumed run beats again, which clears it.

Readers only show it. MLflow's own status is set to FAILED only by a process that knows the run is dead: the job
supervisor, which saw its trainer end (``restart.py``), or ``populora runs --reap`` (``reap``), which refuses a run
whose trainer process still lives on this machine (hung, not dead: stop it instead).

Clocks: the beat is the trainer's clock, the age the reader's; machines a run spans are assumed NTP-synchronised
(a skew of seconds against a 120 s limit).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from populora.platform.files import write_atomic

log = logging.getLogger(__name__)

TAG = "populora.heartbeat"   # re-exported by runlayout as HEARTBEAT (the layout's list of tags)
FILE = "heartbeat.json"
CRASHED = "crashed"          # the status readers show (never written to the store): its trainer is gone or unknown
SILENT = "silent"            # shown instead while its trainer is alive on this machine but not beating (SIGSTOP, hung)
EVERY_ENV, LIMIT_ENV = "POPULORA_HEARTBEAT_S", "POPULORA_HEARTBEAT_LIMIT_S"
EVERY_S, LIMIT_S = 20.0, 120.0
BEATS = 3                    # a run is crashed only once it missed this many of its own beats, whatever the limit


def _env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name}={text!r}: give a number of seconds > 0 (default {default:g})")
    return value


def every_s() -> float:
    """Seconds between two beats of a trainer (``POPULORA_HEARTBEAT_S``, default 20)."""
    return _env_seconds(EVERY_ENV, EVERY_S)


def limit_s() -> float:
    """Age of the last beat beyond which a reader shows a running run as crashed (``POPULORA_HEARTBEAT_LIMIT_S``,
    default 120)."""
    return _env_seconds(LIMIT_ENV, LIMIT_S)


# ====================================================================== the beat (pure)
@dataclass(frozen=True)
class Beat:
    t: float            # when (unix seconds, the trainer's clock)
    every: float        # the trainer's interval: a reader never calls it late before BEATS of them
    pid: int
    started: float      # the process's start time (psutil): with pid, names the process; a reused pid is not it
    host: str

    def text(self) -> str:
        return json.dumps({"t": round(self.t, 3), "every": self.every, "pid": self.pid,
                           "started": self.started, "host": self.host})

    @classmethod
    def parse(cls, text: str | None) -> "Beat | None":
        """The beat a tag or file holds; None when absent or unreadable (a run from before heartbeats).

        >>> Beat.parse('{"t": 10, "every": 20, "pid": 3, "started": 1.5, "host": "h"}').t, Beat.parse("x")
        (10.0, None)
        """
        try:
            d = json.loads(text or "")
            return cls(float(d["t"]), float(d["every"]), int(d["pid"]), float(d["started"]), str(d["host"]))
        except (ValueError, TypeError, KeyError):
            return None


def is_stale(beat: Beat | None, now: float, limit: float) -> bool:
    """Whether a run beating ``beat`` is dead to a reader at ``now``: its last beat is older than ``limit`` and
    than ``BEATS`` of its own intervals. No beat at all (a run from before heartbeats): not stale, nothing to go by.

    >>> b = Beat(100.0, 20.0, 1, 0.0, "h")
    >>> is_stale(b, 219.0, 120), is_stale(b, 221.0, 120), is_stale(b, 161.0, 30), is_stale(None, 1e9, 1)
    (False, True, True, False)
    """
    return beat is not None and now - beat.t > max(limit, BEATS * beat.every)


def shown_status(status: str, tags: dict, now: float | None = None, limit: float | None = None) -> str:
    """The status a reader shows: ``status`` (the run's own tag), but for a running run whose heartbeat stopped,
    silent while its trainer is alive on this machine (suspended or hung: a resume would be a second writer) and
    crashed when it is gone or cannot be checked from here (another machine). ``now`` and ``limit`` default to the
    clock and ``limit_s()``.

    >>> tags = {TAG: Beat(100.0, 20.0, 1, 0.0, "h").text()}
    >>> shown_status("running", tags, 300, 120), shown_status("running", tags, 200, 120), shown_status("finished", tags, 300, 120)
    ('crashed', 'running', 'finished')
    """
    if status != "running":
        return status
    beat = Beat.parse(tags.get(TAG))
    if not is_stale(beat, time.time() if now is None else now, limit_s() if limit is None else limit):
        return status
    return SILENT if process_alive(beat) else CRASHED


def silence(tags: dict, now: float | None = None) -> float | None:
    """Seconds since the run's last beat (None: no beat)."""
    beat = Beat.parse(tags.get(TAG))
    return None if beat is None else (time.time() if now is None else now) - beat.t


def describe_silence(seconds: float) -> str:
    """A silence as a person reads it.

    >>> describe_silence(45), describe_silence(185), describe_silence(7300)
    ('45 s', '3 min', '2.0 h')
    """
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


# ====================================================================== the process side
def this_process() -> tuple[int, float, str]:
    pid = os.getpid()
    return pid, psutil.Process(pid).create_time(), socket.gethostname()


def process_alive(beat: Beat) -> bool | None:
    """Whether the process that wrote ``beat`` still runs: True / False on this machine, None on another one (no
    way to tell from here)."""
    if beat.host != socket.gethostname():
        return None
    try:
        proc = psutil.Process(beat.pid)
        return abs(proc.create_time() - beat.started) < 0.05 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Heartbeat:
    """A daemon thread that beats every ``every`` seconds: ``write_tag(text)`` (the run's tag) and the files
    (``files``: the run dir's, the job dir's). ``at(step)`` records the step being run and rewrites the files at
    once (cheap: a few hundred bytes). A write that fails (the store unreachable, a full disk) is logged once and
    retried at the next beat: the trainer's own writes report such faults, not its heartbeat."""

    def __init__(self, write_tag, files: list[Path], every: float | None = None, run_id: str = ""):
        self.write_tag, self.files, self.run_id = write_tag, [Path(f) for f in files], run_id
        self.every = every_s() if every is None else every
        self.step: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False
        self._lock = threading.Lock()  # a beat and at() must not interleave their file writes
        self.pid, self.started, self.host = this_process()

    def beat(self, now: float | None = None) -> Beat:
        return Beat(time.time() if now is None else now, self.every, self.pid, self.started, self.host)

    def start(self) -> "Heartbeat":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="populora-heartbeat", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            self._write(tag=True)
            if self._stop.wait(self.every):
                return

    def at(self, step: int) -> None:
        """The trainer starts step ``step``: the files say so now (the tag at the next beat)."""
        self.step = step
        self._write(tag=False)

    def _write(self, tag: bool) -> None:
        beat = self.beat()
        try:
            if tag:
                self.write_tag(beat.text())
            with self._lock:
                data = json.loads(beat.text()) | {"step": self.step, "run_id": self.run_id}
                for path in self.files:
                    write_atomic(path, json.dumps(data))
        except Exception as err:  # noqa: BLE001 - a beat that fails must never stop the trainer
            if not self._warned:
                log.warning("heartbeat of run %s not written (%s); retrying every %.0f s", self.run_id, err, self.every)
                self._warned = True

    def stop(self) -> None:
        """No more beats (the run is ending: its status says so from now on). Waits for a beat in flight."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self._thread = None


def read_file(folder: Path) -> dict | None:
    """``<folder>/heartbeat.json`` as written (with ``step`` and ``run_id``), or None."""
    try:
        return json.loads(Path(folder, FILE).read_text())
    except (OSError, ValueError):
        return None
