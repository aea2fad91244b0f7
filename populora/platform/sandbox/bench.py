"""``populora bench verifier``: isolated executions/s through the sandbox pool vs a naive ``subprocess.run``, and
vs the limit of the same workers (bare fork + exit, no isolation, no program), measured in the same run.

Every function returns a dict of figures; the CLI (``sandbox/cli.py``) prints them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from populora.platform.sandbox.pool import Sandbox

BENCH_PROGRAM = "print(1 + 1)"


def _cpu_s(pid: int) -> float:
    """CPU seconds of a worker and its reaped children (the sandboxed programs), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants (a worker leading a pid namespace serves from its child)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += _cpu_s(p)
            for tid in os.listdir(f"/proc/{p}/task"):
                todo += [int(x) for x in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return total


def bench_pool(n: int, workers: int | None = None, disable: tuple[str, ...] = ()) -> dict:
    """Isolated executions/s through the pool and CPU ms per execution (all processes included), after a
    warm-up; every result is checked. The CPU figure gives the capacity of an idle machine even when the
    machine is shared: cores * 1000 / cpu_ms."""
    with Sandbox(workers=workers, disable_layers=disable, allow_unconfined=bool(disable)) as sb:
        sb.run_many([BENCH_PROGRAM] * 100)
        pids = [p.proc.pid for p in sb._all]
        cpu0, own0, t0 = sum(map(_tree_cpu_s, pids)), time.process_time(), time.perf_counter()
        results = sb.run_many([BENCH_PROGRAM] * n)
        dt = time.perf_counter() - t0
        cpu = sum(map(_tree_cpu_s, pids)) - cpu0 + time.process_time() - own0
        layers = {k: v for k, v in sb.layers.items()}
        fork_exit = bench_fork_exit(sb, n)
    bad = [r for r in results if r.status != "ok" or r.stdout != "2\n"]
    if bad:
        raise RuntimeError(f"{len(bad)} of {n} pool executions failed, e.g. {bad[0]}")
    return {"execs_per_s": n / dt, "cpu_ms_per_exec": cpu / n * 1000, "fork_exit_per_s": fork_exit,
            "layers": ",".join(k for k, v in layers.items() if v == "on")}


def bench_fork_exit(sb: Sandbox, n: int) -> float:
    """The limit under the pool's rate, measured on the same warm workers right after it: every worker at once
    forks itself and its child exits at once (no isolation, no program), ``n`` in all; forks + exits per second."""
    procs = list(sb._all)
    per = max(1, n // len(procs))
    with ThreadPoolExecutor(len(procs)) as ex:
        t0 = time.perf_counter()
        list(ex.map(lambda p: p.fork_exit(per), procs))
        dt = time.perf_counter() - t0
    return per * len(procs) / dt


def bench_naive(n: int) -> dict:
    """The baseline: a fresh ``python -c`` per execution, no isolation at all."""
    t0 = time.perf_counter()
    for _ in range(n):
        out = subprocess.run([sys.executable, "-c", BENCH_PROGRAM], capture_output=True, text=True, check=True)
        assert out.stdout == "2\n", out
    return {"naive_execs_per_s": n / (time.perf_counter() - t0)}


def bench_verifier(n: int = 3000, naive_n: int = 40, workers: int | None = None,
                   disable: tuple[str, ...] = ()) -> dict:
    """The figures of ``populora bench verifier --json``, rounded as printed."""
    pool, naive = bench_pool(n, workers, disable), bench_naive(naive_n)
    cpu_ms, cores = pool["cpu_ms_per_exec"], os.cpu_count() or 1
    return {"execs_per_s": round(pool["execs_per_s"], 1), "naive_execs_per_s": round(naive["naive_execs_per_s"], 1),
            "ratio_vs_naive": round(pool["execs_per_s"] / naive["naive_execs_per_s"], 1),
            "cpu_ms_per_exec": round(cpu_ms, 3), "idle_capacity_execs_per_s": round(cores * 1000 / cpu_ms, 1),
            "fork_exit_per_s": round(pool["fork_exit_per_s"], 1),
            "fraction_of_fork_limit": round(pool["execs_per_s"] / pool["fork_exit_per_s"], 3),
            "uid": os.geteuid(), "layers": pool["layers"]}
