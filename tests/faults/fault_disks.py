"""Small disks for the fault tests: a real tmpfs where this process may mount one (root, and a kernel and container
that allow it), else the test is skipped with the reason and its injected-ENOSPC twin covers the same code path."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from populora.platform import diskspace


@contextmanager
def tmpfs(path: Path, size: str):
    """A tmpfs of ``size`` (mount's syntax, e.g. "4m") mounted at ``path`` for the block, unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs a tmpfs mount, which needs root here (the injected-ENOSPC test covers this path)")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here ({done.stderr.strip() or done.returncode}); "
                    "the injected-ENOSPC test covers this path")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk``'s filesystem until ``leave`` bytes (rounded to its pages) are free; returns the filler file
    (delete it to free the space again)."""
    filler = disk / f"filler-{len(list(disk.glob('filler-*')))}"
    with open(filler, "wb") as fh:
        want = max(0, (diskspace.free_bytes(disk) or 0) - leave)
        while want > 0:
            try:
                fh.write(b"\0" * min(want, 1 << 20))
                fh.flush()
            except OSError:
                break
            want = max(0, (diskspace.free_bytes(disk) or 0) - leave)
    return filler


def leftovers(run_dir: Path) -> list[str]:
    """Temporary files or dirs a write left behind (``.tmp-*`` checkpoint dirs, ``.<name>.<pid>.tmp`` files, PEFT's
    ``.<member>.saving``)."""
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.name.startswith(".tmp-") or p.name.endswith((".tmp", ".saving")))
