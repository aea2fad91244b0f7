"""The reaper (populora/platform/reaper.py): what a killed process started does not outlive it, and a watcher whose
processes ended cleanly goes away by itself. (The real vLLM engine under it: tests/vllm_real/test_shutdown.py.)"""

import subprocess
import sys

import psutil

from conftest import wait_for
from populora.platform import reaper

# a parent that starts a long child and a reaper watching it, prints both pids, then waits to be killed
PARENT = """
import subprocess, sys, time
from populora.platform import reaper
before = reaper.children()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
watcher = reaper.watch(reaper.new_children(before))
print(child.pid, watcher.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_sigkilled_parents_child_is_ended_and_the_reaper_exits():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child, watcher = map(int, parent.stdout.readline().split())
    assert not _gone(child) and not _gone(watcher)
    parent.kill()
    parent.wait()
    wait_for(lambda: _gone(child) and _gone(watcher), 60, "the orphaned child and its reaper to end")


def test_a_reaper_leaves_when_its_processes_end_first():
    before = reaper.children()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    watcher = reaper.watch(reaper.new_children(before))
    try:
        child.terminate()
        child.wait()
        assert watcher.wait(timeout=60) == 0  # its owner (this process) lives on: it left because the child ended
    finally:
        child.kill()
        watcher.kill()
