"""Progress inside a training step (platform/progress.py): what the trainer writes, how often, and the ETA and
words the Runs page, Launch's job list and ``populora jobs`` show from it."""

from __future__ import annotations

import json
import random
import sys

from populora.platform.jobs import jobs
from populora.platform import progress


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _writes(tmp_path, monkeypatch) -> list[dict]:
    """Every record the reporter writes, in order (the file itself keeps only the last)."""
    seen = []
    real = progress.write_atomic
    monkeypatch.setattr(progress, "write_atomic", lambda path, text: (seen.append(json.loads(text)), real(path, text)))
    return seen


def test_a_step_writes_each_phase_and_its_measured_times(tmp_path, monkeypatch):
    seen, clock = _writes(tmp_path, monkeypatch), Clock()
    (tmp_path / "run").mkdir()
    (tmp_path / "job").mkdir()
    rep = progress.StepProgress([tmp_path / "run", tmp_path / "job", tmp_path / "removed"], steps=3, clock=clock)
    rep.phase("setup")  # as the trainer starts: the model loads
    clock.t += 30
    rep.start_step(1)
    for name, seconds in (("match", 1), ("propose", 10), ("validate", 2), ("solve", 20), ("update", 7), ("checkpoint", 3)):
        rep.phase(name)
        clock.t += seconds
    rep.end_step()
    assert seen[::2] == seen[1::2]  # each record into both dirs
    assert [w["phase"] for w in seen[::2]] == ["setup", "match", "propose", "validate", "solve", "update", "checkpoint", "next"]
    last = json.loads((tmp_path / "run" / progress.FILE).read_text())
    assert last == json.loads((tmp_path / "job" / progress.FILE).read_text())  # the job record holds the same
    assert last["last"] == {"match": 1, "propose": 10, "validate": 2, "solve": 20, "update": 7, "checkpoint": 3}
    assert last["training_s"] == 43  # the step's time; the model's loading is not training
    assert progress.eta_s(last, now=clock.t) == 2 * 43  # two more steps at the measured step time
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [progress.FILE]  # no temp file left
    assert not (tmp_path / "removed").exists()  # a dir gone under the trainer is not made again


def test_counts_inside_a_phase_are_throttled_but_a_calls_end_is_written(tmp_path, monkeypatch):
    """A generation reports every decoding step; the file is written at most every THROTTLE_S in a phase (no
    per-token writes), and the last batch of a call is always on disk."""
    seen, clock = _writes(tmp_path, monkeypatch), Clock()
    rep = progress.StepProgress([tmp_path], steps=1, clock=clock)
    rep.start_step(1)
    rep.phase("solve")
    before = len(seen)
    for token in range(1, 101):  # 100 tokens, 0.1 s apart: 10 s
        clock.t += 0.1
        rep.count(0, 32, token, 128)
    assert len(seen) - before <= 10 / progress.THROTTLE_S + 1
    rep.count(32, 32)
    assert seen[-1]["done"] == 32 and seen[-1]["total"] == 32


def test_the_generation_loop_reports_rows_and_tokens_to_the_trainers_reporter(tmp_path, monkeypatch):
    """``generation.generate`` (every torch backend's loop) counts into the active reporter: its rows after each
    batch and its tokens at each decoding step, without changing what it samples."""
    import torch

    from populora.platform.backends import generation

    class Tok:
        pad_token_id, chat_template = 0, None

        def __call__(self, prompts, **kw):
            ids = torch.ones(len(prompts), 2, dtype=torch.long)
            return type("Enc", (), {"input_ids": ids, "attention_mask": torch.ones_like(ids), "to": lambda self, d: self})()

        def decode(self, ids, **kw):
            return "x" * len(ids)

    def run_generate(enc, adapters, kwargs):
        ids = enc.input_ids
        for _ in range(3):  # three decoding steps, as HF generate calls its stopping criteria
            ids = torch.cat([ids, torch.full((ids.shape[0], 1), 5)], dim=1)
            for criteria in kwargs.get("stopping_criteria", []):
                criteria(ids, None)
        return ids

    monkeypatch.setattr(generation, "stop_token_ids", lambda tok: [2])
    calls = []
    monkeypatch.setattr(progress, "_active", type("R", (), {"count": lambda self, *a: calls.append(a)})())
    out = generation.generate(Tok(), "cpu", run_generate, ["a", "b", "c"], [None] * 3, 3, batch_size=2)
    assert [g.text for g in out] == ["xxx"] * 3
    assert calls[0] == (0, 3, None, None) and calls[-1] == (3, 3, None, None)
    assert (0, 3, 3, 3) in calls and (2, 3, 1, 3) in calls  # the first batch's third token, the second's first
    monkeypatch.setattr(progress, "_active", None)  # outside a trainer: no counting criteria at all
    seen = []
    generation.generate(Tok(), "cpu", lambda e, a, k: seen.append(k) or run_generate(e, a, k), ["a"], [None], 3)
    assert "stopping_criteria" not in seen[0]


def _cases(n: int = 300, seed: int = 0):
    """``n`` random points of the input space (a fixed seed: hypothesis is not a dependency of this repo)."""
    rng = random.Random(seed)
    for _ in range(n):
        yield rng


def _seconds(rng) -> float:
    return rng.choice([0.0, rng.uniform(0, 1), rng.uniform(0, 1e5)])


def test_the_eta_is_never_negative_and_never_grows_while_a_phase_runs():
    """Over the input space: without counts, the ETA only falls as a phase runs (to the phases after it and the
    steps still to come at the measured step time, never below); a step still to come adds its measured time."""
    for rng in _cases():
        last = {q: _seconds(rng) for q in rng.sample(progress.PHASES, rng.randint(1, len(progress.PHASES)))}
        phase, step, more = rng.choice(progress.PHASES), rng.randint(1, 50), rng.randint(0, 50)
        elapsed, later = _seconds(rng), _seconds(rng)
        p = {"step": step, "steps": step + more, "phase": phase, "phase_started": 0.0, "last": last}
        now, then = progress.eta_s(p, now=elapsed), progress.eta_s(p, now=elapsed + later)
        after = sum(last.get(q, 0.0) for q in progress.PHASES[progress.PHASES.index(phase) + 1:])
        floor = after + more * sum(last.values())
        assert now >= then >= floor * (1 - 1e-12) - 1e-9, (p, elapsed, later)
        assert progress.eta_s({**p, "steps": step + more + 1}, now=elapsed) >= now + sum(last.values()) * (1 - 1e-12) - 1e-9


def test_with_counts_the_phase_is_done_at_its_measured_rate():
    """The rest of a generating phase takes the time its generations so far took per row: exact, no step after."""
    for rng in _cases():
        done, extra, elapsed = rng.randint(1, 500), rng.randint(0, 500), rng.uniform(0.01, 1e4)
        p = {"step": 1, "steps": 1, "phase": "update", "phase_started": 0.0, "last": {"update": 5.0},
             "done": done, "total": done + extra}
        expected = elapsed * extra / done
        assert abs(progress.eta_s(p, now=elapsed) - expected) <= 1e-9 * max(1.0, expected)


def test_the_line_names_the_step_the_phase_and_its_counts():
    for rng in _cases():
        step, more, total = rng.randint(1, 10_000), rng.randint(0, 10_000), rng.randint(1, 64)
        done, phase, elapsed = rng.randint(0, total), rng.choice(["propose", "solve", "update"]), rng.uniform(0, 1e6)
        p = {"step": step, "steps": step + more, "phase": phase, "done": done, "total": total,
             "phase_started": 0.0, "last": {}}
        text = progress.line(p, now=elapsed)
        assert text.startswith(f"step {step}/{step + more} · {progress.LABELS[phase]} {done}/{total} "), text
        assert f"{progress.duration(elapsed)} in this phase" in text and text.endswith("ETA after the first step")


def test_durations_read_as_seconds_minutes_or_hours():
    for rng in _cases():
        s = rng.uniform(0, 1e6)
        text, r = progress.duration(s), int(round(s))
        expected = f"{r} s" if r < 60 else f"{r // 60}m {r % 60:02d}s" if r < 3600 else f"{r // 3600}h {r // 60 % 60:02d}m"
        assert text == expected, (s, text)


def test_a_missing_or_torn_file_reads_as_no_progress(tmp_path):
    assert progress.read(tmp_path) is None and progress.read(None) is None
    (tmp_path / progress.FILE).write_text('{"step": 1, "pha')
    assert progress.read(tmp_path) is None


def test_populora_jobs_shows_a_running_trainers_phase(tmp_path, monkeypatch, capsys):
    """``populora jobs``: under a running job, the phase its trainer reported, with the ETA from its phase times."""
    from conftest import wait_for

    from populora.cli import main

    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_QUEUE_DIR", str(tmp_path / "queue"))
    code = ("import time, os\nfrom pathlib import Path\nfrom populora.platform import progress\n"
            "r = progress.StepProgress([Path(os.environ['POPULORA_JOB_DIR'])], steps=3)\n"
            "r.start_step(2); r.last = {'propose': 50.0, 'solve': 30.0}; r.phase('solve'); r.count(12, 32); r.write()\n"
            "(Path(os.environ['POPULORA_JOB_DIR']) / 'reported').touch()\ntime.sleep(120)\n")
    job = jobs.start([sys.executable, "-c", code], name="reporter", slots=1)
    try:
        wait_for(lambda: (tmp_path / "jobs" / job.id / "reported").exists(), 60, "the job to report its phase",
                 detail=lambda: job.log_tail())
        wait_for(lambda: job.status == "running", 30, "the job to run")
        assert main(["jobs"]) == 0
        out = capsys.readouterr().out
        assert "step 2/3 · solving 12/32 answers · " in out and " in this phase · ETA " in out, out
    finally:
        jobs.stop(job, timeout_s=10)


def test_a_finished_supervisor_is_reaped_not_left_defunct(tmp_path):
    """The walk's finding: three <defunct> supervisors under the UI after three jobs (nothing waited for them)."""
    import psutil
    from conftest import wait_for

    job = jobs.start([sys.executable, "-c", "pass"], name="short", root=tmp_path)
    wait_for(lambda: job.exit_code is not None, 60, "the job to end")

    def gone() -> bool:
        try:
            return psutil.Process(job.pid).status() != psutil.STATUS_ZOMBIE and psutil.Process(job.pid).ppid() != psutil.Process().pid
        except psutil.NoSuchProcess:
            return True

    wait_for(gone, 30, f"supervisor {job.pid} to be reaped",
             detail=lambda: f" (status {psutil.Process(job.pid).status()})")
    assert job.status == "finished"


# ====================================================================== one source: training time, steps, ETAs
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

seconds = st.floats(0.0, 1e5, allow_nan=False)


@given(seconds, seconds, seconds, seconds, st.sampled_from(["solve", "update", "checkpoint", "next"]))
def test_training_time_never_goes_back_when_the_trainer_ends(before, ran, quiet, later, phase):
    """Issue 67: 1m 22s live, 1m 05s once the run stopped or finished. What the page showed at any moment up to the
    trainer's last word is at most what it shows once the trainer has ended, however long after."""
    t0 = 1e6
    p = {"phase": phase, "training_s": before, "step_started": t0, "updated": t0 + ran}
    shown_live = progress.training_seconds(p, now=t0 + ran)
    ended = progress.training_seconds(p, now=t0 + ran + quiet + later, live=False)
    assert ended >= shown_live - 1e-9 * max(1.0, ended) and ended == progress.training_seconds(p, now=t0 + ran + quiet, live=False)


@given(st.integers(1, 1000), st.integers(0, 1000), seconds, st.floats(1.0, 1e4), st.lists(seconds, min_size=2, max_size=6))
def test_an_eta_never_rises_while_no_unit_comes(done, left, start_gap, busy, waits):
    """An evaluation stuck at 18/36 showed its ETA rising from 51 s to 1m 57s. With nothing new, the ETA counts
    down, then gives way to the stall (never both, never negative)."""
    since, last = 1e6, 1e6 + busy
    previous = None
    for now in sorted(last + w for w in waits):
        eta, stalled = progress.remaining(done, left, since, last, now)
        assert (eta is None) != (stalled is None)
        if eta is not None:
            assert eta >= 0 and (previous is None or eta <= previous + 1e-6)
            previous = eta
        else:
            previous = 0.0


@given(st.integers(0, 60), st.integers(1, 60), st.sampled_from(["next", "solve", "setup"]))
def test_a_stopped_runs_steps_are_its_trainers_and_its_checkpoints(step, steps, phase):
    done = progress.steps_done({"phase": phase, "step": step})
    assert done == (max(0, step - 1) if phase == "solve" else step)
    for kept in range(0, done + 1):
        text = progress.stopped_where(done, kept, steps)
        assert text.startswith(f"after step {done}/{steps}")
        assert ("last checkpoint is step" in text) == (kept < done)


@given(st.integers(0, 100), st.integers(1, 100), st.sampled_from(["running", "finished", "stopped"]), st.booleans())
def test_the_bar_and_the_steps_agree_and_a_finished_run_is_full(step, steps, status, budget):
    text, fraction = progress.steps_shown(min(step, steps), steps, status, "spent x of y" if budget else "")
    assert 0.0 <= fraction <= 1.0
    if status == "finished" and (budget or step >= steps):
        assert fraction == 1.0
    elif status != "finished":
        assert text == f"{min(step, steps)}/{steps}" and fraction == min(step, steps) / steps
