"""What runs in the forked child: lock the process down, run the program, report a canonical value.

Order matters: rlimits and the new process group first (while still privileged), then chroot (needs root, or the
capabilities of the worker's user namespace), then the uid drop or capability drop (loses them for good), then
seccomp (denies the syscalls used above). Every path ends in
``os._exit`` so control can never return into the worker's request loop.
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import signal
import sys
import traceback

from populora.platform.sandbox import kernel as iso
from populora.platform.sandbox.values import canonical

_MEMORY = json.dumps({"status": "memory"}).encode()  # pre-built: there may be no memory left to build it


def child_main(worker, req: dict) -> None:
    code = 121
    try:
        _lock_down(worker, req)
        code = _execute(req)
    except MemoryError:
        _write_result(_MEMORY)
        code = 1
    except BaseException:  # noqa: BLE001 - setup failure: say why on stderr, never return into the worker
        try:
            os.write(2, ("[sandbox] " + traceback.format_exc()).encode(errors="replace"))
        except BaseException:
            pass
    finally:
        os._exit(code)


def _lock_down(worker, req: dict) -> None:
    """fds 0-4 are already the stdin/stdout/stderr/result/program files; the environment is already empty."""
    # own process group: the worker SIGKILLs the whole group afterwards. Not setsid(): with the kernel's
    # sched_autogroup on (the default on desktop and many server kernels) every new session gets its own CFS task
    # group, torn down again at exit: 5-8% of an execution's CPU here (docs/performance.md). A session adds nothing: the
    # worker was started in a session of its own (no controlling terminal), and the chroot leaves no tty to open.
    os.setpgid(0, 0)
    req["program"] = os.pread(4, os.fstat(4).st_size, 0).decode("utf-8", errors="replace")
    os.closerange(4, 1 << 16)  # nothing of the worker (its pipes to the trainer) stays reachable
    iso.set_limits(worker.limits)  # built by the worker before the fork
    os.chdir(worker.root)
    if worker.root_ok or worker.userns:
        os.chroot(".")  # the empty scratch dir becomes "/": nothing outside it can be named
        if worker.root_ok:
            iso.drop_privileges(worker.uid)
        else:
            iso.drop_capabilities()  # without CAP_SYS_CHROOT the chroot cannot be undone
    iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGKILL)  # the uid drop cleared it
    if os.getppid() != worker.pid:
        os._exit(122)
    if worker.fprog is not None:
        iso.load_seccomp(worker.fprog, nnp=False)  # no_new_privs: set on the worker, inherited, never cleared
    else:
        iso.prctl(iso.PR_SET_NO_NEW_PRIVS, 1)
    sys.stdin, sys.stdout, sys.stderr = worker.streams
    sys.argv = ["<program>"]


def _execute(req: dict) -> int:
    program = req["program"]
    scope = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(program, "<program>", "exec"), scope)
        if req.get("call") is not None:
            _call(scope, req)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except MemoryError:
        _write_result(_MEMORY)
        code = 1
    except BaseException as e:  # noqa: BLE001 - the program's own failure, reported like Python would
        linecache.cache["<program>"] = (len(program), None, program.splitlines(True), "<program>")  # source lines
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # tb_next: hide this harness frame
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - e.g. a closed stream; the output so far is what we report
            pass
    return code


def _call(scope: dict, req: dict) -> None:
    """``f(<args>)`` ``repeat`` times, arguments re-evaluated each time; canonical text of every result."""
    expr = compile(f"f({req['call']})", "<input>", "eval")
    values = [canonical(eval(expr, scope)) for _ in range(int(req.get("repeat", 1)))]
    data = json.dumps({"values": values}).encode()
    if len(data) > int(req.get("max_value", 1 << 20)):
        data = json.dumps({"status": "output_limit"}).encode()
    _write_result(data)


def _write_result(data: bytes) -> None:
    os.lseek(3, 0, os.SEEK_SET)
    os.ftruncate(3, 0)
    while data:
        data = data[os.write(3, data):]
