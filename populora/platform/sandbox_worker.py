"""The pre-warmed sandbox worker: a clean Python process that forks one fresh child per execution.

Started once by :class:`populora.platform.sandbox.Sandbox` (never forked from the trainer, which holds torch and
threads), it enters its own network and mount namespaces, pre-imports the modules programs may use (the child
is chrooted into an empty dir, so these are the only importable modules), compiles the seccomp filter, and
then serves one JSON request per line on stdin, answering one JSON line on stdout.

Per request: fork; the child sets rlimits, a new session, chroots into an empty scratch dir, drops to the
worker's own unprivileged uid, loads seccomp, runs the program and (optionally) canonicalises ``f(args)``; the
worker enforces the wall clock, SIGKILLs the child's process group, and deletes the scratch dir.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sys
import time

from populora.platform import sandbox_isolation as iso
from populora.platform.sandbox_child import child_main

# Pre-imported for programs: the AZR task style (pure functions on builtin data) and stdin-style benchmark
# solutions. Anything not here fails with ModuleNotFoundError inside the chroot.
PRELOAD = (
    "math cmath collections collections.abc itertools functools operator re string heapq bisect copy typing "
    "dataclasses enum fractions decimal statistics numbers array json textwrap unicodedata random struct "
    "io sys os traceback keyword difflib pprint abc contextlib types"
).split()

UID_BASE = 1_000_000  # worker uid = UID_BASE + worker pid: unique among live workers, no coordination needed


def _send(msg: dict) -> None:
    sys.stdout.buffer.write(json.dumps(msg).encode() + b"\n")
    sys.stdout.buffer.flush()


class Worker:
    def __init__(self, scratch_base: str, tmpfs_mb: int):
        self.base, self.pid = scratch_base, os.getpid()
        self.uid = UID_BASE + self.pid
        self.layers = iso.isolate_worker(scratch_base, tmpfs_mb)
        self.fprog = self._seccomp()
        self.root_ok = os.geteuid() == 0
        self.layers["chroot+uid"] = "on" if self.root_ok else "off: not running as root"
        self.io = os.path.join(scratch_base, "io")
        os.makedirs(self.io, exist_ok=True)
        self.root = os.path.join(scratch_base, "root")

    def _seccomp(self):
        try:
            self._fprog_keep = iso.make_fprog(iso.compile_seccomp())
            self.layers["seccomp"] = "on"
            return self._fprog_keep[0]
        except (OSError, AttributeError) as e:
            self.layers["seccomp"] = f"off: {e}"
            return None

    def _prepare(self, req: dict) -> dict:
        """Fresh empty scratch dir owned by the worker's uid, plus the child's stdin/stdout/stderr/result files."""
        os.mkdir(self.root, 0o700)
        if self.root_ok:
            os.chown(self.root, self.uid, self.uid)
        fds = {}
        with open(os.path.join(self.io, "in"), "wb") as fh:
            fh.write(req.get("stdin", "").encode())
        fds["in"] = os.open(os.path.join(self.io, "in"), os.O_RDONLY)
        for name in ("out", "err", "res"):
            fds[name] = os.open(os.path.join(self.io, name), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        return fds

    def _cleanup(self, fds: dict) -> None:
        for fd in fds.values():
            os.close(fd)
        try:
            os.rmdir(self.root)
        except OSError:  # the program left files behind
            shutil.rmtree(self.root, ignore_errors=True)

    def run(self, req: dict) -> dict:
        fds = self._prepare(req)
        try:
            t0 = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                child_main(self, req, fds)  # never returns
            how, code = self._wait(pid, float(req["timeout_s"]))
            wall = time.perf_counter() - t0
            if self.fprog is None:
                self._reap_uid()
            return _result(how, code, wall, fds, req)
        finally:
            self._cleanup(fds)

    def _wait(self, pid: int, timeout_s: float) -> tuple[str, int]:
        pidfd = os.pidfd_open(pid)
        try:
            ready = select.select([pidfd], [], [], timeout_s)[0]
        finally:
            os.close(pidfd)
        # the child is a zombie or still running, so its pid (= its process group id) cannot be reused yet
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
        self._reap_orphans()
        if not ready:
            return "timeout", -signal.SIGKILL
        return ("signal", -os.WTERMSIG(status)) if os.WIFSIGNALED(status) else ("exit", os.WEXITSTATUS(status))

    def _reap_uid(self) -> None:
        """Without seccomp a program can fork and leave its session: kill everything running as our uid."""
        if not self.root_ok:
            return
        pid = os.fork()
        if pid == 0:
            try:
                os.setresuid(self.uid, self.uid, self.uid)
                os.kill(-1, signal.SIGKILL)  # as this uid: every process of the uid except us
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        self._reap_orphans()

    @staticmethod
    def _reap_orphans() -> None:
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    return
            except ChildProcessError:
                return


def _read(fd: int, limit: int) -> tuple[bytes, bool]:
    size = os.fstat(fd).st_size
    return os.pread(fd, min(size, limit), 0), size > limit


def _result(how: str, code: int, wall: float, fds: dict, req: dict) -> dict:
    limit = int(req["max_output"])
    out, out_over = _read(fds["out"], limit)
    err, err_over = _read(fds["err"], limit)
    res_raw, _ = _read(fds["res"], iso_value_limit(req))
    try:
        res = json.loads(res_raw) if res_raw else {}
    except ValueError:
        res = {}
    status = _status(how, code, res, out_over or err_over)
    r = {"status": status, "stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace"),
         "returncode": code, "wall_s": round(wall, 6)}
    if req.get("call") is not None:
        r["values"] = res.get("values") if status == "ok" else None
        if status == "ok" and r["values"] is None:
            r["status"], r["stderr"] = "error", r["stderr"] + "\n[sandbox] program exited before f returned"
    return r


def iso_value_limit(req: dict) -> int:
    return int(req.get("max_value", 1 << 20))


def _status(how: str, code: int, res: dict, over: bool) -> str:
    if how == "timeout" or code == -signal.SIGXCPU:
        return "timeout"
    if code == -signal.SIGXFSZ or over or res.get("status") == "output_limit":
        return "output_limit"
    if res.get("status") == "memory":
        return "memory"
    if how == "signal":
        return "killed"
    return "ok" if code == 0 else "error"


def main() -> None:
    scratch_base, tmpfs_mb = sys.argv[1], int(sys.argv[2])
    iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGKILL)  # the trainer died: so do we
    for name in PRELOAD:
        __import__(name)
    worker = Worker(scratch_base, tmpfs_mb)
    _send({"ready": True, "layers": worker.layers, "uid": worker.uid})
    for line in sys.stdin.buffer:
        try:
            reply = worker.run(json.loads(line))
        except Exception as e:  # a sandbox bug, not a program failure: report it, keep serving
            reply = {"status": "killed", "stdout": "", "stderr": f"[sandbox] worker error: {e!r}",
                     "returncode": None, "wall_s": 0.0}
        _send(reply)


if __name__ == "__main__":
    main()
