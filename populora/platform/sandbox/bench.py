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


COW_PAGES = 256  # pages each child of the copy-on-write measurement writes (one fault each)


def _usage(pid: int) -> tuple[float, int]:
    """CPU seconds and minor page faults of a process and its reaped children (the sandboxed programs), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK"), int(fields[7]) + int(fields[8])


def _tree_usage(pid: int) -> tuple[float, int]:
    """CPU seconds and minor faults of ``pid`` and its live descendants (a worker leading a pid namespace serves
    from its child)."""
    cpu, faults, todo = 0.0, 0, [pid]
    while todo:
        p = todo.pop()
        try:
            c, f = _usage(p)
            cpu, faults = cpu + c, faults + f
            for tid in os.listdir(f"/proc/{p}/task"):
                todo += [int(x) for x in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return cpu, faults


class _Meter:
    """What the workers (and their children) and this process spent between ``start`` and ``stop``: wall
    seconds, CPU seconds of all of them, and the workers' and children's minor page faults."""

    def __init__(self, sb: Sandbox):
        self.pids = [p.proc.pid for p in sb._all]

    def _now(self) -> tuple[float, float, int]:
        usage = [_tree_usage(p) for p in self.pids]
        return time.perf_counter(), sum(c for c, _ in usage) + time.process_time(), sum(f for _, f in usage)

    def start(self) -> None:
        self.t0 = self._now()

    def stop(self) -> tuple[float, float, int]:
        return tuple(b - a for a, b in zip(self.t0, self._now()))


def bench_pool(n: int, workers: int | None = None, disable: tuple[str, ...] = ()) -> dict:
    """Isolated executions/s through the pool and CPU ms per execution (all processes included), after a
    warm-up; every result is checked. The CPU figure gives the capacity of an idle machine even when the
    machine is shared: cores * 1000 / cpu_ms. Then, on the same warm workers, the floor under it (bare fork +
    exit) and what one copy-on-write page fault costs here (see :func:`bench_cow_fault`)."""
    with Sandbox(workers=workers, disable_layers=disable, allow_unconfined=bool(disable)) as sb:
        sb.run_many([BENCH_PROGRAM] * 100)
        meter = _Meter(sb)
        meter.start()
        results = sb.run_many([BENCH_PROGRAM] * n)
        dt, cpu, faults = meter.stop()
        layers = {k: v for k, v in sb.layers.items()}
        floor = bench_fork_exit(sb, n, meter)
        cow_us = bench_cow_fault(sb, max(200, n // 4), meter)
    bad = [r for r in results if r.status != "ok" or r.stdout != "2\n"]
    if bad:
        raise RuntimeError(f"{len(bad)} of {n} pool executions failed, e.g. {bad[0]}")
    return {"execs_per_s": n / dt, "cpu_ms_per_exec": cpu / n * 1000, "faults_per_exec": faults / n,
            "fork_exit_per_s": floor["per_s"], "fork_exit_cpu_ms": floor["cpu_ms"],
            "fork_exit_faults": floor["faults"], "cow_fault_us": cow_us,
            "layers": ",".join(k for k, v in layers.items() if v == "on")}


def bench_fork_exit(sb: Sandbox, n: int, meter: _Meter | None = None,
                    touch: tuple[int, int] | None = None) -> dict:
    """The limit under the pool's rate, measured on the same warm workers right after it: every worker at once
    forks itself and its child exits at once (no isolation, no program), ``n`` in all: forks + exits per
    second, CPU ms per fork (workers, children and this process) and minor page faults per fork (workers and
    children)."""
    procs, meter = list(sb._all), meter or _Meter(sb)
    per = max(1, n // len(procs))
    with ThreadPoolExecutor(len(procs)) as ex:
        meter.start()
        list(ex.map(lambda p: p.fork_exit(per, touch), procs))
        dt, cpu, faults = meter.stop()
    m = per * len(procs)
    return {"per_s": m / dt, "cpu_ms": cpu / m * 1000, "faults": faults / m}


def bench_cow_fault(sb: Sandbox, n: int, meter: _Meter | None = None, pages: int = COW_PAGES) -> float:
    """CPU microseconds one copy-on-write page fault costs on this machine, in these workers: the same forks
    whose child writes a byte to 1 page or to ``pages`` pages of the worker before it exits, each run twice
    (alternated, the lower taken) so a burst of the host's noise does not land on one side only."""
    one, many = [], []
    for _ in range(2):
        one.append(bench_fork_exit(sb, n, meter, (pages, 1)))
        many.append(bench_fork_exit(sb, n, meter, (pages, pages)))
    extra_faults = min(r["faults"] for r in many) - min(r["faults"] for r in one)
    extra_ms = min(r["cpu_ms"] for r in many) - min(r["cpu_ms"] for r in one)
    return max(0.0, extra_ms * 1000 / max(extra_faults, 1.0))


def bench_naive(n: int) -> dict:
    """The baseline: a fresh ``python -c`` per execution, no isolation at all."""
    t0 = time.perf_counter()
    for _ in range(n):
        out = subprocess.run([sys.executable, "-c", BENCH_PROGRAM], capture_output=True, text=True, check=True)
        assert out.stdout == "2\n", out
    return {"naive_execs_per_s": n / (time.perf_counter() - t0)}


def bench_verifier(n: int = 3000, naive_n: int = 40, workers: int | None = None,
                   disable: tuple[str, ...] = ()) -> dict:
    """The figures of ``populora bench verifier --json``, rounded as printed.

    ``fault_bound_fraction`` is what the page faults alone allow: the fraction of the fork limit the pool would
    reach if its only cost above a bare fork + exit were its extra page faults, each at ``cow_fault_us``
    (CPU-bound, as the pool is): fork_exit_cpu / (fork_exit_cpu + extra faults x cost of one)."""
    pool, naive = bench_pool(n, workers, disable), bench_naive(naive_n)
    cpu_ms, cores = pool["cpu_ms_per_exec"], os.cpu_count() or 1
    extra_faults = max(0.0, pool["faults_per_exec"] - pool["fork_exit_faults"])
    bound = pool["fork_exit_cpu_ms"] / (pool["fork_exit_cpu_ms"] + extra_faults * pool["cow_fault_us"] / 1000)
    return {"execs_per_s": round(pool["execs_per_s"], 1), "naive_execs_per_s": round(naive["naive_execs_per_s"], 1),
            "ratio_vs_naive": round(pool["execs_per_s"] / naive["naive_execs_per_s"], 1),
            "cpu_ms_per_exec": round(cpu_ms, 3), "idle_capacity_execs_per_s": round(cores * 1000 / cpu_ms, 1),
            "fork_exit_per_s": round(pool["fork_exit_per_s"], 1),
            "fraction_of_fork_limit": round(pool["execs_per_s"] / pool["fork_exit_per_s"], 3),
            "fork_exit_cpu_ms": round(pool["fork_exit_cpu_ms"], 3),
            "faults_per_exec": round(pool["faults_per_exec"], 1),
            "fork_exit_faults_per_exec": round(pool["fork_exit_faults"], 1),
            "cow_fault_us": round(pool["cow_fault_us"], 2), "fault_bound_fraction": round(bound, 3),
            "uid": os.geteuid(), "layers": pool["layers"]}
