"""CLI handlers: ``populora sandbox exec|check`` and ``populora bench verifier``.

    python -m populora.platform.sandbox_cli exec prog.py --timeout 2
    python -m populora.platform.sandbox_cli check task.json
    python -m populora.platform.sandbox_cli bench --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from populora.platform.sandbox import Sandbox

TASK_KEYS = {
    "validate": ("program", "input"),
    "code_o": ("program", "input", "answer"),
    "code_i": ("program", "output", "answer"),
    "code_f": ("program", "inputs", "answer"),
}
TASK_FORMS = (
    '{"type": "validate", "program": P, "input": I} | {"type": "code_o", "program": P, "input": I, "answer": O} | '
    '{"type": "code_i", "program": P, "output": O, "answer": I} | '
    '{"type": "code_f", "program": P, "inputs": [I, ...], "answer": P2}'
)


class UsageError(Exception):
    """Bad input from the user: printed on stderr with exit code 2."""


def _read_text(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} {path!r} not found: give the path of an existing file")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {what} {path!r}: {e}") from None


def load_task(path: str) -> dict:
    """Read and check a TASK.json; ``UsageError`` says what is wrong and what the file should look like."""
    try:
        task = json.loads(_read_text(path, "task file"))
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON ({e}); expected one of: {TASK_FORMS}") from None
    if not isinstance(task, dict):
        raise UsageError(f"{path}: expected a JSON object, one of: {TASK_FORMS}")
    kind = task.get("type")
    if kind not in TASK_KEYS:
        raise UsageError(f"{path}: unknown or missing \"type\" {kind!r}; use one of {', '.join(TASK_KEYS)}")
    missing = [k for k in TASK_KEYS[kind] if k not in task]
    if missing:
        raise UsageError(f"{path}: a {kind} task needs key(s) {', '.join(map(repr, missing))}; form: {TASK_FORMS}")
    for key in TASK_KEYS[kind]:
        want = list if key == "inputs" else str
        if not isinstance(task[key], want) or (want is list and not all(isinstance(x, str) for x in task[key])):
            raise UsageError(f"{path}: {key!r} must be a {'list of strings' if want is list else 'string'}")
    return task


def _exec(args) -> int:
    program = _read_text(args.program, "program")
    with Sandbox(workers=1, timeout_s=args.timeout, memory_mb=args.memory_mb) as sb:
        r = sb.run(program, stdin=sys.stdin.read() if args.stdin else "")
    print(json.dumps({k: r.to_json()[k] for k in ("status", "stdout", "stderr", "returncode", "wall_s")}))
    return 0


def _check(args) -> int:
    from populora.platform.verifier import Verifier

    task = load_task(args.task)
    with Sandbox(workers=1, timeout_s=args.timeout, memory_mb=args.memory_mb) as sb:
        v = Verifier(sb, timeout_s=args.timeout, memory_mb=args.memory_mb).check(task)
    out = {"valid": v.valid, "correct": v.correct, "status": v.status, "reason": v.reason}
    if v.output is not None:
        out["output"] = v.output
    print(json.dumps(out))
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora sandbox", description="Run or check untrusted Python in the sandbox.")
    sub = p.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("exec", help="run PROGRAM.py; prints one JSON object (status, stdout, stderr, returncode, wall_s)")
    ex.add_argument("program", help="path of the Python file to run")
    ex.add_argument("--stdin", action="store_true", help="pass this command's stdin to the program")
    ch = sub.add_parser("check", help="check TASK.json; prints {valid, correct, status, reason}")
    ch.add_argument("task", help=f"path of a JSON file, one of: {TASK_FORMS}")
    for sp in (ex, ch):
        sp.add_argument("--timeout", type=float, default=5.0, help="wall-clock limit per execution, seconds")
        sp.add_argument("--memory-mb", type=int, default=512, help="address-space limit per execution, MB")
    return p


def sandbox_main(argv: list[str]) -> int:
    """Exit 0 whenever the sandbox worked (whatever the program did), 2 on bad input."""
    try:
        args = _parser().parse_args(argv)
        return _exec(args) if args.cmd == "exec" else _check(args)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    except UsageError as e:
        print(f"populora sandbox: error: {e}", file=sys.stderr)
        return 2


# ------------------------------------------------------------------------------------------- benchmark

BENCH_PROGRAM = "print(1 + 1)"


def _cpu_s(pid: int) -> float:
    """CPU seconds of a worker and its reaped children (the sandboxed programs), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def bench_pool(n: int, workers: int | None = None) -> tuple[float, float]:
    """(isolated executions/s through the pool, CPU ms per execution all processes included), after a
    warm-up; every result is checked. The CPU figure gives the capacity of an idle machine even when the
    machine is shared: cores * 1000 / cpu_ms."""
    with Sandbox(workers=workers) as sb:
        sb.run_many([BENCH_PROGRAM] * 100)
        pids = [p.proc.pid for p in sb._all]
        cpu0, own0, t0 = sum(map(_cpu_s, pids)), time.process_time(), time.perf_counter()
        results = sb.run_many([BENCH_PROGRAM] * n)
        dt = time.perf_counter() - t0
        cpu = sum(map(_cpu_s, pids)) - cpu0 + time.process_time() - own0
    bad = [r for r in results if r.status != "ok" or r.stdout != "2\n"]
    if bad:
        raise RuntimeError(f"{len(bad)} of {n} pool executions failed, e.g. {bad[0]}")
    return n / dt, cpu / n * 1000


def bench_naive(n: int) -> float:
    """The baseline: a fresh ``python -c`` per execution, no isolation at all."""
    t0 = time.perf_counter()
    for _ in range(n):
        out = subprocess.run([sys.executable, "-c", BENCH_PROGRAM], capture_output=True, text=True, check=True)
        assert out.stdout == "2\n", out
    return n / (time.perf_counter() - t0)


def bench_verifier_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="populora bench verifier", description=bench_verifier_main.__doc__)
    p.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    p.add_argument("-n", type=int, default=3000, help="executions through the pool")
    p.add_argument("--naive-n", type=int, default=40, help="executions through subprocess.run")
    p.add_argument("--workers", type=int, default=None, help="pool size (default: one per CPU core)")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    (pool, cpu_ms), naive = bench_pool(args.n, args.workers), bench_naive(args.naive_n)
    cores = os.cpu_count() or 1
    figures = {"execs_per_s": round(pool, 1), "naive_execs_per_s": round(naive, 1),
               "ratio_vs_naive": round(pool / naive, 1), "cpu_ms_per_exec": round(cpu_ms, 3),
               "idle_capacity_execs_per_s": round(cores * 1000 / cpu_ms, 1)}
    print(f"sandbox pool : {pool:8.1f} isolated execs/s  ({args.n} x {BENCH_PROGRAM!r}, results checked)")
    print(f"cpu cost     : {cpu_ms:8.3f} ms per execution, all processes -> {cores} idle cores could do "
          f"{cores * 1000 / cpu_ms:.0f}/s")
    print(f"naive        : {naive:8.1f} execs/s  (subprocess.run([python, '-c', ...]) x {args.naive_n})")
    print(f"ratio        : {pool / naive:8.1f}x")
    if args.json:
        print(json.dumps(figures))
    return 0


bench_verifier_main.__doc__ = "Isolated executions/s through the sandbox pool vs naive subprocess.run."


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        return bench_verifier_main(argv[1:])
    return sandbox_main(argv)


if __name__ == "__main__":
    sys.exit(main())
