"""Writing a file whole: a reader, or a process killed mid-write, sees the old file or the new one, never half."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write-then-rename: a killed process leaves the old file or the new one, never half of one.

    >>> import tempfile; p = Path(tempfile.mkdtemp()) / "d" / "f"; write_atomic(p, "x"); p.read_text()
    'x'
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
