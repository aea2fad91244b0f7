"""A local Ray start that times out (Ray's own 30 s limit on its raylet, reached on a loaded machine) is tried again,
the failed try's processes ended first; any other error, or the last try's, reaches the caller."""

import subprocess

import psutil
import pytest

from populora.platform.backends import ray as ray_backend


def alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


class FlakyRay:
    """``ray.init`` that, like a timed-out start, leaves a process of its own and raises Ray's exception,
    ``failures`` times; then starts."""

    def __init__(self, failures: int, message: str = "The current node timed out during startup. This could happen"):
        self.failures, self.message, self.calls, self.left = failures, message, [], []

    def is_initialized(self):
        return False

    def init(self, **kwargs):
        self.calls.append({**kwargs, "alive_before": [alive(p.pid) for p in self.left]})
        if len(self.calls) <= self.failures:
            self.left.append(subprocess.Popen(["sleep", "600"]))  # a raylet the failed start leaves behind
            raise Exception(self.message)


@pytest.fixture
def fake_ray(monkeypatch):
    def install(ray):
        monkeypatch.setitem(__import__("sys").modules, "ray", ray)
        return ray
    yield install


def test_a_timed_out_local_start_is_tried_again_after_its_processes_are_ended(fake_ray):
    ray = fake_ray(FlakyRay(failures=2))
    assert ray_backend.init_ray("local", num_cpus=3) is ray
    assert len(ray.calls) == 3 and all(c["num_cpus"] == 3 for c in ray.calls)
    # each try found the processes of the tries before it ended, not left running beside a new Ray
    assert [c["alive_before"] for c in ray.calls] == [[], [False], [False, False]]


def test_the_last_timed_out_try_and_any_other_error_reach_the_caller(fake_ray):
    ray = fake_ray(FlakyRay(failures=ray_backend.LOCAL_START_TRIES))
    with pytest.raises(Exception, match="timed out during startup"):
        ray_backend.init_ray("local")
    assert len(ray.calls) == ray_backend.LOCAL_START_TRIES
    other = fake_ray(FlakyRay(failures=1, message="Permission denied: /tmp/ray"))
    with pytest.raises(Exception, match="Permission denied"):
        ray_backend.init_ray("local")
    assert len(other.calls) == 1                                 # not a timeout: no second try
    for proc in ray.left + other.left:
        proc.kill()
        proc.wait()
