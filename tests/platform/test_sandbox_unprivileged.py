"""The adversarial sandbox suite again, as an ordinary user: the sandbox must hold without root (user namespaces).

As root, this creates a system user (``useradd``) and runs tests/platform/test_sandbox.py as that user; as an ordinary user
the session itself is the unprivileged leg (tests/platform/test_sandbox.py runs as it), so this test has nothing to add."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path

import pytest

from populora.platform.sandbox.asuser import as_user_command, ensure_user

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def user_dir():
    """A scratch dir the user can enter (pytest's own user_dir lives below root's 0700 dir)."""
    path = Path(tempfile.mkdtemp(prefix="populora-sbx-user-"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_adversarial_suite_holds_as_an_unprivileged_user(user_dir):
    if os.geteuid() != 0:
        pytest.skip("this session already runs as an ordinary user: tests/platform/test_sandbox.py is the unprivileged leg")
    try:
        user = ensure_user()
    except (RuntimeError, subprocess.CalledProcessError) as e:
        pytest.skip(f"running as root but cannot create an unprivileged user: {e}")
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PYTHONPATH": str(ROOT), "HOME": str(user_dir),
           "LANG": "C.UTF-8", "TMPDIR": str(user_dir)}
    cmd = as_user_command(user, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=600",
                                 "-W", "ignore::pytest.PytestUnraisableExceptionWarning",
                                 str(ROOT / "tests" / "platform" / "test_sandbox.py")], env)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=user_dir, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "skipped" not in out.stdout, out.stdout[-2000:]
    # the children really ran as the user, in a user namespace (not as root)
    probe = as_user_command(user, [sys.executable, "-c", "import os; from populora.platform.sandbox import Sandbox\n"
                                   "with Sandbox(workers=1) as s: print(os.geteuid(), s.layers['userns'])"], env)
    seen = subprocess.run(probe, capture_output=True, text=True, cwd=user_dir, timeout=120)
    assert seen.stdout.split() == [str(__import__("pwd").getpwnam(user).pw_uid), "on"], seen.stderr[-2000:]
