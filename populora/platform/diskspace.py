"""A full disk or an exceeded quota, recognised whatever library hit it and said in one line.

The libraries a run writes through each say "disk full" their own way: Python's OSError (errno ENOSPC, EDQUOT),
torch's zip writer ("[enforce fail at inline_container.cc:672] . unexpected pos 2368 vs 2262", a RuntimeError with
no errno), safetensors ("I/O error: No space left on device (os error 28)"), sqlite ("database or disk is full",
SQLITE_FULL), wrapped by sqlalchemy and again by MLflow (an MlflowException, also from an MLflow server's reply).
``disk_full_errno`` reads the whole chain of causes; ``writing`` turns any of them, raised while something is
written, into a ``DiskFull`` whose text is the one line an engineer on call needs: what was being written, where,
the space left there and what the write needs, and the command that continues once space is freed.

The free figure is the filesystem's space available to this user (``statvfs`` f_bavail, as ``df``); a quota
(EDQUOT) is not visible there, so a quota's line says so instead of a misleading free figure.
Standard library only: the CLI imports it to print the line.
"""

from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
SQLITE_FULL = 13  # sqlite3.OperationalError.sqlite_errorcode of "database or disk is full"
_PHRASES = {"no space left on device": errno.ENOSPC, "database or disk is full": errno.ENOSPC,
            "disk quota exceeded": errno.EDQUOT, "os error 28": errno.ENOSPC, "os error 122": errno.EDQUOT}
# torch's PyTorchStreamWriter (caffe2/serialize/inline_container.cc): a short write is "unexpected pos A vs B",
# a failed one "file write failed"; neither carries an errno
_TORCH_WRITER = ("inline_container.cc", "pytorchstreamwriter")
_TORCH_SHORT = ("unexpected pos", "file write failed")
AGAIN = "run the same command again"


def disk_full_errno(err: BaseException | None) -> int | None:
    """ENOSPC or EDQUOT if ``err`` (or any error in its chain of causes) says the disk or a quota is full, else None.

    >>> disk_full_errno(OSError(errno.ENOSPC, "No space left on device")) == errno.ENOSPC
    True
    >>> disk_full_errno(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 2368 vs 2262")) == errno.ENOSPC
    True
    >>> disk_full_errno(RuntimeError("(sqlite3.OperationalError) database or disk is full")) == errno.ENOSPC
    True
    >>> disk_full_errno(OSError(errno.EACCES, "Permission denied")), disk_full_errno(ValueError("unexpected pos"))
    (None, None)
    """
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        code = _own_errno(err)
        if code:
            return code
        err = err.__cause__ or err.__context__
    return None


def _own_errno(err: BaseException) -> int | None:
    if isinstance(err, OSError) and err.errno in FULL_ERRNOS:
        return err.errno
    if getattr(err, "sqlite_errorcode", None) == SQLITE_FULL:
        return errno.ENOSPC
    text = str(err).lower()
    if isinstance(err, RuntimeError) and any(w in text for w in _TORCH_WRITER) and any(s in text for s in _TORCH_SHORT):
        return errno.ENOSPC
    return next((code for phrase, code in _PHRASES.items() if phrase in text), None)


def human(n: int | float | None) -> str:
    """Bytes as people read them (powers of 1024, as ``df -h``).

    >>> human(0), human(1023), human(2048), human(5 * 1024**3 + 1), human(None)
    ('0 B', '1023 B', '2.0 KiB', '5.0 GiB', 'unknown')
    """
    if n is None:
        return "unknown"
    n = max(0, int(n))
    if n < 1024:
        return f"{n} B"
    value, unit = float(n), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            break
    return f"{value:.1f} {unit}"


def free_bytes(path: str | Path) -> int | None:
    """Space available to this user on the filesystem holding ``path`` (or its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def tree_bytes(path: str | Path) -> int:
    """The bytes of the files under ``path`` (what a copy of it needs)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file() and not f.is_symlink())


def store_location(uri: str) -> str:
    """Where an MLflow tracking URI keeps its data on disk, for the line (a server's URI as it is: its disk is the
    server's).

    >>> store_location("sqlite:////data/mlflow.db"), store_location("file:///data/mlruns"), store_location("http://h:5000")
    ('/data/mlflow.db', '/data/mlruns', 'http://h:5000')
    """
    for prefix in ("sqlite:///", "file://"):
        if uri.startswith(prefix):
            return uri[len(prefix):]
    return uri if "://" in uri else str(Path(uri).absolute())


class DiskFull(OSError):
    """A write that a full disk (ENOSPC) or an exceeded quota (EDQUOT) stopped, or would have (``before``: a space
    check refused to start it). ``str()`` is the one line to print; ``resume`` says how to go on once space is
    freed (the trainer puts its resume command there)."""

    def __init__(self, code: int, what: str, where: str | Path, free: int | None, needed: int | None,
                 before: bool = False, resume: str = AGAIN):
        super().__init__(code, os.strerror(code))
        self.what, self.where, self.free, self.needed, self.before, self.resume = what, str(where), free, needed, before, resume

    def __str__(self) -> str:
        need = f", it needs about {human(self.needed)}" if self.needed else ""
        if self.errno == errno.EDQUOT:
            head = f"disk quota exceeded writing {self.what} to {self.where} (the quota's limit is not shown by df{need})"
        elif self.before:
            head = (f"not enough disk space for {self.what} in {self.where}: {human(self.free)} free{need}; "
                    f"stopped before starting a write it could not finish")
        else:
            head = f"disk full writing {self.what} to {self.where}: {human(self.free)} free there{need}"
        return f"{head}; free space, then {self.resume}"


def as_disk_full(err: BaseException, what: str, where: str | Path, needed=None,
                 exact: bool = False) -> DiskFull | None:
    """``err`` as a DiskFull (itself if it is one) if it says the disk is full, else None. The file the OS
    named, if any, is a better "where" than the caller's, unless ``exact`` (the caller's names what the user
    knows, not a temporary file)."""
    if isinstance(err, DiskFull):
        return err
    code = disk_full_errno(err)
    if code is None:
        return None
    where = (None if exact else _named_file(err)) or where
    if callable(needed):  # measured only for the message: what the failed write held
        needed = needed()
    return DiskFull(code, what, where, free_bytes(where), needed)


def _named_file(err: BaseException | None) -> str | None:
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.filename:
            return str(err.filename)
        err = err.__cause__ or err.__context__
    return None


@contextmanager
def writing(what: str, where: str | Path, needed=None, exact: bool = False):
    """Run the block that writes ``what`` under ``where``; a full disk in it is raised as a DiskFull (from the
    original error), anything else as it was. Nested blocks: the innermost one names the write. ``needed``: the
    bytes the write needs, or a function measuring them (called only when the disk is full)."""
    try:
        yield
    except Exception as err:
        full = as_disk_full(err, what, where, needed, exact)
        if full is None or full is err:
            raise
        raise full from err


def ensure_space(what: str, where: str | Path, needed: int | None) -> None:
    """Refuse to start writing ``what`` (DiskFull, ``before``) when ``where``'s filesystem has less than
    ``needed`` bytes free; None: nothing to compare with, no check."""
    if not needed:
        return
    free = free_bytes(where)
    if free is not None and free < needed:
        raise DiskFull(errno.ENOSPC, what, where, free, needed, before=True)
