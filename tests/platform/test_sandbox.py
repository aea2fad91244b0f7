"""The sandbox against hostile programs: each test asserts the status AND that nothing escaped.

Every test here must hold both as root and as an ordinary user (user namespaces): tests/platform/test_sandbox_unprivileged.py
runs this file again as a freshly created unprivileged user when the session is root."""

from __future__ import annotations

import os
import resource
import socket
import threading
import time

import pytest
from conftest import wait_for

from populora.platform.sandbox import ExecRequest, ExecResult, Sandbox, SandboxUnavailable, get_sandbox


@pytest.fixture(scope="module")
def sb():
    with Sandbox(workers=2, timeout_s=2.0, memory_mb=256, max_output_bytes=4096) as s:
        yield s


def _children(pid: int) -> list[int]:
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                kids += [int(x) for x in fh.read().split()]
    except OSError:  # it just exited
        pass
    return kids


def leftovers(sb: Sandbox) -> list[int]:
    """Pids of live processes below the serving workers (what a program might have left behind). A worker that
    leads its own pid namespace serves from its only child; every orphan of a program comes back to it."""
    found = []
    for p in sb._all:
        serving = _children(p.proc.pid) if sb.layers.get("pidns") == "on" else [p.proc.pid]
        todo = [k for s in serving for k in _children(s)]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += _children(pid)
    return found


def assert_clean(sb: Sandbox) -> None:
    assert leftovers(sb) == [], "a program's process outlived its execution"
    for r in sb.run_many(["print('still fine')"] * 4):  # every worker still serves, nothing carried over
        assert (r.status, r.stdout) == ("ok", "still fine\n"), r


# ------------------------------------------------------------------------------------- basic behaviour


def test_ok_result_fields(sb):
    r = sb.run("import sys\nprint('out'); print('err', file=sys.stderr)")
    assert (r.status, r.stdout, r.stderr, r.returncode) == ("ok", "out\n", "err\n", 0)
    assert 0 < r.wall_s <= sb.timeout_s  # it ended "ok", so within its time limit (no wall-clock bound: load)
    assert set(r.to_json()) >= {"status", "stdout", "stderr", "returncode", "wall_s", "value"}


def test_error_and_exit_codes(sb):
    r = sb.run("raise ValueError('boom')")
    assert r.status == "error" and r.returncode == 1 and "ValueError: boom" in r.stderr
    assert sb.run("import sys; sys.exit(3)").status == "error"
    assert sb.run("import sys; sys.exit(0)").status == "ok"
    assert sb.run("import os; os._exit(0)").status == "ok"


def test_stdin_and_run_many_order(sb):
    assert sb.run("print(int(input()) * 2)", stdin="21\n").stdout == "42\n"
    results = sb.run_many([f"print({i})" for i in range(20)])
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]


def test_call_returns_canonical_values(sb):
    r = sb.execute(ExecRequest("def f(a, b):\n    return {'z': a, 'a': {b, 1}}", call="[1.0], 2", repeat=2))
    assert r.status == "ok" and r.value == "{'a': {1, 2}, 'z': [1.0]}" and r.values == [r.value] * 2
    r = sb.execute(ExecRequest("import os\ndef f():\n    os._exit(0)", call=""))
    assert r.status == "error" and r.value is None  # exiting early cannot fake a value


def test_each_execution_is_fresh(sb):
    sb.run_many(["import math\nmath.pi = 3\nopen('left.txt', 'w').write('x')"] * 4)
    for r in sb.run_many(["import math, os\nprint(math.pi, os.listdir('.'))"] * 4):
        assert r.stdout == "3.141592653589793 []\n", r


def test_recycling_and_reopen():
    with Sandbox(workers=1, max_tasks_per_worker=2) as s:
        first = s._all[0].proc.pid
        assert [r.stdout for r in s.run_many(["print(7)"] * 5)] == ["7\n"] * 5
        assert s._all[0].proc.pid != first
    with pytest.raises(RuntimeError):
        s.run("print(1)")
    with Sandbox(workers=1) as s2:  # create/close repeatedly
        assert s2.run("print(8)").stdout == "8\n"
    assert get_sandbox() is get_sandbox()


def test_a_worker_dying_under_a_batch_fails_that_batch_and_is_replaced():
    with Sandbox(workers=1, batch=4, timeout_s=1.5) as s:
        dying = s._all[0].proc
        threading.Timer(0.5, dying.kill).start()  # the trainer's handle; the worker inside dies with it
        # 4 executions, 1 worker: two batches of 2 (every worker gets about two); the first dies with its worker,
        # the second runs on the replacement
        results = s.execute_many([ExecRequest("while True:\n    pass")] * 4)
        assert [r.status for r in results] == ["killed", "killed", "timeout", "timeout"]
        assert all("worker died or hung; replaced" in r.stderr for r in results[:2])
        assert s._all[0].proc is not dying
        assert [r.stdout for r in s.run_many(["print(9)"] * 6)] == ["9\n"] * 6


# --------------------------------------------------------------------------------------- adversarial


def test_infinite_loop_times_out(sb):
    r = sb.run("while True:\n    pass", timeout_s=0.5)
    # killed by the wall-clock deadline (not by its CPU rlimit, ceil(0.5) + 1 s, nor by the fixture's 2 s), after
    # at least its 0.5 s; how soon after depends on the machine's load, so no upper bound
    assert r.status == "timeout" and r.wall_s >= 0.5
    assert_clean(sb)


def test_sigterm_ignored_and_sleep_still_killed(sb):
    prog = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(100)"
    assert sb.run(prog, timeout_s=0.5).status == "timeout"
    assert_clean(sb)


def test_fork_bomb(sb):
    r = sb.run("import os\nwhile True:\n    os.fork()")
    assert r.status == "error" and "PermissionError" in r.stderr
    r = sb.run("import os\nos.posix_spawn('/bin/sh', ['sh'], {})")
    assert r.status == "error"
    assert_clean(sb)


# A program that grows until a limit stops it gets a time limit far beyond the time it needs (milliseconds): on a
# loaded machine it may get little CPU, and the fixture's 2 s would then end it as a timeout before it reaches the
# limit under test.
SLOW_OK_S = 60


def test_memory_bomb(sb):
    assert sb.run("x = bytearray(10**10)").status == "memory"
    assert sb.run("xs = []\nwhile True:\n    xs.append(' ' * 10**6)", timeout_s=SLOW_OK_S).status == "memory"
    assert_clean(sb)


def test_huge_output_is_capped(sb):
    r = sb.run("while True:\n    print('x' * 1000)", timeout_s=SLOW_OK_S)
    assert r.status == "output_limit" and len(r.stdout) <= 4096
    assert sb.run("import sys\nsys.stderr.write('e' * 10**6)", timeout_s=SLOW_OK_S).status == "output_limit"
    assert_clean(sb)


def test_no_writes_or_deletes_outside_scratch(sb, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.chmod(tmp_path, 0o777)
    target = tmp_path / "pwned.txt"
    prog = (f"import os, shutil\nfor act in (lambda: open({str(target)!r}, 'w').write('x'), "
            f"lambda: os.remove({str(victim)!r}), lambda: shutil.rmtree({str(tmp_path)!r}), "
            "lambda: open('/tmp/pwned', 'w'), lambda: os.chdir('../../..') or open('etc/pwned', 'w')):\n"
            "    try:\n        act(); print('ESCAPED')\n    except Exception as e:\n        print(type(e).__name__)")
    r = sb.run(prog)
    assert "ESCAPED" not in r.stdout, r
    assert victim.read_text() == "keep me" and not target.exists() and not os.path.exists("/tmp/pwned")
    assert_clean(sb)


def test_no_reads_outside_scratch(sb, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-42")
    os.chmod(secret, 0o644)
    os.chmod(tmp_path, 0o755)
    prog = (f"for p in ({str(secret)!r}, '/etc/shadow', '/etc/passwd', '/proc/1/environ', '../../etc/hostname'):\n"
            "    try:\n        print(open(p).read())\n    except Exception as e:\n        print(type(e).__name__)\n"
            "import os\nprint(os.listdir('/'))")
    r = sb.run(prog)
    assert "TOPSECRET" not in r.stdout and "root:" not in r.stdout
    assert r.stdout.strip().endswith("[]"), r.stdout  # "/" is the empty scratch dir


def test_no_network(sb):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(1.5)
    port = server.getsockname()[1]
    hits = []
    t = threading.Thread(target=lambda: _accept(server, hits))
    t.start()
    prog = (f"try:\n    import socket\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n    print('CONNECTED')\n"
            "except Exception as e:\n    print(type(e).__name__)\n"
            "import ctypes\nlibc = ctypes.CDLL(None)\nprint('raw socket fd', libc.socket(2, 1, 0))")
    r = sb.run(prog)
    t.join()
    server.close()
    assert "CONNECTED" not in r.stdout and "raw socket fd -1" in r.stdout, r
    assert hits == [], "the sandboxed program reached the loopback server"


def _accept(server: socket.socket, hits: list) -> None:
    try:
        conn, _ = server.accept()
        hits.append(conn)
        conn.close()
    except OSError:
        pass


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("POPULORA_TEST_SECRET", "s3cr3t-env")
    with Sandbox(workers=1) as s:
        r = s.run("import os\nprint(dict(os.environ))\ntry:\n    print(open('/proc/self/environ').read())\n"
                  "except OSError as e:\n    print('no /proc')")
    assert "s3cr3t" not in r.stdout and r.stdout.startswith("{}"), r


def test_cannot_kill_parent_or_init(sb):
    workers = [p.proc.pid for p in sb._all]
    for prog in ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", "import os\nos.kill(1, 9)",
                 "import os\nos.kill(-1, 9)", f"import os\nos.kill({os.getpid()}, 9)"):
        assert sb.run(prog).status == "error"
    assert all(os.path.exists(f"/proc/{pid}") for pid in workers)
    assert_clean(sb)


def test_threads_and_daemons_do_not_outlive_execution(sb, tmp_path):
    marker = tmp_path / "late.txt"
    prog = ("import _thread, time, sys\n"
            "def late():\n    time.sleep(0.3)\n    print('LATE', flush=True)\n"
            f"    open({str(marker)!r}, 'w').write('x')\n"
            "for _ in range(3):\n    _thread.start_new_thread(late, ())\n"
            "try:\n    import os; os.fork()\nexcept OSError as e:\n    print('no fork')\nprint('main done')")
    r = sb.run(prog)
    assert r.status == "ok" and "main done" in r.stdout
    time.sleep(0.5)
    later = sb.run_many(["print('next')"] * 4)
    assert all(x.stdout == "next\n" for x in later) and not marker.exists()
    assert_clean(sb)


def test_deep_recursion(sb):
    r = sb.run("def r(n):\n    return r(n + 1)\nr(0)")
    assert r.status == "error" and "RecursionError" in r.stderr
    prog = "import sys\nsys.setrecursionlimit(10**7)\ndef r(n):\n    return r(n + 1)\nr(0)"
    r = sb.run(prog, timeout_s=1.0)  # frames fill the heap (memory), or the clock runs out first
    assert r.status in ("error", "killed", "memory", "timeout")
    r = sb.run("import sys\nsys.setrecursionlimit(10**7)\nx = []\nfor _ in range(3 * 10**5):\n    x = [x]\nprint(repr(x)[:5])")
    assert r.status in ("error", "killed", "memory", "timeout")  # a C stack overflow kills only this child
    assert_clean(sb)


def test_cannot_raise_limits_or_change_identity(sb):
    prog = ("import resource, os\n"
            "for act in (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (8, 8)), lambda: os.setuid(0),\n"
            "            lambda: os.chroot('/')):\n"
            "    try:\n        act(); print('ok')\n    except Exception as e:\n        print(type(e).__name__)")
    r = sb.run(prog)
    # resource reports EPERM as ValueError; even lowering a limit is refused by seccomp
    assert r.stdout.split() == ["ValueError", "PermissionError", "PermissionError"], r


def test_no_sysv_ipc_or_message_queues(sb):
    prog = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.shmget(0, 4096, 0o1666), libc.semget(0, 1, 0o1666), libc.msgget(0, 0o1666), "
            "libc.mq_open(b'/populora', 0o100 | 2, 0o666, None), ctypes.get_errno())")
    r = sb.run(prog)
    assert r.stdout.split() == ["-1", "-1", "-1", "-1", "1"], r  # every one EPERM


def test_stdin_file_cannot_carry_over(sb):
    r = sb.run("import os\nos.lseek(0, 0, 0)\nos.write(0, b'LEAKED')")
    assert r.status == "error" and "Bad file descriptor" in r.stderr, r
    for x in sb.run_many(["import sys\nprint(repr(sys.stdin.read()))"] * 4):
        assert x.stdout == "''\n", x
    assert sb.run("import sys\nprint(sys.stdin.read())", stdin="fresh").stdout == "fresh\n"


def test_no_other_processes_visible(sb):
    """Each worker leads its own pid namespace: a program sees no pid but its own worker's."""
    r = sb.run("import os\nprint(os.getpid() > 1, os.getppid())\nfor pid in (2, 3, 4, 5):\n"
               "    try:\n        os.kill(pid, 0); print('SEEN', pid)\n    except OSError as e:\n        pass")
    assert r.stdout == "True 1\n" and "SEEN" not in r.stdout, r


def test_a_batch_keeps_every_execution_apart(sb):
    """execute_many sends several executions to a worker in one round trip (one io slot each): every one still
    gets its own stdin, outputs, status and fresh child, and none can reach another's files."""
    token = os.urandom(8).hex()
    probe = ("import os\nopen_fds = []\nfor fd in range(3, 256):\n    try:\n        os.fstat(fd)\n"
             "        open_fds.append(fd)\n    except OSError:\n        pass\nprint(open_fds, input())")
    reqs = []
    for i in range(12):
        kind = i % 4
        reqs.append(ExecRequest(probe, stdin=f"in{i}\n") if kind == 0 else
                    ExecRequest(f"print('{token}{i}'); open('x', 'w').write('{token}')") if kind == 1 else
                    ExecRequest("while True: pass", timeout_s=0.5) if kind == 2 else
                    ExecRequest("def f(x):\n    return x * 2", call=str(i)))
    sb_batched = sb.batch
    results = sb.execute_many(reqs)
    assert sb_batched > 1 and len(results) == len(reqs)
    for i, r in enumerate(results):
        kind = i % 4
        if kind == 0:  # only stdin/stdout/stderr (+ the result file, fd 3): no other slot's files, its own stdin
            assert (r.status, r.stdout) == ("ok", f"[3] in{i}\n"), r
        elif kind == 1:
            assert (r.status, r.stdout) == ("ok", f"{token}{i}\n"), r
        elif kind == 2:
            assert r.status == "timeout", r
        else:
            assert (r.status, r.value) == ("ok", str(2 * i)), r
    assert_clean(sb)


def test_execresult_json_roundtrip():
    r = ExecResult("ok", "a", "", 0, 0.1, value="1")
    assert ExecResult(**r.to_json()) == r


def test_earlier_programs_and_outputs_are_not_in_worker_memory(sb):
    """A code_f candidate must not find the reference program or its outputs left in the worker's memory."""
    token = os.urandom(8).hex()
    sb.execute_many([ExecRequest(f"def f(x):\n    return 'REF{token}' + x", call="'-out'")] * 4)
    # the needle is only ever a local of probe(), so the probe cannot find itself
    probe = ("import gc, sys\ngc.unfreeze()\ndef probe(parts):\n    needle, hits, n = ''.join(parts), 0, 0\n"
             "    f = sys._getframe().f_back\n    while f:\n        hits += needle in repr(f.f_locals); n += 1\n"
             "        f = f.f_back\n    for o in gc.get_objects():\n        try:\n            hits += needle in repr(o)\n"
             "        except Exception:\n            pass\n        n += 1\n    return hits, n\n"
             "print(*probe(['R', 'E', 'F', %r]))") % token
    for r in sb.run_many([probe] * 4):
        hits, scanned = map(int, r.stdout.split())
        assert r.status == "ok" and scanned > 1000 and hits == 0, r
    control = sb.run(f"leak = {{''.join(['R', 'E', 'F', {token!r}]): 1}}\n" + probe)  # the probe does find a leak
    assert int(control.stdout.split()[0]) > 0, control


def test_without_an_essential_layer_the_sandbox_refuses(monkeypatch):
    monkeypatch.delenv("POPULORA_SANDBOX_ALLOW_UNCONFINED", raising=False)
    with pytest.raises(SandboxUnavailable, match=r"seccomp: off: disabled.*allow_unconfined: true"):
        Sandbox(workers=1, disable_layers=("seccomp",))
    if os.geteuid() != 0:  # as a user the user namespace is what makes the chroot possible
        with pytest.raises(SandboxUnavailable, match=r"chroot\+uid: off.*userns|refusing"):
            Sandbox(workers=1, disable_layers=("userns",))
        monkeypatch.setenv("POPULORA_SANDBOX_ALLOW_UNCONFINED", "1")  # the explicit opt-out runs, and says so
        with pytest.warns(RuntimeWarning, match="UNAVAILABLE"), Sandbox(workers=1, disable_layers=("userns",)) as s:
            assert s.unconfined == ["chroot+uid"] and s.run("print(3)").stdout == "3\n"


def test_fallback_without_seccomp_warns_once_and_still_contains(monkeypatch, tmp_path):
    import populora.platform.sandbox.pool as pool_mod

    monkeypatch.setattr(pool_mod, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match="'seccomp' is UNAVAILABLE"):
        s = Sandbox(workers=1, timeout_s=2.0, disable_layers=("seccomp",), allow_unconfined=True)
    with s:
        assert s.unconfined == ["seccomp"]
        assert s.layers["seccomp"].startswith("off") and s.layers["chroot+uid"] == "on"
        # fork is possible now, but RLIMIT_NPROC (enforced: we are not root in the child) caps it, and the
        # worker kills every process of its pid namespace (or uid) afterwards, including ones that left the session
        r = s.run("import os, time\nfor _ in range(100):\n    try:\n        if os.fork() == 0:\n"
                  "            os.setsid(); time.sleep(30)\n    except OSError:\n        break\nprint('forked')")
        assert "forked" in r.stdout
        wait_for(lambda: leftovers(s) == [], 60, "the forked processes to be killed")  # SIGKILL is asynchronous
        assert leftovers(s) == []
        secret = tmp_path / "secret.txt"
        secret.write_text("TOPSECRET")
        worker = s._all[0].proc.pid
        r = s.run(f"import os\nprint(os.listdir('/'))\ntry:\n    os.kill(1, 9)\n    print('ignored')\nexcept OSError as e:\n"
                  f"    print('no kill')\ntry:\n    open({str(secret)!r})\nexcept OSError:\n    print('no read')")
        # as root: another uid, EPERM; as a user: pid 1 is the worker, init of its namespace, which the kernel
        # shields from SIGKILL sent inside it
        assert r.stdout.split("\n")[0] == "[]" and r.stdout.split("\n")[1] in ("no kill", "ignored"), r
        assert r.stdout.split("\n")[2] == "no read", r
        # with seccomp off only the uid drop (root) or the capability drop (user namespace) refuses these (as a
        # user, uid 0 is not even mapped: EINVAL)
        r = s.run("import os\nfor act in (lambda: os.chroot('.'), lambda: os.setuid(0), lambda: os.setgroups([0])):\n"
                  "    try:\n        act(); print('allowed')\n    except OSError:\n        print('refused')")
        assert r.stdout.split() == ["refused"] * 3, r
        assert s.run("print(5)").stdout == "5\n" and s._all[0].proc.pid == worker  # the same worker serves on


def test_stale_dirs_of_dead_sandboxes_are_swept(tmp_path):
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from populora.platform.sandbox import sweep_stale_dirs

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = Path(tempfile.mkdtemp(prefix=f"populora-sandbox-{dead.stdout.strip()}-"))
    mine = Path(tempfile.mkdtemp(prefix=f"populora-sandbox-{os.getpid()}-"))
    sweep_stale_dirs()
    assert not stale.exists() and mine.exists()
    mine.rmdir()


def test_workers_outlive_the_threads_that_started_them():
    """A worker dies with the thread that started it (PR_SET_PDEATHSIG follows the parent thread): a pool made,
    or a worker recycled, in a short-lived thread (an evaluation's per-target thread, a caller's thread pool)
    must still run programs once that thread has ended. Before the fix these came back "killed"."""
    made = {}
    maker = threading.Thread(target=lambda: made.update(sb=Sandbox(workers=2, max_tasks_per_worker=1)))
    maker.start()
    maker.join()
    sb = made["sb"]
    try:
        time.sleep(0.3)  # SIGKILL is asynchronous
        assert [r.status for r in sb.run_many(["print(1)"] * 4)] == ["ok"] * 4
        # every execution recycled a worker (max_tasks_per_worker=1) inside sb's own thread pool; one more
        # round, from a thread that ends before the next use
        user = threading.Thread(target=lambda: sb.run("print(2)"))
        user.start()
        user.join()
        time.sleep(0.3)
        assert [r.stdout.strip() for r in sb.run_many(["print(3)"] * 4)] == ["3"] * 4
    finally:
        sb.close()


def test_workers_whose_pipes_are_past_descriptor_1024_still_answer():
    """A GPU server's core count gives the pool >1,024 descriptors (32 workers x 8 slots x 5 io files), so the
    workers' pipes land past select()'s FD_SETSIZE, where select() raised "filedescriptor out of range" at start
    (seen on a 16-core H100 machine). Here other files hold the low descriptors instead."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = len(os.listdir("/proc/self/fd")) + 1100 + 256  # open now (other tests' pools too), held, the pool's own
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"the descriptor limit ({hard}) is under the {need} this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with Sandbox(workers=1, timeout_s=2.0) as s:
            assert s._all[0].proc.stdout.fileno() >= 1024  # the case under test: a pipe past FD_SETSIZE
            assert s.run("print(6 * 7)").stdout == "42\n"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
