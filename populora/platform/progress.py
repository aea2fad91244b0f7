"""Progress inside a training step: which phase the trainer is in, how far its generation got, how long the phase
has run, and an ETA from the phases' measured times. A step on the embedded CPU model takes minutes; the run's
MLflow progress ("2/3") moves once per step, so without this the step is a black box while it runs.

The trainer (``training/loop.py``) writes ``progress.json`` into its run dir and, inside a job, into the job dir
(``POPULORA_JOB_DIR``): whole files (write-then-rename), at each phase change and, while a phase generates, at
most every ``THROTTLE_S`` seconds, never a metric per update; and the phase in words to the run's MLflow tag
``populora.phase`` at a phase change, at most every ``TAG_EVERY_S`` (the last phase reported, once the run ends;
the run's training time is its metric ``time/training_s``, logged with each step). The Runs page, Launch's job list and
``populora jobs`` read it (``read``, ``line``). The file is what the process last said: a reader shows it only
while the run (or job) is active, since a killed trainer leaves its last phase behind.

    {"step": 2, "steps": 3, "phase": "solve", "done": 12, "total": 32, "phase_started": 1.7e9, "step_started": 1.7e9,
     "updated": 1.7e9, "last": {"match": 0.1, "propose": 70.2, ...}, "training_s": 412.0, "pid": 123}

``last``: the previous step's seconds per phase (the ETA's measure); ``training_s``: the seconds the run's steps
took before this one (carried over a resume in the checkpoint: a run's training time, not its wall time).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from populora.platform.files import write_atomic

FILE = "progress.json"
THROTTLE_S = 2.0  # the least time between two writes inside one phase (a phase change is written at once)
TAG_EVERY_S = 30.0  # the least time between two updates of the run's MLflow phase tag (``on_tag``): a store write

# the step's phases in the order they run (loop.Trainer.step), then what happens before the first step
PHASES = ("match", "propose", "validate", "solve", "update", "eval", "evolve", "checkpoint")
LABELS = {"setup": "loading the model", "seed": "seeding the task buffers", "match": "matching",
          "propose": "proposing", "validate": "validating", "solve": "solving", "update": "updating",
          "eval": "evaluating", "evolve": "evolving", "checkpoint": "checkpointing"}
UNITS = {"seed": "proposals", "propose": "tasks", "solve": "answers", "eval": "answers"}  # what a phase generates

_active: "StepProgress | None" = None  # this process's reporter: the generation loop advances it (``generated``)


class StepProgress:
    """The trainer's reporter: ``phase`` at each phase, ``end_step`` after each step; ``generated`` (module level)
    from inside the generation loop."""

    def __init__(self, dirs: list[Path], steps: int, step: int = 0, training_s: float = 0.0, clock=time.time,
                 on_tag=None):
        """``on_tag(text)``: told the phase in words (``describe``) at a phase change, at most every TAG_EVERY_S
        (the trainer sets the run's ``populora.phase`` tag with it: MLflow's UI and a store read elsewhere)."""
        global _active
        self.dirs, self.steps, self.clock = [Path(d) for d in dirs], steps, clock
        self.on_tag, self.tagged = on_tag, None
        self.step, self.training_s = step, training_s
        self.name, self.done, self.total, self.token, self.of = "setup", None, None, None, None
        self.phase_started = self.step_started = self.written = clock()
        self.times: dict[str, float] = {}  # this step's phase seconds so far
        self.last: dict[str, float] = {}   # the previous step's (empty before the first step ends)
        _active = self

    def start_step(self, step: int) -> None:
        """Step ``step`` starts now (its first ``phase`` writes it)."""
        self.step, self.step_started, self.times = step, self.clock(), {}

    def phase(self, name: str) -> None:
        """Phase ``name`` starts now; the previous phase's time is kept (the ETA's measure)."""
        now = self.clock()
        if self.name in PHASES:
            self.times[self.name] = self.times.get(self.name, 0.0) + now - self.phase_started
        self.name, self.done, self.total, self.token, self.of, self.phase_started = name, None, None, None, None, now
        self.write()
        if self.on_tag is not None and (self.tagged is None or now - self.tagged >= TAG_EVERY_S):
            self.tagged = now
            self.on_tag(describe(self.record(), now))

    def count(self, done: int, total: int, token: int | None = None, of: int | None = None) -> None:
        """``done`` of ``total`` generations of the phase's current call (and ``token`` of at most ``of`` new tokens
        of the batch being generated: one batch can be the whole phase); written at most every THROTTLE_S."""
        self.done, self.total, self.token, self.of = done, total, token, of
        if (done == total and token is None) or self.clock() - self.written >= THROTTLE_S:  # a call's end: on disk
            self.write()

    def training_so_far(self) -> float:
        """The run's training time until now: the steps before this one, and this one so far while it runs."""
        return self.training_s + (self.clock() - self.step_started if self.name in PHASES else 0.0)

    def end_step(self) -> None:
        """The step is done: its phase times become the ETA's measure, its time joins the run's training time."""
        now = self.clock()
        if self.name in PHASES:
            self.times[self.name] = self.times.get(self.name, 0.0) + now - self.phase_started
        self.training_s += now - self.step_started
        self.last, self.times = dict(self.times), {}
        self.name, self.done, self.total, self.token, self.of, self.phase_started = "next", None, None, None, None, now
        self.write()

    def record(self) -> dict:
        return {"step": self.step, "steps": self.steps, "phase": self.name, "done": self.done, "total": self.total,
                "token": self.token, "of": self.of,
                "phase_started": self.phase_started, "step_started": self.step_started, "updated": self.clock(),
                "last": self.last, "training_s": self.training_s, "pid": os.getpid()}

    def write(self) -> None:
        self.written = self.clock()
        text = json.dumps(self.record())
        for d in self.dirs:
            if not d.is_dir():  # never re-create a dir removed under it
                continue
            try:
                write_atomic(d / FILE, text)
            except OSError:  # a progress line is never worth a run: a full disk fails the checkpoint, not this
                pass


    def release(self) -> None:
        """The trainer has ended: the generation loop stops counting into it (a later run in this process, or a
        test's, gets its own)."""
        global _active
        if _active is self:
            _active = None


def generated(done: int, total: int, token: int | None = None, of: int | None = None) -> None:
    """Called by the generation loop: ``done`` of this call's ``total`` rows are generated (after each batch), and
    inside a batch its ``token``-th of at most ``of`` new tokens (each decoding step)."""
    if _active is not None:
        _active.count(done, total, token, of)


def active() -> bool:
    """Whether a trainer in this process reports its progress (the generation loop counts tokens only then)."""
    return _active is not None


# ====================================================================== the readers' side
def read(directory: str | Path | None) -> dict | None:
    """The progress a trainer last wrote into ``directory`` (a run dir or a job dir), None if none (or unreadable)."""
    if not directory:
        return None
    try:
        data = json.loads(Path(directory, FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "phase" in data else None


def eta_s(p: dict, now: float | None = None) -> float | None:
    """Seconds until the run's last step ends, from the previous step's measured phase times: what is left of this
    phase (at its generation rate when it has counts, else at the previous step's time), the phases after it, then
    every step still to come at the previous step's total. None before a step has ended (nothing measured yet).

    >>> last = {"match": 1.0, "propose": 10.0, "validate": 2.0, "solve": 20.0, "update": 7.0}
    >>> p = {"step": 2, "steps": 3, "phase": "propose", "phase_started": 100.0, "last": last, "done": None, "total": None}
    >>> eta_s(p, now=104.0)  # 6 s of propose, then validate/solve/update 29 s, then step 3's 40 s
    75.0
    >>> eta_s({**p, "phase": "solve", "done": 8, "total": 32}, now=110.0)  # 10 s for 8 of 32: 30 s to go, update 7 s
    77.0
    >>> eta_s({**p, "last": {}}, now=104.0) is None
    True
    """
    now = time.time() if now is None else now
    last = p.get("last") or {}
    if not last:
        return None
    phase, elapsed = p.get("phase"), _since(p, "phase_started", now)
    per_step = sum(last.values())
    if phase == "next":  # between steps: the rest are whole steps
        return per_step * max(0, p["steps"] - p["step"])
    if phase not in PHASES:
        return None
    done, total = p.get("done"), p.get("total")
    if done and total:
        here = elapsed * (total - done) / done
    else:
        here = max(0.0, last.get(phase, 0.0) - elapsed)
    after = sum(last.get(q, 0.0) for q in PHASES[PHASES.index(phase) + 1:])
    return here + after + per_step * max(0, p["steps"] - p["step"])


def describe(p: dict, now: float | None = None) -> str:
    """What the trainer is doing, in words: "step 2/3 · solving 12/32 answers · 41 s in this phase".

    >>> p = {"step": 2, "steps": 3, "phase": "solve", "done": 12, "total": 32, "phase_started": 59.0}
    >>> describe(p, now=100.0)
    'step 2/3 · solving 12/32 answers · 41 s in this phase'
    >>> describe({**p, "done": 0, "token": 57, "of": 128}, now=100.0)
    'step 2/3 · solving 0/32 answers (next batch: token 57/128) · 41 s in this phase'
    >>> describe({**p, "phase": "setup", "step": 0, "done": None, "total": None}, now=100.0)
    'loading the model · 41 s in this phase'
    >>> describe({**p, "phase": "next"}, now=100.0)
    'step 2/3 done'
    """
    now = time.time() if now is None else now
    phase = p.get("phase", "?")
    if phase == "next":
        return f"step {p['step']}/{p['steps']} done"
    words = LABELS.get(phase, phase)
    if p.get("total"):
        words += f" {p.get('done') or 0}/{p['total']} {UNITS.get(phase, 'generations')}"
        if p.get("token") and p.get("of"):
            words += f" (next batch: token {p['token']}/{p['of']})"
    head = f"step {p['step']}/{p['steps']} · " if phase in PHASES else ""
    return f"{head}{words} · {duration(_since(p, 'phase_started', now))} in this phase"


def line(p: dict, now: float | None = None) -> str:
    """``describe`` and the ETA (when measured): the line Runs, the job list and ``populora jobs`` show."""
    eta = eta_s(p, now)
    return describe(p, now) + (f" · ETA {duration(eta)}" if eta is not None else " · ETA after the first step")


def training_seconds(p: dict, now: float | None = None, live: bool = True) -> float:
    """The run's training time so far: its steps before this one and this one's time until ``now``; ``live``
    False (the trainer has ended: stopped, finished, crashed), until the trainer last wrote (``updated``), so a
    step cut short counts the time it ran and the figure a run showed while it trained never goes back when it
    stops or finishes (it did: 1m 22s live, then 1m 05s, the steps' metric without the step cut short or the
    checkpoint after the last record).

    >>> p = {"phase": "solve", "training_s": 60.0, "step_started": 100.0, "updated": 120.0}
    >>> training_seconds(p, now=130.0), training_seconds(p, now=500.0, live=False)
    (90.0, 80.0)
    >>> training_seconds({**p, "phase": "next"}, now=500.0, live=False)
    60.0
    """
    now = time.time() if now is None else now
    if not live:
        now = float(p.get("updated") or now)
    running = p.get("phase") in PHASES
    return float(p.get("training_s") or 0.0) + (_since(p, "step_started", now) if running else 0.0)


def carried_training_s(p: dict | None) -> float:
    """The training time a trainer that resumes a run goes on from, by what the run's last trainer said (``p``,
    its run dir's record; None: a new run): its ``training_seconds`` until its last word (0 without one). The
    resume takes the larger of this and its checkpoint's.

    >>> carried_training_s(None), carried_training_s({"phase": "solve", "training_s": 60.0, "step_started": 100.0, "updated": 120.0})
    (0.0, 80.0)
    """
    return training_seconds(p, live=False) if p else 0.0


def steps_done(p: dict | None) -> int | None:
    """The steps the trainer finished, as it last said: its step once ended ("next"), the one before while inside
    it, the step it resumed at while loading (None without a record). The run's progress tag moves only at a
    checkpoint: with ``checkpoint.every`` > 1 it says 4/6 when the trainer's log says step 5/6 is done.

    >>> steps_done({"phase": "next", "step": 5}), steps_done({"phase": "solve", "step": 5}), steps_done({"phase": "setup", "step": 4})
    (5, 4, 4)
    """
    if not p or p.get("step") is None:
        return None
    step = int(p["step"])
    return max(0, step - 1) if p.get("phase") in PHASES else step


def stopped_where(done: int | None, kept: int | None, steps: int | None) -> str:
    """Where a stopped run is, in words, from the steps its trainer finished (``steps_done``) and the last one its
    checkpoint kept (the progress tag): one sentence for the Runs page, `populora runs` and the job log alike.

    >>> stopped_where(5, 4, 6)
    'after step 5/6; its last checkpoint is step 4, so Resume goes on from there (step 5 again)'
    >>> stopped_where(4, 4, 6), stopped_where(None, 4, 6), stopped_where(None, None, None)
    ('after step 4/6', 'after step 4/6', '')
    """
    if kept is None and done is None:
        return ""
    total = f"/{steps}" if steps else ""
    done = kept if done is None else done
    if kept is None or kept >= done:
        return f"after step {done}{total}"
    return (f"after step {done}{total}; its last checkpoint is step {kept}, so Resume goes on from there "
            f"(step {kept + 1}{' again' if kept + 1 == done else f' to {done} again'})")


def steps_shown(step: int | None, steps: int | None, status: str, budget: str = "", short: bool = False) -> tuple[str, float]:
    """(the steps as text, the bar's fraction) of a run: "5/6" and 5/6 of the bar; a run that finished below its
    cap because its compute budget was reached (``budget``: its ``populora.budget`` tag) is done, bar full: it
    read "5/56" with an 8.93% bar.

    >>> steps_shown(5, 6, "running"), steps_shown(5, 56, "finished", "spent 1.0e6 of 1.0e6 tokens")
    (('5/6', 0.8333333333333334), ('5 (compute budget reached; at most 56)', 1.0))
    >>> steps_shown(None, 6, "queued"), steps_shown(5, 56, "finished", "spent", short=True)
    (('0/6', 0.0), ('5 (budget)', 1.0))
    """
    step = step or 0
    if status == "finished" and budget and steps and step < steps:  # ``short``: a terminal table's column
        return (f"{step} (budget)" if short else f"{step} (compute budget reached; at most {steps})"), 1.0
    if status == "finished" and steps and step >= steps:
        return f"{step}/{steps}", 1.0
    return (f"{step}/{steps}" if steps else f"{step}"), (min(1.0, step / steps) if steps else 0.0)


def remaining(done_here: float, left: float, since: float, last: float | None, now: float,
              stalled_after: float = 60.0) -> tuple[float | None, float | None]:
    """(ETA seconds, seconds without progress) of work going at a pace: ``done_here`` units done since ``since``,
    the last of them at ``last``, ``left`` to do. The pace is measured up to the last unit, and the ETA counts
    down from it: measured to ``now``, a stuck job's pace fell and its ETA rose (51 s to 1m 57s at 18/36). Past
    ``stalled_after`` seconds (or three units' time) without a unit, no ETA: the stall, said.

    >>> remaining(10, 10, 0.0, 20.0, 25.0)    # 2 s a unit: 20 s from t=20
    (15.0, None)
    >>> remaining(10, 10, 0.0, 20.0, 200.0)   # nothing for 180 s
    (None, 180.0)
    >>> remaining(0, 10, 0.0, None, 5.0)
    (None, None)
    """
    if not done_here or last is None or last <= since:
        return None, None
    per_unit = (last - since) / done_here
    quiet = max(0.0, now - last)
    if quiet > max(stalled_after, 3 * per_unit):
        return None, quiet
    return max(0.0, left * per_unit - quiet), None


def _since(p: dict, key: str, now: float) -> float:
    """Seconds from the record's time ``key`` to ``now`` (0 when absent, never negative: another machine's clock)."""
    at = p.get(key)
    return 0.0 if at is None else max(0.0, now - float(at))


def duration(seconds: float) -> str:
    """
    >>> duration(41.4), duration(190), duration(3 * 3600 + 125)
    ('41 s', '3m 10s', '3h 02m')
    """
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    return f"{m}m {s:02d}s" if m < 60 else f"{m // 60}h {m % 60:02d}m"
