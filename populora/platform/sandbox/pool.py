"""The trainer's side of the sandbox: a pool of pre-warmed workers that run untrusted Python, one fresh process each.

    with Sandbox(timeout_s=2) as sb:
        r = sb.run("print(1 + 1)")          # ExecResult(status="ok", stdout="2\\n", ...)
        rs = sb.run_many(["print(1)", "while True: pass"])

Each worker (``sandbox/worker.py``) is a clean ``python`` process started once, in its own (user,) network, IPC,
mount and pid namespaces; per execution it forks a child that is rlimited, chrooted into an empty scratch dir,
moved to an unprivileged uid (root) or stripped of every capability (user namespace) and seccomp-filtered
(``sandbox/child.py``). What is isolated and how well: docs/sandbox.md.

Without the essential layers (:data:`ESSENTIAL`) the pool refuses to start, naming what is missing, unless the
caller allows unconfined execution (``allow_unconfined=True``, or ``POPULORA_SANDBOX_ALLOW_UNCONFINED=1``, which
``sandbox.allow_unconfined: true`` in a training config sets).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from populora.platform.sandbox.worker import IO_FILES, MAX_SLOTS

log = logging.getLogger(__name__)

STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "killed")
# Without these a program can read and write the user's files (chroot+uid) or open sockets, signal, fork
# and exec (seccomp): the pool will not run model code without them unless told so explicitly.
ESSENTIAL = ("chroot+uid", "seccomp")
ALLOW_UNCONFINED_ENV = "POPULORA_SANDBOX_ALLOW_UNCONFINED"
_REPO_ROOT = str(Path(__file__).resolve().parents[3])
_WARNED: set[str] = set()
_WARN_LOCK = threading.Lock()


@dataclass
class ExecResult:
    status: str          # "ok" | "error" | "timeout" | "memory" | "output_limit" | "killed"
    stdout: str
    stderr: str
    returncode: int | None
    wall_s: float
    value: str | None = None          # canonical text of f(args) (the first one when repeated)
    values: list[str] | None = None   # canonical text of every repeated call

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class ExecRequest:
    """One execution; ``call`` (argument text, as in ``f(<call>)``) asks for the canonical value of f."""
    program: str
    stdin: str = ""
    call: str | None = None
    repeat: int = 1
    timeout_s: float | None = None
    memory_mb: int | None = None


class SandboxUnavailable(RuntimeError):
    """An essential isolation layer is missing and unconfined execution was not allowed."""


def allow_unconfined_default() -> bool:
    return os.environ.get(ALLOW_UNCONFINED_ENV, "").strip().lower() in ("1", "true", "yes")


def missing_essentials(layers: dict[str, str]) -> dict[str, str]:
    """{layer: why} for every essential layer that is not on."""
    return {k: layers.get(k, "off: not reported") for k in ESSENTIAL if layers.get(k) != "on"}


def refusal_message(missing: dict[str, str]) -> str:
    what = "; ".join(f"{k}: {why}" for k, why in missing.items())
    return (f"populora sandbox: refusing to run model-written code without isolation ({what}). Run as root, or "
            "as a user where unprivileged user namespaces work (`unshare -Urn true` succeeds), with libseccomp2 "
            "installed; or accept running it unconfined with `sandbox.allow_unconfined: true` in the config "
            f"(or {ALLOW_UNCONFINED_ENV}=1), which is recorded on the run.")


def _warn_once(layer: str, why: str) -> None:
    with _WARN_LOCK:
        if layer in _WARNED:
            return
        _WARNED.add(layer)
    msg = f"populora sandbox: isolation layer {layer!r} is UNAVAILABLE here ({why}); falling back to the others"
    log.warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


_PREFIX = "populora-sandbox-"


def sweep_stale_dirs() -> int:
    """Remove scratch/io dirs left by sandboxes whose process died without closing (e.g. ``kill -9``)."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(_PREFIX + "*-*"):
        pid = path.name[len(_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue  # alive (or a reused pid: then it is only left for later)
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def _read(fd: int, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of a child's output file, whether it held more; the file is emptied for the next run."""
    size = os.fstat(fd).st_size
    if not size:
        return b"", False
    data = os.pread(fd, min(size, limit), 0)
    os.ftruncate(fd, 0)
    return data, size > limit


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


class _WorkerProc:
    """The trainer's handle on one worker process: send a request line, read the reply line."""

    def __init__(self, tmpfs_mb: int, disable: tuple[str, ...] = (), preload: tuple[str, ...] = (),
                 slots: int = 1):
        owner = f"{_PREFIX}{os.getpid()}-"  # lets a later sandbox remove these if we die without closing
        self.base = tempfile.mkdtemp(prefix=owner)  # the worker mounts its scratch tmpfs here
        os.chmod(self.base, 0o711)
        self.io_dir = tempfile.mkdtemp(prefix=owner + "io-")  # 0700: only we and the worker (root)
        self.slots = slots  # io slots: how many executions one request (a batch) may carry
        self.fds = [{name: os.open(os.path.join(self.io_dir, f"{slot}{name}"), os.O_RDWR | os.O_CREAT, 0o600)
                     for name in IO_FILES} for slot in range(slots)]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",  # same str hashes everywhere
               "MALLOC_ARENA_MAX": "2", "PYTHONDONTWRITEBYTECODE": "1",  # threads must not reserve 64 MB arenas
               # a preloaded numpy must not start BLAS threads: the worker forks, so it must stay single-threaded
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        # -S: no site-packages, unless preloaded modules need them (the trainer's own import path, then)
        path = [_REPO_ROOT] + ([p for p in sys.path if p and os.path.isdir(p)] if preload else [])
        code = f"import sys; sys.path[:0] = {path!r}; from populora.platform.sandbox.worker import main; main()"
        self.proc = subprocess.Popen([sys.executable, "-S", "-s", "-c", code, self.base, self.io_dir, str(tmpfs_mb),
                                      ",".join(disable), ",".join(preload), str(slots)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd="/",
                                     start_new_session=True)
        self.buf, self.tasks, self.ready, self.sizes = b"", 0, None, {}

    def wait_ready(self, timeout_s: float = 60.0) -> dict:
        line = self._readline(timeout_s)
        if line is None:
            raise RuntimeError("sandbox worker failed to start (see stderr above)")
        self.ready = json.loads(line)
        return self.ready

    def _readline(self, timeout_s: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        # poll, not select: select() refuses descriptors >= 1024 (FD_SETSIZE), and each worker holds 5 io files
        # per slot, so a 16-core machine's 32 workers x 8 slots (1,280) pass it before the last worker is ready
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while b"\n" not in self.buf:
            if not poller.poll(timeout_s * 1000):
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def request(self, req: dict, program: str, stdin: str) -> dict | None:
        """Run one execution; the result fields, or None if the worker died or hung (the caller replaces it)."""
        replies = self.request_batch([(req, program, stdin)])
        return None if replies is None else replies[0]

    def request_batch(self, items: list[tuple[dict, str, str]]) -> list[dict] | None:
        """Run up to ``slots`` executions, each in its own fresh child, in one round trip; their result fields
        in order, or None if the worker died or hung (the caller replaces it)."""
        assert 0 < len(items) <= self.slots, (len(items), self.slots)
        wire = []
        for slot, (req, program, stdin) in enumerate(items):
            fds = self.fds[slot]
            for name, text in (("prog", program), ("in", stdin)):
                data = text.encode("utf-8", errors="surrogatepass")
                # the child opens both read-only; fstat still checks, so no earlier run's text reaches this one
                if data or self.sizes.get((slot, name)) or os.fstat(fds[name]).st_size:
                    os.ftruncate(fds[name], 0)
                    os.pwrite(fds[name], data, 0)
                    self.sizes[(slot, name)] = len(data)
            wire.append(dict(req, slot=slot))
        try:
            self.proc.stdin.write(json.dumps({"batch": wire} if len(wire) > 1 else wire[0]).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        self.tasks += len(items)
        # the worker enforces the real deadlines, one after the other
        line = self._readline(sum(float(r["timeout_s"]) for r in wire) + 30.0)
        if line is None:
            return None
        reply = json.loads(line)
        replies = reply["batch"] if len(wire) > 1 else [reply]
        if len(replies) != len(wire):
            return None
        return [self._error(r) if r["how"] == "error" else self._collect(r, req, slot)
                for slot, (r, req) in enumerate(zip(replies, wire))]

    @staticmethod
    def _error(reply: dict) -> dict:
        return {"status": "killed", "stdout": "", "stderr": "[sandbox] worker error: " + reply["error"],
                "returncode": None, "wall_s": 0.0}

    def fork_exit(self, n: int, touch: tuple[int, int] | None = None) -> float:
        """Seconds the worker took for ``n`` bare fork + exit of itself (the benchmark's floor); ``touch``:
        each child first writes to some of the worker's pages (see ``Worker.fork_exit``)."""
        req = {"fork_exit": n} if touch is None else {"fork_exit": n, "touch": list(touch)}
        self.proc.stdin.write(json.dumps(req).encode() + b"\n")
        self.proc.stdin.flush()
        line = self._readline(60.0 + n * 0.1)
        if line is None:
            raise RuntimeError("sandbox worker died or hung during fork_exit")
        return float(json.loads(line)["wall_s"])

    def _collect(self, reply: dict, req: dict, slot: int = 0) -> dict:
        """Read (and reset) the child's output files, and decide the status."""
        limit, fds = int(req["max_output"]), self.fds[slot]
        (out, out_over), (err, err_over) = _read(fds["out"], limit), _read(fds["err"], limit)
        res_raw, _ = _read(fds["res"], int(req["max_value"]))
        try:
            res = json.loads(res_raw) if res_raw else {}
        except ValueError:  # the program scribbled on the result file: it gets no value
            res = {}
        res = res if isinstance(res, dict) else {}
        status = _status(reply["how"], reply["code"], res, out_over or err_over)
        r = {"status": status, "stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace"),
             "returncode": reply["code"], "wall_s": reply["wall_s"]}
        if req.get("call") is not None:
            values = res.get("values") if status == "ok" else None
            ok = isinstance(values, list) and all(isinstance(v, str) for v in values)
            r["values"] = values if ok else None
            if status == "ok" and not ok:
                r["status"] = "error"
                r["stderr"] += "\n[sandbox] the program exited before f returned a value"
        return r

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a stuck or dead worker: kill it, we are shutting it down anyway
            self.proc.kill()
            self.proc.wait()
        finally:
            self.proc.stdout.close()
            for fds in self.fds:
                for fd in fds.values():
                    os.close(fd)
            shutil.rmtree(self.base, ignore_errors=True)
            shutil.rmtree(self.io_dir, ignore_errors=True)


class Sandbox:
    """A pool of sandbox workers. Safe to create and close repeatedly; thread-safe ``run``."""

    def __init__(self, workers: int | None = None, timeout_s: float = 5.0, memory_mb: int = 512,
                 max_output_bytes: int = 65536, *, max_value_bytes: int = 1 << 20,
                 max_tasks_per_worker: int = 10_000, scratch_mb: int = 64, disable_layers: tuple[str, ...] = (),
                 allow_unconfined: bool | None = None, preload: tuple[str, ...] = (), batch: int = 8):
        """``disable_layers=("seccomp",)`` (or ``"userns"``) exercises the fallback path (tests, debugging);
        ``allow_unconfined`` (default: :func:`allow_unconfined_default`) lets the pool run without an essential
        layer; ``preload``: extra modules the workers import for the programs (a chrooted program can import
        nothing else), e.g. numpy for benchmark solutions; ``batch``: at most this many executions of
        :meth:`execute_many` go to a worker in one round trip (each still in its own fresh child)."""
        # two workers per core: while one waits on the trainer's pipe the other forks, so the cores stay busy
        self.n_workers = workers or 2 * (os.cpu_count() or 1)
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.max_output_bytes, self.max_value_bytes = max_output_bytes, max_value_bytes
        self.max_tasks_per_worker, self.scratch_mb = max_tasks_per_worker, scratch_mb
        self.disable_layers, self.preload = tuple(disable_layers), tuple(preload)
        self.batch = max(1, min(MAX_SLOTS, int(batch)))
        self.allow_unconfined = allow_unconfined_default() if allow_unconfined is None else allow_unconfined
        self._idle: queue.Queue[_WorkerProc] = queue.Queue()
        self._all: list[_WorkerProc] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(self.n_workers, thread_name_prefix="sandbox")
        # Every worker is started from this one thread, which lives as long as the pool: a worker dies with the
        # thread that started it (PR_SET_PDEATHSIG is sent when the parent *thread* ends, not the process), so a
        # worker started from a short-lived thread (a caller's ThreadPoolExecutor, an evaluation's per-target
        # thread) was killed when that thread ended, and its next executions came back "killed".
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawn")
        self._closed = False
        sweep_stale_dirs()
        procs = [self._spawn() for _ in range(self.n_workers)]  # start all, then wait: in parallel
        try:
            for p in procs:
                self._adopt(p)
        except BaseException:
            self._closed = True
            self._pool.shutdown(wait=False)
            self._spawner.shutdown(wait=False)
            for p in procs:
                p.close()
            raise
        self.layers = dict(procs[0].ready["layers"])
        self.unconfined = sorted(missing_essentials(self.layers))  # [] when fully confined

    def _spawn(self) -> _WorkerProc:
        return self._spawner.submit(_WorkerProc, self.scratch_mb, self.disable_layers, self.preload, self.batch).result()

    def _adopt(self, proc: _WorkerProc) -> None:
        layers = proc.wait_ready()["layers"]
        missing = missing_essentials(layers)
        if missing and not self.allow_unconfined:
            raise SandboxUnavailable(refusal_message(missing))
        for layer, state in layers.items():
            if state.startswith("off"):
                _warn_once(layer, state)
        with self._lock:
            self._all.append(proc)
        self._idle.put(proc)

    def _retire(self, proc: _WorkerProc) -> None:
        with self._lock:
            if proc in self._all:
                self._all.remove(proc)
        proc.close()
        if not self._closed:
            self._adopt(self._spawn())

    def _wire(self, r: ExecRequest) -> dict:
        return {"call": r.call, "repeat": r.repeat,
                "timeout_s": r.timeout_s or self.timeout_s, "memory_mb": r.memory_mb or self.memory_mb,
                "max_output": self.max_output_bytes, "max_value": self.max_value_bytes}

    def execute(self, request: ExecRequest) -> ExecResult:
        return self._execute_batch([request])[0]

    def _execute_batch(self, requests: list[ExecRequest]) -> list[ExecResult]:
        if self._closed:
            raise RuntimeError("Sandbox is closed")
        proc = self._idle.get()
        replies = proc.request_batch([(self._wire(r), r.program, r.stdin) for r in requests])
        if replies is None or proc.tasks >= self.max_tasks_per_worker:
            self._retire(proc)  # recycled, or dead/hung: a fresh worker takes its place
        else:
            self._idle.put(proc)
        if replies is None:
            return [ExecResult("killed", "", "[sandbox] worker died or hung; replaced", None, 0.0) for _ in requests]
        results = []
        for reply in replies:
            values = reply.pop("values", None)
            results.append(ExecResult(**reply, value=values[0] if values else None, values=values))
        return results

    def execute_many(self, requests: list[ExecRequest]) -> list[ExecResult]:
        """Concurrently across the workers, in batches of up to ``batch`` per round trip (small enough that every
        worker gets about two); results in the order of ``requests``."""
        requests = list(requests)
        size = max(1, min(self.batch, -(-len(requests) // (2 * self.n_workers))))
        chunks = [requests[i:i + size] for i in range(0, len(requests), size)]
        return [r for chunk in self._pool.map(self._execute_batch, chunks) for r in chunk]

    def run(self, program: str, *, stdin: str = "", timeout_s: float | None = None,
            memory_mb: int | None = None) -> ExecResult:
        return self.execute(ExecRequest(program, stdin, timeout_s=timeout_s, memory_mb=memory_mb))

    def run_many(self, programs: list[str], **kw) -> list[ExecResult]:
        """Concurrently across the workers; results in the order of ``programs``."""
        return self.execute_many([ExecRequest(p, **kw) for p in programs])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        with self._lock:
            procs, self._all = list(self._all), []
        for p in procs:
            p.close()
        self._spawner.shutdown(wait=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def get_sandbox() -> Sandbox:
    """A process-wide shared sandbox with default settings, closed at exit."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT._closed:
            _DEFAULT = Sandbox()
            atexit.register(_DEFAULT.close)
        return _DEFAULT
