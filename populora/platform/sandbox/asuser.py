"""Run a command of this Python as an ordinary user, from root: how the unprivileged sandbox is tested and
benchmarked on a machine where we are root (``tests/platform/test_sandbox_unprivileged.py``, ``populora bench verifier
--as-user``).

``runuser`` drops to the user; when this interpreter, its venv or the project on ``PYTHONPATH`` lives below a
directory the user cannot enter (pyenv in ``/root``, a clone in a 0700 home or ``mktemp -d`` dir), the command
first enters a private mount namespace in which that directory is replaced by a world-readable tmpfs holding only
bind mounts of the trees needed, so nothing else of it is exposed and the host is not changed.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

TEST_USER = "populora-sandbox"


def ensure_user(name: str = TEST_USER) -> str:
    """The user ``name``, created as a system user without a home when missing (needs root and ``useradd``)."""
    try:
        pwd.getpwnam(name)
        return name
    except KeyError:
        pass
    if os.geteuid() != 0 or not shutil.which("useradd"):
        raise RuntimeError(f"no user {name!r} and no way to create one (needs root and useradd)")
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    return name


def _closed_ancestor(path: Path) -> tuple[Path, Path] | None:
    """(dir, its child on the way to ``path``) for the first directory others cannot traverse, if any."""
    parts = path.resolve().parts
    for i in range(1, len(parts) - 1):
        d = Path(*parts[:i + 1])
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return d, Path(*parts[:i + 2])
    return None


def as_user_command(user: str, argv: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` (its first item: this interpreter) run as ``user`` with exactly ``env``."""
    if not shutil.which("runuser"):
        raise RuntimeError("runuser (util-linux) is needed to run as another user")
    run = ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
    # the interpreter's real tree (pyenv below /root), the venv (a clone below a 0700 home or mktemp dir) and
    # what PYTHONPATH names (the project itself): the user must be able to reach each
    paths = [Path(sys.executable), Path(sys.base_prefix), Path(sys.prefix)]
    paths += [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isabs(p)]
    closed = {c for p in paths if os.path.exists(p) and (c := _closed_ancestor(p))}
    if not closed:
        return run
    by_dir: dict[Path, set[Path]] = {}
    for d, child in closed:
        by_dir.setdefault(d, set()).add(child)
    script = ["set -e", "mount -t tmpfs -o size=1m tmpfs /mnt"]  # staging, private to the namespace: no litter
    for i, (d, children) in enumerate(sorted(by_dir.items())):
        keeps = [(f"/mnt/{i}.{j}", shlex.quote(str(c))) for j, c in enumerate(sorted(children))]
        script += [line for keep, c in keeps for line in (f"mkdir -p {keep}", f"mount --bind {c} {keep}")]
        script.append(f"mount -t tmpfs -o mode=0755,size=1m tmpfs {shlex.quote(str(d))}")
        script += [line for keep, c in keeps for line in (f"mkdir -p {c}", f"mount --move {keep} {c}")]
    script.append("exec " + shlex.join(run))
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "\n".join(script)]
