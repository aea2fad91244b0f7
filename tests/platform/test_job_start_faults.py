"""A launch that fails half-way never leaves a job "starting" for ever (platform/jobs.start, job_record.status): such
a job held the queue's first place, so every job launched after it waited for ever. Faults injected: the
supervisor cannot be started (no processes left), its pid cannot be saved (a full disk), the launcher died between
the two (a record with no pid, long after its launch)."""

from __future__ import annotations

import errno
import subprocess
import sys
import time

import psutil
import pytest
from conftest import wait_for_status

from populora.platform.jobs import jobs, queue
from populora.platform.jobs.job_record import START_GRACE_S, Job


pytestmark = pytest.mark.usefixtures("own_queue")  # each test its own queue (conftest)


def _the_next_job_runs(tmp_path) -> None:
    after = jobs.start([sys.executable, "-c", "print('after ran')"], root=tmp_path, slots=1)
    assert wait_for_status(after, ("finished", "failed")) == "finished", after.log_tail()
    assert "after ran" in after.log_tail()


def test_a_record_with_no_supervisor_long_after_its_launch_is_lost_and_leaves_the_queue(tmp_path):
    """The launcher died between saving the record and starting the supervisor: "starting" while that can still
    be the launch under way, "lost" after ``START_GRACE_S``; the queue drops its ticket and the next job runs."""
    dead = Job(id="dead", argv=["true"], dir=str(tmp_path / "dead"), created=time.time() - START_GRACE_S - 1, slots=1,
               queue=str(queue.queue_dir()))
    (tmp_path / "dead").mkdir()
    dead.save()
    queue.enter(dead)
    fresh = Job(id="fresh", argv=["true"], dir=str(tmp_path / "fresh"), created=time.time())
    assert fresh.status == "starting" and dead.status == "lost"
    assert [j.id for j in queue.entries()] == []  # its ticket is gone
    _the_next_job_runs(tmp_path)


def test_a_supervisor_that_cannot_start_fails_the_job_with_its_reason_and_frees_the_queue(tmp_path, monkeypatch):
    def no_processes(*args, **kwargs):
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(jobs.subprocess, "Popen", no_processes)
    with pytest.raises(OSError, match="Resource temporarily unavailable"):
        jobs.start([sys.executable, "-c", "print('never')"], name="doomed", root=tmp_path, slots=1)
    monkeypatch.undo()
    (job,) = [j for j in jobs.list_jobs(tmp_path) if j.name == "doomed"]
    assert job.status == "failed" and job.pid is None
    assert "error: the job could not start: BlockingIOError: [Errno 11] Resource temporarily unavailable" in job.log_tail()
    assert queue.entries() == []
    _the_next_job_runs(tmp_path)


def test_a_pid_that_cannot_be_saved_stops_the_supervisor_and_fails_the_job(tmp_path, monkeypatch):
    """The disk fills between the supervisor's start and the record of its pid: a job nobody could stop (no pid
    on record) is not left running; it ends failed, out of the queue."""
    started: list[subprocess.Popen] = []
    real_popen, real_save = subprocess.Popen, Job.save

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    def save(self):
        if self.pid is not None:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(self)

    monkeypatch.setattr(jobs.subprocess, "Popen", popen)
    monkeypatch.setattr(Job, "save", save)
    with pytest.raises(OSError, match="No space left"):
        jobs.start([sys.executable, "-c", "import time; time.sleep(600)"], name="full", root=tmp_path, slots=1)
    monkeypatch.undo()
    (proc,) = started
    assert proc.wait(timeout=60) == -9  # the supervisor (and its session) killed at once
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
    (job,) = [j for j in jobs.list_jobs(tmp_path) if j.name == "full"]
    assert job.status == "failed" and "No space left on device" in job.log_tail()
    assert queue.entries() == []
    _the_next_job_runs(tmp_path)
