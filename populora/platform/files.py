"""Writing a file whole: a reader, or a process killed mid-write, sees the old file or the new one, never half."""

from __future__ import annotations

import os
from pathlib import Path

from populora.platform import diskspace


def write_atomic(path: Path, text: str, durable: bool = False, what: str | None = None) -> None:
    """Write-then-rename: a killed process leaves the old file or the new one, never half of one. ``durable``: the
    text is on disk (fsync) before the rename, so a power loss or a crashed machine cannot leave the new name on
    an empty file either (a checkpoint's ``latest`` pointer). A full disk raises DiskFull naming ``what`` (default:
    the file) and leaves no temporary file.

    >>> import tempfile; p = Path(tempfile.mkdtemp()) / "d" / "f"; write_atomic(p, "x"); p.read_text()
    'x'
    >>> write_atomic(p, "y", durable=True); p.read_text(), sorted(q.name for q in p.parent.iterdir())
    ('y', ['f'])
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with diskspace.writing(what or f"the file {path.name}", path, len(text.encode()), exact=True):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w") as f:
                f.write(text)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
