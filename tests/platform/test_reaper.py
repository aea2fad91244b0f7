"""The reaper (populora/platform/jobs/reaper.py): what a killed process started, even while starting it, does not outlive
it, and the reaper leaves with its owner. (The real vLLM engine under it: tests/vllm_real/test_shutdown.py.)"""

import subprocess
import sys

import psutil

from conftest import wait_for
from populora.platform.jobs import reaper


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# a parent that starts a following reaper, then (as vLLM's engine start does) a child that starts a grandchild, and is
# killed before that "start" returns: nothing it started may outlive it
FOLLOWING = """
import subprocess, sys, time
from populora.platform.jobs import reaper
watcher = reaper.follow(log=sys.argv[1])
child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); print(g.pid, flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
grandchild = int(child.stdout.readline())
print(watcher.pid, child.pid, grandchild, flush=True)
time.sleep(600)
"""


def test_a_parent_killed_while_starting_its_processes_leaves_none_with_a_following_reaper(tmp_path):
    log = tmp_path / "seen"
    parent = subprocess.Popen([sys.executable, "-c", FOLLOWING, str(log)], stdout=subprocess.PIPE, text=True)
    watcher, child, grandchild = map(int, parent.stdout.readline().split())
    # the kill lands once the reaper has noted both (an event: its log), as a minute-long engine start lets it
    wait_for(lambda: log.exists() and {str(child), str(grandchild)} <= set(log.read_text().split()), 60,
             "the reaper to note the child and the grandchild")
    assert not any(_gone(p) for p in (watcher, child, grandchild))
    parent.kill()
    parent.wait()
    wait_for(lambda: _gone(child) and _gone(grandchild) and _gone(watcher), 60,
             "the orphaned child, grandchild and their reaper to end")


def test_a_following_reaper_leaves_with_its_owner_and_ends_nothing_started_before_it():
    older = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        watcher = reaper.follow(owner.pid)  # a reaper for another process: what that process starts, nothing of ours
        owner.kill()
        owner.wait()
        assert watcher.wait(timeout=60) == 0
        assert not _gone(older.pid)
    finally:
        older.kill()
        owner.kill()


def test_a_stopped_reaper_ends_nothing_it_followed():
    """``stop``: what the reaper followed was closed cleanly; the reaper goes, and takes nothing with it."""
    watcher = reaper.follow()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        reaper.stop(watcher)
        assert watcher.returncode is not None and not _gone(child.pid)
    finally:
        child.kill()
        child.wait()
