"""The pre-warmed sandbox worker: a clean Python process that forks one fresh child per execution.

Started once by :class:`populora.platform.sandbox.pool.Sandbox` (never forked from the trainer, which holds torch and
threads), it enters its own (user,) network, IPC, mount and pid namespaces, pre-imports the modules programs may use (the child
is chrooted into an empty dir, so these are the only importable modules), compiles the seccomp filter, and
then serves one JSON request per line (one execution, or a batch of them, each in its own io slot and its own
child), answering one JSON line.

Per request: fork; the child sets rlimits, a new process group, chroots into an empty scratch dir, drops to the
worker's own unprivileged uid (root) or drops every capability (user namespace), loads seccomp and runs the program (``child.py``); the worker enforces
the wall clock, SIGKILLs the child's process group and deletes the scratch dir.

Speed: a fork costs ~0.5 ms of kernel time here, and every page the child touches costs a copy-on-write fault,
so the worker prepares everything once (file descriptors 0-4 are the child's stdin/stdout/stderr/result/program
files, the std streams are pre-built, the environment is already empty, no_new_privs is set, the seccomp filter
and the rlimits are built, the gc is frozen) and the child only runs syscalls.
"""

from __future__ import annotations

import ctypes
import gc
import io
import json
import math
import os
import shutil
import signal
import sys
import time
import traceback

from populora.platform.sandbox import kernel as iso
from populora.platform.sandbox.child import child_main

# Pre-imported for programs: the AZR task style (pure functions on builtin data) and stdin-style benchmark
# solutions. Anything not here fails with ModuleNotFoundError inside the chroot.
PRELOAD = tuple((
    "math cmath collections collections.abc itertools functools operator re string heapq bisect copy typing "
    "dataclasses enum fractions decimal statistics numbers array json textwrap unicodedata random struct "
    "io sys os traceback keyword difflib pprint abc contextlib types _thread"
).split())

UID_BASE = 1_000_000  # worker uid = UID_BASE + worker pid: unique among live workers, no coordination needed
_PROTO_IN, _PROTO_OUT, _LOG = 100, 101, 102  # the trainer's pipes, moved out of the child's way
IO_FILES = ("in", "out", "err", "res", "prog")  # the child's fds 0-4, in this order
_STDIN, _RESULT, PROGRAM_FD = 0, 3, 4
SLOT_FD = 10  # the io slots' files: fds 10 .. 10 + 5 * slots - 1, below the trainer's pipes
MAX_SLOTS = 16
_PAGE = os.sysconf("SC_PAGE_SIZE")


class Worker:
    def __init__(self, scratch_base: str, io_dir: str, layers: dict[str, str], uid: int,
                 disable: tuple[str, ...] = (), slots: int = 1):
        self.base, self.pid = scratch_base, os.getpid()  # pid 1 when the worker leads its own pid namespace
        self.layers = layers
        self.root_ok = os.geteuid() == 0
        # root: a uid of our own (unique among live workers, so programs cannot signal each other's workers);
        # a user namespace: our own uid is the only one mapped, the child drops its capabilities instead
        self.uid = uid if self.root_ok else os.getuid()
        self.userns = layers.get("userns") == "on"
        self.pidns = layers.get("pidns") == "on"
        self.fprog = self._seccomp() if "seccomp" not in disable else None
        if "seccomp" in disable:
            self.layers["seccomp"] = "off: disabled by Sandbox(disable_layers=...)"
        self.root = os.path.join(scratch_base, "root")
        self.limits, self._limits_key = (), None
        self._open_io(io_dir, slots)

    def _seccomp(self):
        try:
            self._fprog_keep = iso.make_fprog(iso.compile_seccomp())
            self.layers["seccomp"] = "on"
            return ctypes.addressof(self._fprog_keep[0])  # what the child's prctl takes, computed once
        except (OSError, AttributeError) as e:
            self.layers["seccomp"] = f"off: {e}"
            return None

    def _open_io(self, io_dir: str, slots: int) -> None:
        """Each of the ``slots`` (one per execution of a batch) has its stdin, stdout, stderr, result and program
        files, held at fds ``SLOT_FD + 5 * slot + (0..4)``; before each fork the slot's files become fds 0-4,
        the child's stdin, stdout, stderr, result and program files, and the child closes every fd above 3
        before the program runs. The trainer writes the program and stdin and reads the outputs itself, so no
        program text, output or value ever passes through this long-lived process, where a later program could
        dig it out of memory."""
        for slot in range(slots):
            for i, name in enumerate(IO_FILES):
                # stdin and the program are read-only for the child: nothing it writes there reaches the next one
                mode = os.O_RDONLY if i in (_STDIN, PROGRAM_FD) else os.O_RDWR | (os.O_APPEND if i in (1, 2) else 0)
                opened = os.open(os.path.join(io_dir, f"{slot}{name}"), mode)
                fd = SLOT_FD + len(IO_FILES) * slot + i
                if opened != fd:
                    os.dup2(opened, fd)
                    os.close(opened)
        self.slots, self.slot = slots, -1
        self._use_slot(0)
        self.streams = (
            io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace"),
            io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace"),
            io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                             line_buffering=True),
        )

    def _use_slot(self, slot: int) -> None:
        if slot != self.slot:
            if not 0 <= slot < self.slots:
                raise ValueError(f"no io slot {slot}")
            base = SLOT_FD + len(IO_FILES) * slot
            for i in range(len(IO_FILES)):
                os.dup2(base + i, i)
            self.slot = slot

    def _prepare(self, req: dict) -> None:
        self._use_slot(int(req.get("slot", 0)))
        key = (req["timeout_s"], req["memory_mb"], req["max_output"], req.get("max_value", 1 << 20))
        if key != self._limits_key:  # the same for every request of a pool: built once
            fsize = max(int(req["max_output"]), int(req.get("max_value", 1 << 20))) + 1
            self.limits = iso.limits(math.ceil(float(req["timeout_s"])) + 1, int(req["memory_mb"]), fsize)
            self._limits_key = key
        try:
            os.mkdir(self.root, 0o700)  # a fresh empty dir per run: nothing carries over, not even mtimes
        except FileExistsError:  # left over by a failed cleanup
            shutil.rmtree(self.root, ignore_errors=True)
            os.mkdir(self.root, 0o700)
        if self.root_ok:
            os.chown(self.root, self.uid, self.uid)
        for fd in (_STDIN, _RESULT):  # the child shares these offsets with us
            os.lseek(fd, 0, os.SEEK_SET)

    def _cleanup(self) -> None:
        try:
            os.rmdir(self.root)
        except OSError:  # the program left files behind
            shutil.rmtree(self.root, ignore_errors=True)

    def run(self, req: dict) -> dict:
        self._prepare(req)
        try:
            t0 = time.perf_counter()
            pid = iso.fork()
            if pid == 0:
                child_main(self, req)  # never returns
            how, code = self._wait(pid, float(req["timeout_s"]))
            wall = time.perf_counter() - t0
            if self.fprog is None:
                self._reap_uid()
            return {"how": how, "code": code, "wall_s": round(wall, 6)}
        finally:
            self._cleanup()

    def fork_exit(self, n: int, touch: tuple[int, int] | None = None) -> dict:
        """The floor under :meth:`run`: ``n`` bare forks of this same warm process whose child exits at once
        (no isolation, no program), timed here. ``populora bench verifier`` divides its rate by this one.

        ``touch=(pages, written)``: the worker first holds ``pages`` private pages of its own, and each child
        writes one byte to ``written`` of them before it exits, so each write is one copy-on-write fault.
        The same forks with ``written`` = 1 and = ``pages`` differ only by those faults: the bench divides
        the CPU difference by their number, giving what one copy-on-write fault costs on this machine."""
        if touch:
            return self._fork_touch(n, int(touch[0]), int(touch[1]))
        t0 = time.perf_counter()
        for _ in range(n):
            pid = iso.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        return {"how": "fork_exit", "code": 0, "wall_s": round(time.perf_counter() - t0, 6)}

    @staticmethod
    def _fork_touch(n: int, pages: int, written: int) -> dict:
        # a loop of its own, not a branch in fork_exit's: the bare child must do nothing but exit, it is the floor
        written = max(1, min(pages, written))
        buf = bytearray(pages * _PAGE)
        buf[::_PAGE] = b"\x01" * pages  # present and private in the worker before any fork
        where, ones = slice(0, written * _PAGE, _PAGE), b"\x02" * written  # built before the forks
        t0 = time.perf_counter()
        for _ in range(n):
            pid = iso.fork()
            if pid == 0:
                buf[where] = ones  # one C loop: a byte on each of ``written`` pages
                os._exit(0)
            os.waitpid(pid, 0)
        return {"how": "fork_exit", "code": 0, "wall_s": round(time.perf_counter() - t0, 6)}

    def _wait(self, pid: int, timeout_s: float) -> tuple[str, int]:
        deadline = time.monotonic() + timeout_s
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            left = deadline - time.monotonic()
            if done or left <= 0:
                break
            signal.sigtimedwait([signal.SIGCHLD], left)  # SIGCHLD is blocked: this is a timed wait
        if not done or self.fprog is None:
            # still running or a zombie, so its pid (= its process group id) cannot have been reused yet;
            # with seccomp on, a child that exited by itself cannot have left processes behind
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not done:
                _, status = os.waitpid(pid, 0)
            self._reap_orphans()
        if not done:
            return "timeout", -signal.SIGKILL
        return ("signal", -os.WTERMSIG(status)) if os.WIFSIGNALED(status) else ("exit", os.WEXITSTATUS(status))

    def _reap_uid(self) -> None:
        """Without seccomp a program can fork and leave its session: kill everything running as our uid (or,
        when we are init of our own pid namespace, everything in it), and reap it (orphans come back to us, the
        subreaper), until none is left."""
        if self.pidns:
            for _ in range(100):
                try:
                    os.kill(-1, signal.SIGKILL)  # as init of the namespace: every process in it but us
                except ProcessLookupError:
                    pass
                time.sleep(0.001)
                if self._reap_orphans():
                    return
            return
        if not self.root_ok:
            return
        for _ in range(100):
            pid = os.fork()
            if pid == 0:
                try:
                    os.setresuid(self.uid, self.uid, self.uid)
                    os.kill(-1, signal.SIGKILL)  # as this uid: every process of the uid except us
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            time.sleep(0.001)  # SIGKILL is delivered asynchronously
            if self._reap_orphans():
                return

    @staticmethod
    def _reap_orphans() -> bool:
        """Reap finished children; True if none is left."""
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    return False
            except ChildProcessError:
                return True


def _serve(worker: Worker) -> None:
    proto_in = os.fdopen(_PROTO_IN, "rb")
    proto_out = os.fdopen(_PROTO_OUT, "wb")

    def send(msg: dict) -> None:
        proto_out.write(json.dumps(msg).encode() + b"\n")
        proto_out.flush()

    send({"ready": True, "layers": worker.layers, "uid": worker.uid})
    def one(req: dict) -> dict:
        try:
            if "fork_exit" in req:
                return worker.fork_exit(int(req["fork_exit"]), req.get("touch"))
            return worker.run(req)
        except Exception:  # a sandbox bug, not a program failure: report it, keep serving
            return {"how": "error", "code": None, "wall_s": 0.0, "error": traceback.format_exc()}

    for line in proto_in:
        try:
            req = json.loads(line)
        except ValueError:
            send({"how": "error", "code": None, "wall_s": 0.0, "error": traceback.format_exc()})
            continue
        # a batch (one execution per io slot, each in its own fresh child, one after the other) saves the
        # round trips through the trainer's pipe; the answer is one line either way
        send({"batch": [one(r) for r in req["batch"]]} if "batch" in req else one(req))


def main() -> None:
    scratch_base, io_dir, tmpfs_mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
    disable = tuple(x for x in sys.argv[4].split(",") if x)
    preload = PRELOAD + tuple(x for x in (sys.argv[5] if len(sys.argv) > 5 else "").split(",") if x)
    slots = min(MAX_SLOTS, max(1, int(sys.argv[6]) if len(sys.argv) > 6 else 1))
    iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGKILL)  # the trainer died: so do we
    for fd, target in ((0, _PROTO_IN), (1, _PROTO_OUT), (2, _LOG)):
        os.dup2(fd, target)
    sys.stderr = io.TextIOWrapper(io.FileIO(_LOG, "w", closefd=False), line_buffering=True)
    os.environ.clear()  # once here, so children start with an empty environment
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    uid = UID_BASE + os.getpid()
    layers = iso.isolate_worker(scratch_base, tmpfs_mb, disable)
    if layers.get("pidns") == "on":
        _lead_pid_namespace()
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    # once for the worker and, inherited, every child (the worker never execs): a child's seccomp load is then
    # one prctl, and without it the kernel would refuse that filter, so the child fails closed
    iso.prctl(iso.PR_SET_NO_NEW_PRIVS, 1)
    for name in preload:
        __import__(name)
    worker = Worker(scratch_base, io_dir, layers, uid, disable, slots)
    gc.collect()
    gc.freeze()  # the child's collections never walk (and copy-on-write) the worker's objects
    _serve(worker)


def _lead_pid_namespace() -> None:
    """unshare(CLONE_NEWPID) moves only our future children: fork once, the child (pid 1 in the namespace, so
    every program's orphan comes back to it and dies with it) serves, and this process waits and mirrors its exit."""
    pid = os.fork()
    if pid == 0:
        iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGKILL)  # the outer process was killed: init dies, so does all
        return
    for fd in (_PROTO_IN, _PROTO_OUT, 0, 1):
        os.close(fd)  # only the inner worker talks to the trainer
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    main()
